"""RecembEmbedding in LlamaIndex: batching, query path, IngestionPipeline into Qdrant, hybrid search with BM25."""

import uuid
from contextlib import closing

import numpy as np
import pytest

pytest.importorskip("llama_index.core")
from llama_index.core import Document, Settings, VectorStoreIndex  # noqa: E402
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline  # noqa: E402
from llama_index.core.node_parser import SentenceSplitter  # noqa: E402
from llama_index.core.schema import MetadataMode  # noqa: E402
from llama_index.core.storage.docstore import SimpleDocumentStore  # noqa: E402

from recemb.core import Embedder  # noqa: E402
from recemb_integrations.llama_index import RecembEmbedding  # noqa: E402
from tests.integrations.conftest import tiny_model_dir  # noqa: E402
from tests.integrations.hybrid import (  # noqa: E402
    CORPUS,
    QUERIES,
    assert_no_near_ties,
    brute_force_rankings,
    relative_score_fusion,
)

Settings.llm = None


class Spy(RecembEmbedding):
    """Records what LlamaIndex asks to embed."""

    def _get_text_embeddings(self, texts):
        self.__dict__.setdefault("_batches", []).append(list(texts))
        return super()._get_text_embeddings(texts)

    def _get_query_embedding(self, query):
        self.__dict__.setdefault("_queries", []).append(query)
        return super()._get_query_embedding(query)


@pytest.fixture(scope="module")
def reference():
    return Embedder.from_pretrained(tiny_model_dir(), device="cpu")


