"""RecembVectorStore (LlamaIndex): nodes added, queried, got and deleted on the main job's path, on both embedded
stores; a long node's passages with their places; another model's one point per node; a VectorStoreIndex, its
retriever and query engine; an IngestionPipeline over a folder that re-embeds only what changed; the collection
shared with `recemb sync` and the main job's API; deletes that never act on a missing argument; the example. The
store is compared with what was given after every write."""

from __future__ import annotations

import asyncio
import hashlib
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qdrant_client")
pytest.importorskip("llama_index.core")
from llama_index.core import Document, SimpleDirectoryReader, VectorStoreIndex  # noqa: E402
from llama_index.core.base.embeddings.base import BaseEmbedding  # noqa: E402
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline  # noqa: E402
from llama_index.core.llms import MockLLM  # noqa: E402
from llama_index.core.node_parser import SentenceSplitter  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode  # noqa: E402
from llama_index.core.storage.docstore import SimpleDocumentStore  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

from recemb_integrations.framework_collection import AddError  # noqa: E402
from recemb_integrations.llama_index import RecembEmbedding, RecembVectorStore  # noqa: E402
from recemb_integrations.qdrant import CollectionMismatchError, QdrantSync, VectorError, content_hash  # noqa: E402
from recemb_integrations.stores import open_store  # noqa: E402
from tests.integrations.cli_cases import run, write  # noqa: E402
from tests.integrations.rag_examples import check_example  # noqa: E402
from tests.utils import assert_stored_dense  # noqa: E402

LONG = " ".join(f"Line {i} of the harbour log: the boats came in at dawn with herring and cod." for i in range(20))
PASSAGES = dict(passage_tokens=16, passage_overlap=4, passages_above=32)
ROOT = Path(__file__).resolve().parents[2]


def tiny_model(folder) -> RecembEmbedding:
    return RecembEmbedding(model_name=str(folder), model_kwargs={"device": "cpu", "backend": "torch"})


class HashEmbedding(BaseEmbedding):
    """Another library's model, small and deterministic: each word hashed into one of ``dim`` buckets (a bag of
    words), so texts sharing words are near."""

    dim: int = 16

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in re.findall(r"\w+", text.lower()):
            vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        vector[0] += 0.01  # never all zeros
        return vector

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)


def embedded(nodes: list, model) -> list:
    """The nodes with their embeddings, made as LlamaIndex makes them (text with its embed metadata)."""
    vectors = model.get_text_embedding_batch([n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes])
    for node, vector in zip(nodes, vectors):
        node.embedding = vector
    return nodes


def points_of(store: RecembVectorStore, with_vectors: bool = False) -> list:
    found, _ = store.collection.store.scroll(store.collection_name, limit=1000, with_payload=True)
    if with_vectors:
        return store.collection.store.retrieve(store.collection_name, [p.id for p in found], with_vectors=True)
    return found


def documents_held(store: RecembVectorStore) -> dict[str, dict]:
    """Document id -> its own point's payload."""
    return {p.payload["document_id"]: p.payload for p in points_of(store) if p.payload["kind"] == "document"}


def unit(vector) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def source(node_id: str) -> dict:
    return {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=node_id)}


def guide_nodes(model) -> list[TextNode]:
    """Two chunks of one source document ("guide") and a node of its own."""
    return embedded([
        TextNode(id_="owl", text="owls hunt at night over the fields", metadata={"topic": "owl", "year": 2020},
                 relationships=source("guide")),
        TextNode(id_="tide", text="the tide follows the moon", metadata={"topic": "tide", "year": 2022},
                 relationships=source("guide")),
        TextNode(id_="bread", text="bread needs time to rise", metadata={"topic": "bread", "year": 2024}),
    ], model)


