"""An IngestionPipeline into a RecembVectorStore embeds each text once and, run again as a script would (a fresh
pipeline and docstore over unchanged files), nothing: ``EmbedInStore`` lets the store embed what its sync finds new
or changed, where LlamaIndex's own embedding transformation embeds every file it is given first. Counted at the
model (every text and passage that reaches it), on both embedded stores."""

from __future__ import annotations

import pytest

pytest.importorskip("qdrant_client")
pytest.importorskip("llama_index.core")
from llama_index.core import SimpleDirectoryReader  # noqa: E402
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402
from llama_index.core.storage.docstore import SimpleDocumentStore  # noqa: E402

from recemb_integrations.llama_index import EmbedInStore, RecEmbEmbedding, RecembVectorStore  # noqa: E402
from recemb_integrations.qdrant import content_hash  # noqa: E402
from tests.integrations.cli_cases import write  # noqa: E402

LONG = " ".join(f"Line {i} of the harbour log: the boats came in at dawn with herring and cod." for i in range(20))
PASSAGES = dict(passage_tokens=16, passage_overlap=4, passages_above=32)
TEXTS = {"a.txt": LONG, "b.txt": "the tide follows the moon", "c.txt": "bread needs time to rise"}


def counting_model(tiny_folder, monkeypatch) -> tuple[RecEmbEmbedding, list[int], list[str]]:
    """The model; the length of every sequence of ids that reaches it (``embed_token_ids``: the one way in for texts
    of this size, whole or as passages); and every text handed to it whole through ``encode_documents``."""
    model = RecEmbEmbedding(model_name=str(tiny_folder), model_kwargs={"device": "cpu", "backend": "torch"})
    sequences: list[int] = []
    texts: list[str] = []
    encode_documents, embed_token_ids = model.embedder.encode_documents, model.embedder.embed_token_ids
    monkeypatch.setattr(model.embedder, "encode_documents",
                        lambda docs, **kw: texts.extend(docs) or encode_documents(docs, **kw))
    monkeypatch.setattr(model.embedder, "embed_token_ids",
                        lambda ids, **kw: sequences.extend(map(len, ids)) or embed_token_ids(ids, **kw))
    return model, sequences, texts


def snapshot(store) -> dict[str, tuple]:
    found, _ = store.client.scroll(store.collection_name, limit=10_000, with_payload=True, with_vectors=True)
    return {p.id: (p.payload["document_id"], p.payload["kind"], p.payload.get("content_hash")
                   or p.payload.get("document_hash"), tuple(round(x, 6) for x in p.vector["dense"])) for p in found}


def run_script(folder, store, transformation) -> int:
    """What a script does: a new pipeline and docstore each run."""
    pipeline = IngestionPipeline(transformations=[transformation], vector_store=store, docstore=SimpleDocumentStore(),
                                 docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
    return len(pipeline.run(documents=SimpleDirectoryReader(str(folder), filename_as_id=True).load_data()))


def test_each_text_reaches_the_model_once_and_a_rerun_embeds_nothing(tmp_path, tiny_folder, store_kind, monkeypatch):
    folder = tmp_path / "docs"
    for name, text in TEXTS.items():
        write(folder / name, text)
    model, reached, whole = counting_model(tiny_folder, monkeypatch)
    with RecembVectorStore("c", path=tmp_path / "s", store_kind=store_kind, embed_model=model, **PASSAGES) as store:
        assert run_script(folder, store, EmbedInStore()) == 3
        held = snapshot(store)
        passages = [v for v in held.values() if v[1] == "passage"]
        assert len(passages) > 2 and {v[0] for v in passages} == {str(folder / "a.txt")}
        # the long file as its passages (its own vector their mean), each short file whole: once each, nothing else
        assert len(reached) == len(passages) + 2 and whole == []
        reached.clear()
        assert run_script(folder, store, EmbedInStore()) == 3 and reached == []  # unchanged: no text reaches it
        assert snapshot(store) == held
        write(folder / "b.txt", "the tide follows the moon and the sun")  # an edit: that file alone
        (folder / "c.txt").unlink()
        pipeline = IngestionPipeline(transformations=[EmbedInStore()], vector_store=store,
                                     docstore=SimpleDocumentStore(),
                                     docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
        pipeline.run(documents=SimpleDirectoryReader(str(folder), filename_as_id=True).load_data())
        assert len(reached) == 1  # the edited file; the long one is not embedded again
        write(folder / "c.txt", TEXTS["c.txt"])
        pipeline.run(documents=SimpleDirectoryReader(str(folder), filename_as_id=True).load_data())
        (folder / "c.txt").unlink()  # one pipeline, one docstore: UPSERTS_AND_DELETE deletes what is gone
        pipeline.run(documents=SimpleDirectoryReader(str(folder), filename_as_id=True).load_data())
        now = snapshot(store)
        assert {v[0] for v in now.values()} == {str(folder / "a.txt"), str(folder / "b.txt")}
        assert {v for k, v in now.items() if v[0].endswith("a.txt")} == {v for v in held.values()
                                                                        if v[0].endswith("a.txt")}
        assert now[next(k for k, v in now.items() if v[0].endswith("b.txt"))][2] == content_hash(
            "the tide follows the moon and the sun")


def test_llama_indexs_own_embedding_transformation_still_works_and_costs_what_it_costs(tmp_path, tiny_folder,
                                                                                      monkeypatch):
    folder = tmp_path / "docs"
    for name, text in TEXTS.items():
        write(folder / name, text)
    model, reached, whole = counting_model(tiny_folder, monkeypatch)
    with RecembVectorStore("c", path=tmp_path / "s", embed_model=model, **PASSAGES) as store:
        assert run_script(folder, store, model) == 3
        held = snapshot(store)
        passages = sum(v[1] == "passage" for v in held.values())
        # LlamaIndex embeds every file first (the long one too, whose vector the store does not use), then the store
        # its passages: what EmbedInStore saves
        assert len(reached) == 3 + passages and len(whole) == 3 and max(reached) > 100
        reached.clear()
        assert run_script(folder, store, model) == 3 and len(reached) == 3  # a rerun: every file again
        assert snapshot(store) == held


def test_marked_nodes_need_a_store_that_embeds(tmp_path, tiny_folder):
    nodes = EmbedInStore()([TextNode(id_="a", text="gulls"), TextNode(id_="b", text="tides", embedding=[0.6, 0.8])])
    assert nodes[0].embedding == [] and nodes[1].embedding == [0.6, 0.8]  # a real embedding is kept
    with RecembVectorStore("c", path=tmp_path / "s") as store:  # no embed model: nothing to embed with
        with pytest.raises(ValueError, match="no embed_model.*nothing was written"):
            store.add(nodes)
        assert not store.client.collection_exists("c")
