"""The main job's guarantees through the framework stores: a process killed mid-ingestion leaves no half document
visible to any search, and the rerun converges to the source; a second writer on the same embedded store gets the
store's clear "in use" error while the first holds it, not corruption. Each for LangChain's and LlamaIndex's store,
on both embedded stores, as `tests/integrations/test_faults.py` does it for the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("qdrant_client")

from recemb_integrations.qdrant import content_hash  # noqa: E402
from recemb_integrations.stores import StoreError, open_store  # noqa: E402

TEXTS = {
    "kept": "the harbour keeps its boats in winter. " * 20,
    "victim": "tides follow the moon and the sun together. " * 20,
    "after": "bread needs time to rise in a warm kitchen. " * 20,
}
OPTIONS = dict(passage_tokens=8, passages_above=0, batch_size=1)

# Ingests TEXTS through a framework store in its own process and stops for good once the victim's passages are
# written and before its own point (the one that carries its hash) is: the test checks the store there, then kills it.
RUNNER = textwrap.dedent("""
    import json, sys, time
    import recemb_integrations.qdrant.writer as q_writer
    framework, model, store_path, kind, progress, texts, options = sys.argv[1:8]
    texts, options = json.loads(texts), json.loads(options)
    complete = q_writer.DocumentWriter._complete
    def stopping_complete(self, finished, *a, **k):
        if any(item[0].id == "victim" for item in finished):
            with open(progress, "a") as f:
                f.write("passages written\\n")
            time.sleep(600)
        complete(self, finished, *a, **k)
    q_writer.DocumentWriter._complete = stopping_complete
    sys.path.insert(0, sys.argv[8])
    from tests.integrations.test_framework_guarantees import ingest
    ingest(framework, model, store_path, kind, texts, options)
""")


def ingest(framework: str, model: str, store_path: str, kind: str, texts: dict[str, str], options: dict) -> None:
    """Every text into the collection "c" through the framework's store, each under its own id."""
    if framework == "langchain":
        from langchain_core.documents import Document

        from recemb_integrations.langchain import RecembEmbeddings, RecembVectorStore

        embeddings = RecembEmbeddings(model_name=model, model_kwargs={"device": "cpu", "backend": "torch"})
        with RecembVectorStore(embeddings, "c", path=store_path, store_kind=kind, **options) as store:
            store.add_documents([Document(page_content=t, id=i) for i, t in texts.items()])
    else:
        from llama_index.core.schema import TextNode

        from recemb_integrations.llama_index import RecembEmbedding, RecembVectorStore

        embed_model = RecembEmbedding(model_name=model, model_kwargs={"device": "cpu", "backend": "torch"})
        store = RecembVectorStore(collection_name="c", path=store_path, store_kind=kind, embed_model=embed_model,
                                  **options)
        try:
            nodes = [TextNode(id_=i, text=t) for i, t in texts.items()]
            for node, vector in zip(nodes, embed_model.get_text_embedding_batch([n.text for n in nodes])):
                node.embedding = vector
            store.add(nodes)
        finally:
            store.close()


def held(store_path, kind) -> tuple[dict[str, str], list]:
    """(document id -> content hash of its own point, every point's payload)."""
    with open_store(path=store_path, kind=kind) as s:
        points, _ = s.scroll("c", limit=10_000, with_payload=True)
    payloads = [p.payload for p in points]
    return {p["document_id"]: p["content_hash"] for p in payloads if p["kind"] == "document"}, payloads


def searched_ids(framework: str, model: str, store_path, kind: str, query: str, granularity: str) -> set[str]:
    if framework == "langchain":
        from recemb_integrations.langchain import RecembEmbeddings, RecembVectorStore

        embeddings = RecembEmbeddings(model_name=model, model_kwargs={"device": "cpu", "backend": "torch"})
        with RecembVectorStore(embeddings, "c", path=store_path, store_kind=kind) as store:
            return {d.id for d in store.similarity_search(query, k=50, granularity=granularity, mode="sparse")}
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

    from recemb_integrations.llama_index import RecembEmbedding, RecembVectorStore

    embed_model = RecembEmbedding(model_name=model, model_kwargs={"device": "cpu", "backend": "torch"})
    store = RecembVectorStore(collection_name="c", path=store_path, store_kind=kind, embed_model=embed_model,
                              granularity=granularity)
    try:
        result = store.query(VectorStoreQuery(query_str=query, similarity_top_k=50,
                                              mode=VectorStoreQueryMode.SPARSE, sparse_top_k=50))
        return {n.ref_doc_id or n.node_id for n in result.nodes}
    finally:
        store.close()


@pytest.mark.parametrize("framework", ["langchain", "llama_index"])
def test_a_killed_ingestion_shows_no_half_document_and_a_second_writer_is_refused(tmp_path, tiny_folder, store_kind,
                                                                                   framework):
    if framework == "llama_index":
        pytest.importorskip("llama_index.core")
    store_path, progress = tmp_path / "store", tmp_path / "progress"
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, str(script), framework, str(tiny_folder), str(store_path), store_kind,
                             str(progress), json.dumps(TEXTS), json.dumps(OPTIONS), root], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        while not (progress.exists() and "passages written" in progress.read_text()):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.05)
        # A second writer while the first holds the store: the store's own clear error, nothing written.
        with pytest.raises(StoreError, match="in use by another process"):
            ingest(framework, str(tiny_folder), str(store_path), store_kind, {"intruder": "x " * 10}, OPTIONS)
    finally:
        proc.kill()
        proc.communicate()
    documents, payloads = held(store_path, store_kind)
    assert documents == {"kept": content_hash(TEXTS["kept"])}  # the victim's own point was never written ...
    assert any(p["document_id"] == "victim" and p["kind"] == "passage" for p in payloads)  # ... its passages were
    for granularity in ("passage", "any", "document"):  # no search shows them: only the victim has these words
        assert searched_ids(framework, str(tiny_folder), store_path, store_kind, "tides follow the moon",
                            granularity) == set()
    ingest(framework, str(tiny_folder), str(store_path), store_kind, TEXTS, OPTIONS)  # the rerun converges
    documents, payloads = held(store_path, store_kind)
    assert documents == {i: content_hash(t) for i, t in TEXTS.items()}
    for p in payloads:  # every passage is of its document's current text, none orphaned or doubled
        if p["kind"] == "passage":
            assert p["document_hash"] == documents[p["document_id"]]
            assert TEXTS[p["document_id"]][p["start"]:p["end"]] == p["text"]
    ids = [(p["document_id"], p.get("passage")) for p in payloads]
    assert len(ids) == len(set(ids))
    assert "victim" in searched_ids(framework, str(tiny_folder), store_path, store_kind, "tides follow the moon",
                                    "passage")