def spy(**kwargs):
    model = Spy(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"}, **kwargs)
    model.__dict__["_batches"], model.__dict__["_queries"] = [], []
    return model


def test_text_batches_and_query_path(reference):
    emb = spy(embed_batch_size=2, query_instruction="SciFact")
    texts = ["one", "two", "three", "four", "five"]
    vectors = emb.get_text_embedding_batch(texts)
    assert [len(b) for b in emb.__dict__["_batches"]] == [2, 2, 1]  # embed_batch_size honoured
    np.testing.assert_allclose(vectors, reference.encode_documents(texts), rtol=1e-5, atol=1e-6)
    q = emb.get_query_embedding("a claim")
    np.testing.assert_allclose(q, reference.encode_queries(["a claim"], instruction="SciFact")[0], rtol=1e-5,
                               atol=1e-6)
    assert RecembEmbedding.class_name() == "RecembEmbedding"


async def test_async_paths(reference):
    emb = RecembEmbedding(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
    q = await emb.aget_query_embedding("question")
    docs = await emb.aget_text_embedding_batch(["a", "b"])
    np.testing.assert_allclose(q, reference.encode_queries(["question"])[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(docs, reference.encode_documents(["a", "b"]), rtol=1e-5, atol=1e-6)


def test_shares_the_model_with_langchain_adapter():
    pytest.importorskip("langchain_core")
    from recemb_integrations.langchain import RecembEmbeddings

    li = RecembEmbedding(model_name=tiny_model_dir(), model_kwargs={"device": "cpu", "chunk_size": 3})
    lc = RecembEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu", "context_extension": "off"})
    assert li.embedder.model is lc._embedder.model
    # Each keeps the settings it was given (the option list is recemb.core.options.MODEL_OPTIONS for both).
    assert (li.embedder.chunk_size, lc._embedder.chunk_size) == (3, None)
    texts = ["a first text", "a second, longer text about tides and the moon"]
    np.testing.assert_array_equal(lc.embed_documents(texts),
                                  Embedder.from_pretrained(tiny_model_dir(), device="cpu").encode(texts))
    np.testing.assert_array_equal(li._get_text_embeddings(texts),
                                  Embedder.from_pretrained(tiny_model_dir(), device="cpu", chunk_size=3).encode(texts))


def corpus(b_text="Tides follow the moon. Spring tides come at new and full moon."):
    kwargs = dict(excluded_embed_metadata_keys=["path"], excluded_llm_metadata_keys=["path"])
    return [
        Document(text="State space models keep a fixed-size state. Memory does not grow.", id_="a.md",
                 metadata={"path": "a.md"}, **kwargs),
        Document(text=b_text, id_="b.md", metadata={"path": "b.md"}, **kwargs),
        Document(text="Sourdough needs a long, cold fermentation.", id_="c.md", metadata={"path": "c.md"}, **kwargs),
    ]


def test_ingestion_pipeline_upserts_and_deletes(reference):
    pytest.importorskip("llama_index.vector_stores.qdrant")
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    emb = spy()
    with closing(QdrantClient(":memory:")) as client:
        store = QdrantVectorStore(collection_name="li", client=client)
        pipeline = IngestionPipeline(transformations=[SentenceSplitter(chunk_size=64, chunk_overlap=0), emb],
                                     vector_store=store, docstore=SimpleDocumentStore(),
                                     docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
        nodes = pipeline.run(documents=corpus())
        assert client.count("li").count == len(nodes) == 3
        embedded = [t for b in emb.__dict__["_batches"] for t in b]
        assert all("path" not in t for t in embedded)  # excluded metadata stays out of the embedded text
        for node in nodes:  # vectors are plain document embeddings of the node text
            np.testing.assert_allclose(node.embedding, reference.encode_documents(
                node.get_content(metadata_mode=MetadataMode.EMBED)), rtol=1e-5, atol=1e-6)

        emb.__dict__["_batches"] = []
        changed = corpus(b_text="Tides follow the moon and the sun.")
        pipeline.run(documents=[changed[0], changed[1]])  # b changed, c removed: the full corpus each run
        embedded = [t for b in emb.__dict__["_batches"] for t in b]
        assert embedded == ["Tides follow the moon and the sun."]  # only the changed one re-embedded
        points, _ = client.scroll("li", limit=100, with_payload=True)
        assert sorted(p.payload["doc_id"] for p in points) == ["a.md", "b.md"]  # c deleted, no duplicates

        index = VectorStoreIndex.from_vector_store(store, embed_model=emb)
        hits = index.as_retriever(similarity_top_k=2).retrieve("what follows the moon?")
        assert emb.__dict__["_queries"] == ["what follows the moon?"]
        q = reference.encode_queries(["what follows the moon?"])[0]
        texts = {"a.md": changed[0].text, "b.md": changed[1].text}
        expected = sorted(((float(np.dot(q, reference.encode_documents(t))), k) for k, t in texts.items()),
                          reverse=True)  # a random tiny model: compare with the brute-force ranking
        assert [h.node.ref_doc_id for h in hits] == [k for _, k in expected]
        np.testing.assert_allclose([h.score for h in hits], [s for s, _ in expected], rtol=1e-4, atol=1e-5)


def test_without_splitter_point_ids_must_be_uuids():
    """The reference's pitfall: with no splitter the Document is the node and its id becomes the point id."""
    pytest.importorskip("llama_index.vector_stores.qdrant")
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    emb = RecembEmbedding(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
    with closing(QdrantClient(":memory:")) as client:
        store = QdrantVectorStore(collection_name="raw", client=client)
        with pytest.raises(ValueError, match="not a valid UUID"):
            IngestionPipeline(transformations=[emb], vector_store=store).run(documents=[Document(text="x", id_="a.md")])
        doc_id = str(uuid.uuid5(uuid.NAMESPACE_URL, "a.md"))
        IngestionPipeline(transformations=[emb], vector_store=store).run(documents=[Document(text="x", id_=doc_id)])
        assert client.count("raw").count == 1


# Hybrid retrieval: recemb's dense vectors and recemb's BM25 through LlamaIndex's Qdrant store, against brute force.


def test_bm25_sparse_fns_follow_llama_index_signature():
    pytest.importorskip("mmh3")
    from recemb_integrations.llama_index import bm25_sparse_fns
    from recemb_integrations.sparse import Bm25

    doc_fn, query_fn = bm25_sparse_fns(avg_len=8.0, k=1.5, b=0.5)
    texts = [*CORPUS[:2], ""]
    expected = Bm25(avg_len=8.0, k=1.5, b=0.5).embed_documents(texts)  # the settings reach the encoder
    assert doc_fn(texts) == ([list(v.indices) for v in expected], [list(v.values) for v in expected])
    query = Bm25().embed_query("Moon and tides")
    assert query_fn(["Moon and tides", ""]) == ([list(query.indices), []], [[1.0, 1.0], []])


@pytest.fixture(scope="module")
def bm25():
    pytest.importorskip("mmh3")
    from recemb_integrations.sparse import Bm25

    return Bm25()


@pytest.fixture(scope="module")
def hybrid_index():
    """CORPUS as nodes in a hybrid store whose sparse vector has Modifier.IDF; node ids are the CORPUS positions."""
    pytest.importorskip("llama_index.vector_stores.qdrant")
    from llama_index.core import StorageContext
    from llama_index.core.schema import TextNode
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient
    from qdrant_client import models as qm

    from recemb_integrations.llama_index import bm25_sparse_fns

    doc_fn, query_fn = bm25_sparse_fns()
    emb = RecembEmbedding(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
    with closing(QdrantClient(":memory:")) as client:
        store = QdrantVectorStore("hybrid", client=client, enable_hybrid=True, sparse_doc_fn=doc_fn,
                                  sparse_query_fn=query_fn,
                                  sparse_config=qm.SparseVectorParams(modifier=qm.Modifier.IDF))
        nodes = [TextNode(text=text, id_=str(uuid.UUID(int=i))) for i, text in enumerate(CORPUS)]
        yield VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(vector_store=store),
                               embed_model=emb)


@pytest.fixture(scope="module")
def rankings(reference, bm25):
    return brute_force_rankings(reference, bm25)


def assert_same_hits(hits, expected):
    """LlamaIndex's NodeWithScore hits against brute-force (CORPUS index, score); Qdrant scores in float32."""
    assert [uuid.UUID(hit.node.node_id).int for hit in hits] == [d for d, _ in expected]
    np.testing.assert_allclose([hit.score for hit in hits], [score for _, score in expected], rtol=1e-5, atol=1e-6)


def test_hybrid_collection_has_llama_index_names_and_idf(hybrid_index):
    from qdrant_client import models as qm

    params = hybrid_index.vector_store.client.get_collection("hybrid").config.params
    assert list(params.vectors) == ["text-dense"]
    assert params.sparse_vectors["text-sparse-new"].modifier == qm.Modifier.IDF


@pytest.mark.parametrize("dense_k,sparse_k,hybrid_k,alpha", [(4, 4, 4, None), (3, 6, 5, 0.3)])
def test_hybrid_retrieval_is_relative_score_fusion(hybrid_index, rankings, dense_k, sparse_k, hybrid_k, alpha):
    retriever = hybrid_index.as_retriever(vector_store_query_mode="hybrid", similarity_top_k=dense_k,
                                          sparse_top_k=sparse_k, hybrid_top_k=hybrid_k, alpha=alpha)
    for query in QUERIES:
        dense, sparse = rankings(query)
        assert_no_near_ties(dense, dense_k)
        assert_no_near_ties(sparse, sparse_k)
        assert [d for d, _ in dense[:4]] != [d for d, _ in sparse[:4]]  # a query the fusion has work to do on
        fused = relative_score_fusion(dense[:dense_k], sparse[:sparse_k], alpha=0.5 if alpha is None else alpha)
        assert_no_near_ties(fused, hybrid_k, exact_ties_allowed=True)
        assert_same_hits(retriever.retrieve(query), fused[:hybrid_k])


def test_sparse_retrieval_is_the_bm25_ranking(hybrid_index, rankings):
    retriever = hybrid_index.as_retriever(vector_store_query_mode="sparse", sparse_top_k=4)
    for query in QUERIES:
        _, expected = rankings(query)
        assert_no_near_ties(expected, 4)
        assert_same_hits(retriever.retrieve(query), expected[:4])


def test_stopword_query_ranks_by_the_dense_side(hybrid_index, rankings, bm25):
    """No sparse hits: LlamaIndex's fusion returns the dense hits as they are (cosine scores, similarity_top_k)."""
    assert len(bm25.embed_query("the of and")) == 0
    dense, _ = rankings("the of and")
    retriever = hybrid_index.as_retriever(vector_store_query_mode="hybrid", similarity_top_k=4, hybrid_top_k=2)
    assert_same_hits(retriever.retrieve("the of and"), dense[:4])


def test_empty_query_returns_nodes_without_error(hybrid_index):
    """LlamaIndex embeds no empty query (``QueryBundle.embedding_strs`` is empty), so the dense request carries no
    vector and Qdrant returns points unranked; the BM25 side is empty. Nothing fails."""
    retriever = hybrid_index.as_retriever(vector_store_query_mode="hybrid", similarity_top_k=4)
    assert len(retriever.retrieve("")) == 4