# ---------------------------------------------------------------------- nodes in, nodes out
def test_add_query_get_delete_and_clear_round_trip(tmp_path, store_kind):
    model = HashEmbedding(model_name="hash16")
    nodes = guide_nodes(model)
    with RecembVectorStore("c", path=tmp_path / "s", store_kind=store_kind, embed_model=model,
                           index_metadata={"topic": "keyword"}) as store:
        assert store.add(nodes) == ["owl", "tide", "bread"]
        # ref_doc_id is indexed (delete(ref_doc_id) filters by it), beside the user's keys
        assert store.collection.sync.index_metadata == {"ref_doc_id": "keyword", "topic": "keyword"}
        held = documents_held(store)
        assert sorted(held) == ["bread", "owl", "tide"] and len(points_of(store)) == 3  # one point per node
        for node in nodes:  # the text without metadata, the user's metadata as given, the store's keys beside it
            payload = held[node.node_id]
            assert payload["text"] == node.text
            assert {k: v for k, v in payload["metadata"].items() if k not in ("_node", "ref_doc_id")} == node.metadata
            assert payload["metadata"].get("ref_doc_id") == ("guide" if node.node_id != "bread" else None)
        for point in points_of(store, with_vectors=True):  # each node's own vector
            node = next(n for n in nodes if n.node_id == point.payload["document_id"])
            assert_stored_dense(point.vector["dense"], unit(node.embedding), rtol=1e-5, atol=1e-6)

        vector = model.get_query_embedding("owls at night")
        result = store.query(VectorStoreQuery(query_str="owls at night", query_embedding=vector, similarity_top_k=1))
        assert result.ids == ["owl"] and len(result.similarities) == 1
        hit = result.nodes[0]
        assert hit.text == nodes[0].text and hit.metadata == {"topic": "owl", "year": 2020}
        assert hit.ref_doc_id == "guide" and hit.node_id == "owl"
        sparse = store.query(VectorStoreQuery(query_str="bread rise", mode=VectorStoreQueryMode.SPARSE,
                                              similarity_top_k=3, sparse_top_k=1))
        assert sparse.ids == ["bread"]
        assert store.query(VectorStoreQuery(query_str="bread rise", mode="text_search", similarity_top_k=1)).ids \
            == ["bread"]

        def found(filters=None, **options) -> list[str]:
            query = VectorStoreQuery(query_embedding=model.get_query_embedding("owls tide bread"),
                                     similarity_top_k=5, filters=filters, **options)
            return sorted(store.query(query).ids)

        def where(*filters, condition=FilterCondition.AND) -> MetadataFilters:
            return MetadataFilters(filters=list(filters), condition=condition)

        assert found() == ["bread", "owl", "tide"]
        assert found(where(MetadataFilter(key="topic", value="owl"))) == ["owl"]
        assert found(where(MetadataFilter(key="topic", value=["owl", "bread"], operator=FilterOperator.IN))) == [
            "bread", "owl"]
        assert found(where(MetadataFilter(key="year", value=2022, operator=FilterOperator.GTE))) == ["bread", "tide"]
        assert found(where(MetadataFilter(key="topic", value="owl", operator=FilterOperator.NE),
                           MetadataFilter(key="year", value=2024, operator=FilterOperator.LT))) == ["tide"]
        assert found(where(MetadataFilter(key="topic", value="owl"),
                           MetadataFilter(key="year", value=2023, operator=FilterOperator.GT),
                           condition=FilterCondition.OR)) == ["bread", "owl"]
        assert found(where(MetadataFilter(key="topic", value=["owl"], operator=FilterOperator.NIN))) == ["bread",
                                                                                                         "tide"]
        assert found(doc_ids=["guide"]) == ["owl", "tide"] and found(doc_ids=["bread"]) == ["bread"]
        assert found(node_ids=["tide", "bread"]) == ["bread", "tide"]
        assert found(node_ids=[]) == ["bread", "owl", "tide"]  # LlamaIndex's "no restriction" (an index's node list)
        assert found(where(MetadataFilter(key="year", value=2020)), doc_ids=["guide"]) == ["owl"]
        with pytest.raises(NotImplementedError, match="filters by"):
            found(where(MetadataFilter(key="topic", value="ow", operator=FilterOperator.TEXT_MATCH)))
        with pytest.raises(NotImplementedError, match="mmr"):
            found(mode=VectorStoreQueryMode.MMR)
        with pytest.raises(NotImplementedError, match="alpha"):
            found(alpha=0.5)
        with pytest.raises(TypeError, match="granularity"):
            store.query(VectorStoreQuery(query_embedding=vector), score_threshold=0.5)

        got = store.get_nodes(["tide", "missing", "owl"])
        assert [n.node_id for n in got] == ["tide", "owl"] and [n.text for n in got] == [nodes[1].text, nodes[0].text]
        assert got[0].metadata == nodes[1].metadata and got[0].ref_doc_id == "guide"
        assert [n.node_id for n in store.get_nodes(filters=where(MetadataFilter(key="year", value=2024)))] == ["bread"]
        assert sorted(n.node_id for n in store.get_nodes()) == ["bread", "owl", "tide"]
        assert store.get_nodes(["owl", "bread"], filters=where(MetadataFilter(key="topic", value="bread")))[0] \
            .node_id == "bread"

        store.delete("guide")  # every node of the source document
        assert sorted(documents_held(store)) == ["bread"]
        store.add(nodes)
        store.delete_nodes(["owl"])
        assert sorted(documents_held(store)) == ["bread", "tide"]
        store.delete_nodes(filters=where(MetadataFilter(key="topic", value="tide")))
        assert sorted(documents_held(store)) == ["bread"]
        store.add(nodes)
        store.delete_nodes(["owl", "bread"], filters=where(MetadataFilter(key="year", value=2020)))
        assert sorted(documents_held(store)) == ["bread", "tide"]
        store.clear()
        assert points_of(store) == [] and store.get_nodes() == []
        assert store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=3)).ids == []


def test_deletes_never_act_on_a_missing_or_mistyped_argument(tmp_path, store_kind):
    model = HashEmbedding(model_name="hash16")
    with RecembVectorStore("c", path=tmp_path / "s", store_kind=store_kind, embed_model=model) as store:
        store.add(guide_nodes(model))
        before = sorted(p.id for p in points_of(store))
        for bad in (None, ""):
            with pytest.raises(ValueError, match="needs a ref_doc_id"):
                store.delete(bad)
        for bad in (5, ["guide"]):
            with pytest.raises(TypeError, match="ref_doc_id is a string"):
                store.delete(bad)
        with pytest.raises(ValueError, match="would delete everything"):
            store.delete_nodes()
        with pytest.raises(ValueError, match="would delete everything"):
            store.delete_nodes(None, None)
        with pytest.raises(TypeError, match="one id"):
            store.delete_nodes("owl")
        with pytest.raises(TypeError, match="non-empty strings"):
            store.delete_nodes(["owl", None])
        with pytest.raises(NotImplementedError, match="exact matches"):
            store.delete_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="year", value=2000,
                                                                               operator=FilterOperator.GT)]))
        with pytest.raises(ValueError, match="empty filters would delete everything"):
            store.delete_nodes(filters=MetadataFilters(filters=[]))
        with pytest.raises(TypeError, match="MetadataFilters"):
            store.delete_nodes(filters={"topic": "owl"})
        with pytest.raises(TypeError, match="unexpected"):
            store.delete("guide", everything=True)
        store.delete_nodes([])
        store.delete("no-such-document")
        assert sorted(p.id for p in points_of(store)) == before


def test_a_long_node_gets_passages_with_their_places(tmp_path, tiny_folder, store_kind):
    model = tiny_model(tiny_folder)
    log = Document(id_="log", text=LONG, metadata={"source": "log.txt"})
    note = TextNode(id_="note", text="a short note on cod", metadata={"source": "n.txt"})
    embedded([log, note], model)
    with RecembVectorStore("c", path=tmp_path / "s", store_kind=store_kind, embed_model=model, **PASSAGES) as store:
        store.add([log, note])
        points = points_of(store)
        own = {p.payload["document_id"]: p for p in points if p.payload["kind"] == "document"}
        passages = [p.payload for p in points if p.payload["kind"] == "passage"]
        assert sorted(own) == ["log", "note"] and len(passages) > 3
        assert all(p["document_id"] == "log" and LONG[p["start"]:p["end"]] == p["text"] for p in passages)
        # The node's own vector (made by LlamaIndex from its text and embed metadata) is the document's point.
        stored, = store.collection.store.retrieve("c", [own["log"].id], with_vectors=True)
        assert_stored_dense(stored.vector["dense"], unit(log.embedding), rtol=1e-5, atol=1e-6)

        query = VectorStoreQuery(query_str="herring and cod at dawn", similarity_top_k=3)
        hits = store.query(query).nodes  # the defaults, for an LLM's context: passages, each document once
        assert sorted(h.ref_doc_id for h in hits) == ["log", "note"]
        hit = next(h for h in hits if h.ref_doc_id == "log")
        assert hit.node_id == f"log#passage-{hit.metadata['passage']}" and hit.metadata["kind"] == "passage"
        assert hit.text == LONG[hit.start_char_idx:hit.end_char_idx] and hit.metadata["line"] == 1
        assert hit.metadata["source"] == "log.txt" and "_node" not in hit.metadata
        assert "start" in hit.excluded_llm_metadata_keys and "source" not in hit.excluded_llm_metadata_keys
        short = next(h for h in hits if h.ref_doc_id == "note")  # too short for passages: whole, citable
        assert short.text == "a short note on cod" == short.text[short.start_char_idx:short.end_char_idx]
        # A query engine with the defaults answers from the passage, not the whole document.
        engine = VectorStoreIndex.from_vector_store(store, embed_model=model).as_query_engine(llm=MockLLM(),
                                                                                             similarity_top_k=2)
        sources = {n.node.ref_doc_id: n.node for n in engine.query("herring and cod at dawn").source_nodes}
        assert sorted(sources) == ["log", "note"] and len(sources["log"].text) < len(LONG) / 4
        assert sources["log"].text == LONG[sources["log"].start_char_idx:sources["log"].end_char_idx]
        several = store.query(query, granularity="passage", per_document=3).nodes  # asked for: merged spans
        spans = sorted((h.start_char_idx, h.end_char_idx) for h in several if h.ref_doc_id == "log")
        assert len(spans) >= 2 and all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
        documents = store.query(query, granularity="document")  # each document once, whole
        assert sorted(documents.ids) == ["log", "note"]
        whole = next(n for n in documents.nodes if n.node_id == "log")
        assert whole.text == LONG and whole.ref_doc_id == "log" and whole.metadata["kind"] == "document"
        assert LONG[whole.metadata["start"]:whole.metadata["end"]]  # its best passage, as evidence
        short = next(n for n in documents.nodes if n.node_id == "note")
        assert short.metadata == {"source": "n.txt"}  # a whole document no passage led to: the user's metadata


def test_another_model_gets_passages_of_its_own_and_vectors_can_come_with_the_nodes(tmp_path, tiny_folder,
                                                                                      store_kind):
    model = HashEmbedding(model_name="hash16")  # no tokenizer to be found: passages of 1,000 characters
    nodes = [TextNode(id_="log", text=LONG), TextNode(id_="tide", text="the tide follows the moon")]
    with RecembVectorStore("c", path=tmp_path / "s", store_kind=store_kind, embed_model=model, batch_size=1) as store:
        store.add(nodes)  # no embeddings given: the store embeds them with the model
        points = points_of(store, with_vectors=True)
        kinds = sorted((p.payload["document_id"], p.payload["kind"]) for p in points)
        assert kinds == [("log", "document"), ("log", "passage"), ("log", "passage"), ("tide", "document")]
        passages = []
        for point in points:
            text = next(n.text for n in nodes if n.node_id == point.payload["document_id"])
            if point.payload["kind"] == "passage":  # each passage embedded on its own, its characters the user's
                text = text[point.payload["start"]:point.payload["end"]]
                assert len(text) <= 1000
                passages.append(np.asarray(unit(model.get_text_embedding(text)), np.float64))
                assert_stored_dense(point.vector["dense"], passages[-1], rtol=1e-5)
            elif point.payload["document_id"] == "tide":  # a text that fits: embedded whole
                assert_stored_dense(point.vector["dense"], unit(model.get_text_embedding(text)), rtol=1e-5)
            assert point.vector.get("bm25") is not None  # recemb's BM25 beside it
        own = next(p for p in points if p.payload["document_id"] == "log" and p.payload["kind"] == "document")
        assert_stored_dense(own.vector["dense"], unit(sum(passages)), rtol=1e-3)  # where its passages point
        assert store.collection.sync.record.model == "llama-index:HashEmbedding:hash16"
        assert store.query(VectorStoreQuery(query_str="tide moon", similarity_top_k=1)).ids == ["tide"]
    with RecembVectorStore("c", path=tmp_path / "s", embed_model=tiny_model(tiny_folder)) as other:
        with pytest.raises(CollectionMismatchError):  # the pin: another model is refused
            other.query(VectorStoreQuery(query_str="tide", similarity_top_k=1))

    with RecembVectorStore("v", path=tmp_path / "s", store_kind=store_kind) as bare:  # no embed model
        assert bare.get_nodes() == [] and bare.query(VectorStoreQuery(query_str="x", mode="sparse")).ids == []
        bare.clear()  # nothing yet, and no vector size to open the collection with: nothing to do
        given = embedded([TextNode(id_="owl", text="owls hunt at night"), TextNode(id_="bread", text="bread rises")],
                         model)
        bare.add(given)
        assert sorted(documents_held(bare)) == ["bread", "owl"]
        assert bare.collection.sync.record.model == "llama-index:given-vectors"
        vector = model.get_query_embedding("owls at night")
        assert bare.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=1)).ids == ["owl"]
        with pytest.raises(ValueError, match="without an embed_model"):
            bare.query(VectorStoreQuery(query_str="owls", similarity_top_k=1))
        with pytest.raises(AddError, match="without an embed_model"):
            bare.add([TextNode(id_="plain", text="no vector here")])
        assert sorted(documents_held(bare)) == ["bread", "owl"]
    with RecembVectorStore("v", path=tmp_path / "s", store_kind=store_kind) as reopened:  # its size is recorded
        assert [n.node_id for n in reopened.get_nodes(["owl"])] == ["owl"]
        reopened.delete("owl")
        assert sorted(documents_held(reopened)) == ["bread"]


def test_bad_arguments_fail_before_any_write(tmp_path):
    with pytest.raises(TypeError, match="BaseEmbedding"):
        RecembVectorStore("c", path=tmp_path / "s", embed_model="not a model")
    with pytest.raises(ValueError, match="one of path"):
        RecembVectorStore("c", embed_model=HashEmbedding())
    with pytest.raises(TypeError, match="unknown option"):
        RecembVectorStore("c", path=tmp_path / "s", passage_token=8)
    with pytest.raises(ValueError, match="granularity"):
        RecembVectorStore("c", path=tmp_path / "s", granularity="chunk")
    model = HashEmbedding()
    with RecembVectorStore("c", path=tmp_path / "s", embed_model=model) as store:
        with pytest.raises(ValueError, match="'_node' is the store's own"):
            store.add(embedded([TextNode(id_="a", text="a", metadata={"_node": 1})], model))
        with pytest.raises(ValueError, match="'ref_doc_id' is the store's own"):
            store.add(embedded([TextNode(id_="a", text="a", metadata={"ref_doc_id": "x"}, relationships=source("y"))],
                               model))
        for bad, why in (([0.0] * 16, "is all zeros"), ([1.0] * 8, "has 8 values"),
                         ([float("nan")] * 16, "holds NaN")):
            with pytest.raises(VectorError, match=f"the embedding of 'b' {why}"):  # before any write
                store.add([TextNode(id_="a", text="fine", embedding=model.get_text_embedding("fine")),
                           TextNode(id_="b", text="bad", embedding=bad)])
            assert not store.collection.exists()  # not even the collection was made


# ---------------------------------------------------------------------- LlamaIndex's own paths
def test_vector_store_index_retriever_and_query_engine(tmp_path, tiny_folder, store_kind):
    model = tiny_model(tiny_folder)
    with RecembVectorStore("c", path=tmp_path / "s", store_kind=store_kind, embed_model=model, **PASSAGES) as store:
        index = VectorStoreIndex.from_vector_store(store, embed_model=model,
                                                   transformations=[SentenceSplitter(chunk_size=128, chunk_overlap=0)])
        index.insert(Document(id_="log", text=LONG, metadata={"source": "log.txt"}))  # split into chunks
        index.insert(Document(id_="tide", text="the tide follows the moon", metadata={"source": "tide.txt"}))
        held = documents_held(store)
        chunks = [p for p in held.values() if p["metadata"].get("ref_doc_id") == "log"]
        assert len(chunks) > 1 and len(held) == len(chunks) + 1  # stored as the chunks they are
        assert all(p["text"] in LONG and p["metadata"]["source"] == "log.txt" for p in chunks)
        hits = index.as_retriever(similarity_top_k=2).retrieve("herring and cod at dawn")
        assert len(hits) == 2 and all(isinstance(h.score, float) for h in hits)
        assert all(h.node.ref_doc_id in ("log", "tide") and h.node.text for h in hits)
        passages = index.as_retriever(similarity_top_k=3, vector_store_kwargs={"granularity": "passage"}).retrieve(
            "herring and cod at dawn")
        assert len(passages) == 3 and all(h.node.ref_doc_id in ("log", "tide") for h in passages)
        sparse = index.as_retriever(similarity_top_k=1, vector_store_query_mode="sparse").retrieve("tide moon")
        assert [(h.node.ref_doc_id, h.node.text) for h in sparse] == [("tide", "the tide follows the moon")]
        response = index.as_query_engine(llm=MockLLM(), similarity_top_k=2).query("Who came in at dawn?")
        assert isinstance(str(response), str) and len(response.source_nodes) == 2
        assert all(n.node.text in LONG or n.node.text == "the tide follows the moon" for n in response.source_nodes)
        index.delete_ref_doc("log")  # every chunk of the document, and their passages
        assert [p.payload["metadata"]["ref_doc_id"] for p in points_of(store)] == ["tide"]


def test_an_ingestion_pipeline_over_a_folder_embeds_only_what_changed(tmp_path, tiny_folder, store_kind, monkeypatch):
    folder = tmp_path / "docs"
    texts = {"a.txt": LONG, "b.txt": "the tide follows the moon", "c.txt": "bread needs time to rise"}
    for name, text in texts.items():
        write(folder / name, text)
    model = tiny_model(tiny_folder)
    embedded_texts: list[str] = []
    encode_documents, embed_token_ids = model.embedder.encode_documents, model.embedder.embed_token_ids
    monkeypatch.setattr(model.embedder, "encode_documents",
                        lambda texts, **kw: embedded_texts.extend(texts) or encode_documents(texts, **kw))
    monkeypatch.setattr(model.embedder, "embed_token_ids",
                        lambda ids, **kw: embedded_texts.extend(["<tokens>"] * len(ids)) or embed_token_ids(ids, **kw))

    def ids(*names):
        return sorted(str(folder / n) for n in names)

    with RecembVectorStore("c", path=tmp_path / "s", store_kind=store_kind, embed_model=model, **PASSAGES) as store:
        pipeline = IngestionPipeline(transformations=[model], vector_store=store, docstore=SimpleDocumentStore(),
                                     docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)

        def ingest():
            embedded_texts.clear()
            return pipeline.run(documents=SimpleDirectoryReader(str(folder), filename_as_id=True).load_data())

        assert len(ingest()) == 3 and embedded_texts
        held = documents_held(store)
        assert sorted(held) == ids("a.txt", "b.txt", "c.txt")
        assert {Path(d).name: p["text"] for d, p in held.items()} == texts
        assert {p.payload["document_id"] for p in points_of(store) if p.payload["kind"] == "passage"} == set(ids(
            "a.txt"))  # whole files in, passages where long
        before = sorted((p.id, p.payload.get("content_hash")) for p in points_of(store))

        assert ingest() == [] and embedded_texts == []  # unchanged: nothing embedded, nothing written
        assert sorted((p.id, p.payload.get("content_hash")) for p in points_of(store)) == before

        texts["a.txt"] = LONG.replace("cod", "eel")[:600]  # an edit replaces the document and all its passages
        write(folder / "a.txt", texts["a.txt"])
        assert len(ingest()) == 1 and embedded_texts
        held = documents_held(store)
        assert held[str(folder / "a.txt")]["text"] == texts["a.txt"]
        passages = [p.payload for p in points_of(store) if p.payload["kind"] == "passage"]
        assert passages and all(p["document_hash"] == content_hash(texts["a.txt"]) for p in passages)
        assert all(texts["a.txt"][p["start"]:p["end"]] == p["text"] and "cod" not in p["text"] for p in passages)
        assert len({p["passage"] for p in passages}) == len(passages) == held[str(folder / "a.txt")]["passages"]

        (folder / "c.txt").unlink()  # a deleted file's document goes
        assert ingest() == []
        assert sorted(documents_held(store)) == ids("a.txt", "b.txt")
        assert {p.payload["document_id"] for p in points_of(store)} == set(ids("a.txt", "b.txt"))


# ---------------------------------------------------------------------- one collection, any door
def test_a_collection_written_by_recemb_sync_answers_through_a_retriever(tmp_path, tiny_folder, capsys, store_kind):
    folder = tmp_path / "docs"
    write(folder / "log.txt", LONG)
    write(folder / "note.txt", "the tide follows the moon")
    opts = ["--model", str(tiny_folder), "--qdrant-path", str(tmp_path / "store"), "--collection", "c",
            "--store", store_kind]
    assert run(capsys, ["sync", str(folder), "--passage-tokens", "16", "--passages-above", "32", *opts])[0] == 0
    model = tiny_model(tiny_folder)
    # No setting repeated: the store reads the collection's own (passages, BM25, no stored texts).
    with RecembVectorStore("c", path=tmp_path / "store", embed_model=model) as store:
        index = VectorStoreIndex.from_vector_store(store, embed_model=model)
        hits = index.as_retriever(similarity_top_k=2).retrieve("herring and cod")  # the defaults: for an LLM
        assert sorted(h.node.ref_doc_id for h in hits) == ["log.txt", "note.txt"]
        hits = index.as_retriever(similarity_top_k=2, vector_store_kwargs={"per_document": 2}).retrieve(
            "herring and cod")
        assert hits[0].node.ref_doc_id == "log.txt"
        for hit in (h for h in hits if h.node.ref_doc_id == "log.txt"):  # no stored texts: read from the file
            node = hit.node
            assert node.node_id.startswith("log.txt#passage-") and node.ref_doc_id == "log.txt"
            assert node.text == LONG[node.start_char_idx:node.end_char_idx] and node.metadata["line"] == 1
        assert store.collection.sync.settings.passage_tokens == 16
        documents = index.as_retriever(similarity_top_k=2, vector_store_kwargs={"granularity": "document"}
                                       ).retrieve("the tide follows the moon")
        assert {h.node.node_id: h.node.text for h in documents} == {"log.txt": LONG,
                                                                    "note.txt": "the tide follows the moon"}
        write(folder / "log.txt", LONG.upper())  # the file changes: no text is made up, the note says why
        changed = store.query(VectorStoreQuery(query_str="herring and cod", similarity_top_k=2), granularity="passage")
        changed = [n for n in changed.nodes if n.ref_doc_id == "log.txt"]
        assert changed and all(n.text == "" and "changed" in n.metadata["note"] for n in changed)
    with RecembVectorStore("c", path=tmp_path / "store", embed_model=HashEmbedding()) as other:
        with pytest.raises(CollectionMismatchError):  # another model: the pin refuses it
            VectorStoreIndex.from_vector_store(other, embed_model=HashEmbedding()).as_retriever().retrieve("x")


def test_the_main_job_reads_a_collection_written_through_llama_index(tmp_path, tiny_folder, tiny_embedder,
                                                                      store_kind):
    model = tiny_model(tiny_folder)
    nodes = embedded([Document(id_="log", text=LONG, metadata={"source": "log"}),
                      Document(id_="tide", text="the tide follows the moon")], model)
    with RecembVectorStore("c", path=tmp_path / "store", store_kind=store_kind, embed_model=model,
                           **PASSAGES) as store:
        store.add(nodes)
    with open_store(path=tmp_path / "store", kind=store_kind) as s:
        sync = QdrantSync.open(s, "c", tiny_embedder)
        assert sync.settings.passage_tokens == 16 and sync.count() == 2
        assert {h.document_id for h in sync.search("the tide follows the moon", limit=2)} == {"log", "tide"}
        hits = sync.search("herring", limit=3, granularity="passage", mode="sparse")
        assert hits and all(h.document_id == "log" and LONG[h.start:h.end] == h.text for h in hits)
        assert sync.get_documents(["log"])[0].metadata["source"] == "log"


def test_async_forms(tmp_path):
    model = HashEmbedding()
    store = RecembVectorStore("c", path=tmp_path / "s", embed_model=model)
    try:
        async def go():
            await store.async_add(guide_nodes(model))
            found = await store.aquery(VectorStoreQuery(query_str="bread rise", mode="sparse", similarity_top_k=1))
            got = await store.aget_nodes(["tide"])
            await store.adelete("guide")
            after_delete = sorted(documents_held(store))
            await store.async_add(guide_nodes(model))
            await store.adelete_nodes(["bread"])
            after_nodes = sorted(documents_held(store))
            await store.aclear()
            return found.ids, [n.node_id for n in got], after_delete, after_nodes
        assert asyncio.run(go()) == (["bread"], ["tide"], ["bread"], ["owl", "tide"])
        assert points_of(store) == []
    finally:
        store.close()


def test_the_rag_example_answers_from_cited_passages_not_whole_files(tmp_path, tiny_folder):
    check_example("llama_index_query_engine.py", str(tiny_folder), tmp_path)


def test_query_names_its_options():
    """What an editor shows: ``granularity`` and ``per_document`` are named keyword parameters of ``query``."""
    import inspect

    params = inspect.signature(RecembVectorStore.query).parameters
    assert all(params[n].kind is inspect.Parameter.KEYWORD_ONLY for n in ("granularity", "per_document"))


def test_a_filtered_query_on_qdrant_edge_never_imports_qdrant_client(tmp_path):
    """LlamaIndex's filters become the main job's plain filter values (``llama_index_filters``): a query with every
    kind of them on the embedded store loads no qdrant-client (a server store translates the same values)."""
    pytest.importorskip("qdrant_edge")
    code = f"""
import sys
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import (FilterCondition, FilterOperator, MetadataFilter, MetadataFilters,
                                                  VectorStoreQuery)
from recemb_integrations.llama_index import RecembVectorStore
store = RecembVectorStore("c", path={str(tmp_path / "s")!r}, store_kind="edge", embed_model=MockEmbedding(embed_dim=8))
nodes = [TextNode(id_=k, text=k + " text", metadata={{"topic": k, "year": y}}, embedding=[float(i + 1)] * 8)
         for i, (k, y) in enumerate((("owl", 2020), ("tide", 2022), ("bread", 2024)))]
store.add(nodes)
where = MetadataFilters(filters=[MetadataFilter(key="year", value=2021, operator=FilterOperator.GT),
                                 MetadataFilters(filters=[MetadataFilter(key="topic", value="tide"),
                                                          MetadataFilter(key="topic", value=["bread"],
                                                                         operator=FilterOperator.IN)],
                                                 condition=FilterCondition.OR)])
found = store.query(VectorStoreQuery(query_embedding=[1.0] * 8, similarity_top_k=5, filters=where,
                                     doc_ids=["tide", "bread"]))
print(sorted(found.ids))
print([m for m in ("qdrant_client",) if m in sys.modules])
store.close()
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-2:] == ["['bread', 'tide']", "[]"]
