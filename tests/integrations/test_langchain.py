"""RecembEmbeddings: LangChain's standard suites, the shared model, async, langchain-qdrant dense and hybrid."""

import asyncio
import time
from contextlib import closing

import numpy as np
import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain_tests")
from langchain_tests.integration_tests import EmbeddingsIntegrationTests  # noqa: E402
from langchain_tests.unit_tests import EmbeddingsUnitTests  # noqa: E402

from recemb.core import Embedder  # noqa: E402
from recemb_integrations.langchain import RecembEmbeddings  # noqa: E402
from tests.integrations.conftest import tiny_model_dir  # noqa: E402
from tests.integrations.hybrid import (  # noqa: E402
    CORPUS,
    QUERIES,
    assert_no_near_ties,
    brute_force_rankings,
    reciprocal_rank_fusion,
)
from tests.utils import SAMPLE_TEXT  # noqa: E402


class TestRecembEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self):
        return RecembEmbeddings

    @property
    def embedding_model_params(self):
        return {"model_name": tiny_model_dir(), "model_kwargs": {"device": "cpu"}}


class TestRecembEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self):
        return RecembEmbeddings

    @property
    def embedding_model_params(self):
        return {"model_name": tiny_model_dir(), "model_kwargs": {"device": "cpu"}}


@pytest.fixture(scope="module")
def reference():
    return Embedder.from_pretrained(tiny_model_dir(), device="cpu")


def test_documents_plain_queries_instructed(reference):
    emb = RecembEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"}, query_instruction="SciFact",
                           encode_kwargs={"batch_size": 2})
    texts = ["first", "a second, longer text", ""]
    np.testing.assert_allclose(emb.embed_documents(texts), reference.encode_documents(texts), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(emb.embed_query("a claim"), reference.encode_queries(["a claim"],
                                                                                    instruction="SciFact")[0],
                               rtol=1e-5, atol=1e-6)
    assert isinstance(emb.embed_query("x")[0], float)


def test_one_model_per_model_device_dtype():
    a = RecembEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
    b = RecembEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu", "vertical_chunk_size": 4})
    c = RecembEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu", "dtype": "bfloat16"})
    assert a._embedder.model is b._embedder.model  # shared weights, own settings
    assert b._embedder.vertical_chunk_size == 4 and a._embedder.vertical_chunk_size is None
    assert c._embedder.model is not a._embedder.model


def test_unknown_options_are_rejected():
    with pytest.raises(ValueError, match="unknown model_kwargs"):
        RecembEmbeddings(model_name=tiny_model_dir(), model_kwargs={"devcie": "cpu"})
    with pytest.raises(ValueError):
        RecembEmbeddings(model_name=tiny_model_dir(), surprise=1)


async def test_async_does_not_block_the_event_loop():
    emb = RecembEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
    long_text = SAMPLE_TEXT * 300
    ticks = []

    async def ticker():
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.005)

    task = asyncio.create_task(ticker())
    start = time.perf_counter()
    vectors = await emb.aembed_documents([long_text])
    elapsed = time.perf_counter() - start
    task.cancel()
    assert len(vectors) == 1 and elapsed > 0.05
    assert len([t for t in ticks if start < t < start + elapsed]) >= 3  # the loop kept running meanwhile


def test_langchain_qdrant_store(reference, monkeypatch):
    pytest.importorskip("langchain_qdrant")
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient
    from qdrant_client import models as qm

    calls = {"documents": [], "query": []}
    original_docs, original_query = RecembEmbeddings.embed_documents, RecembEmbeddings.embed_query
    monkeypatch.setattr(RecembEmbeddings, "embed_documents",
                        lambda self, texts: calls["documents"].append(list(texts)) or original_docs(self, texts))
    monkeypatch.setattr(RecembEmbeddings, "embed_query",
                        lambda self, text: calls["query"].append(text) or original_query(self, text))
    emb = RecembEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
    texts = ["state space models keep a fixed state", "bread needs a long fermentation", "tides follow the moon"]
    metadatas = [{"topic": "ml"}, {"topic": "food"}, {"topic": "sea"}]
    with closing(QdrantClient(":memory:")) as client:
        client.create_collection("lc", vectors_config=qm.VectorParams(size=reference.dim, distance=qm.Distance.COSINE))
        store = QdrantVectorStore(client=client, collection_name="lc", embedding=emb)
        ids = store.add_texts(texts, metadatas=metadatas)
        assert texts in calls["documents"]  # documents went through embed_documents
        points = client.retrieve("lc", ids, with_vectors=True)
        by_text = {p.payload["page_content"]: p.vector for p in points}
        np.testing.assert_allclose([by_text[t] for t in texts], reference.encode_documents(texts), rtol=1e-5,
                                   atol=1e-6)
        hits = store.similarity_search_with_score("fixed state", k=3)
        assert calls["query"] == ["fixed state"]
        q = reference.encode_queries(["fixed state"])[0]
        expected = sorted(((float(np.dot(q, v)), t) for t, v in zip(texts, reference.encode_documents(texts))),
                          reverse=True)
        assert [d.page_content for d, _ in hits] == [t for _, t in expected]
        np.testing.assert_allclose([s for _, s in hits], [s for s, _ in expected], rtol=1e-4, atol=1e-5)
        food = store.similarity_search("anything", k=3, filter=qm.Filter(must=[qm.FieldCondition(
            key="metadata.topic", match=qm.MatchValue(value="food"))]))
        assert [d.page_content for d in food] == ["bread needs a long fermentation"]


# Hybrid retrieval: recemb's dense vectors and recemb's BM25 through langchain-qdrant, against brute force.


@pytest.fixture(scope="module")
def bm25():
    pytest.importorskip("langchain_qdrant")
    from recemb_integrations.sparse import Bm25

    return Bm25()


def test_bm25_sparse_embeddings_are_recemb_bm25_vectors():
    pytest.importorskip("langchain_qdrant")
    from langchain_qdrant import SparseEmbeddings, SparseVector

    from recemb_integrations.langchain_sparse import RecembBm25SparseEmbeddings
    from recemb_integrations.sparse import Bm25

    sparse = RecembBm25SparseEmbeddings(avg_len=8.0, k=1.5, b=0.5)
    assert isinstance(sparse, SparseEmbeddings)
    texts = [*CORPUS[:3], ""]
    expected = Bm25(avg_len=8.0, k=1.5, b=0.5).embed_documents(texts)  # the settings reach the encoder
    got = sparse.embed_documents(texts)
    assert all(isinstance(v, SparseVector) for v in got)
    assert [(v.indices, v.values) for v in got] == [(list(e.indices), list(e.values)) for e in expected]
    query = sparse.embed_query("Moon and tides")
    assert (query.indices, query.values) == (list(Bm25().embed_query("Moon and tides").indices), [1.0, 1.0])


async def test_bm25_sparse_embeddings_async():
    pytest.importorskip("langchain_qdrant")
    from recemb_integrations.langchain_sparse import RecembBm25SparseEmbeddings

    sparse = RecembBm25SparseEmbeddings()
    assert await sparse.aembed_documents(CORPUS[:2]) == sparse.embed_documents(CORPUS[:2])
    assert await sparse.aembed_query("moon") == sparse.embed_query("moon")


@pytest.fixture(scope="module", params=["from_texts", "own_collection"])
def hybrid_store(request, reference):
    """A HYBRID store over CORPUS whose sparse vector has Modifier.IDF, built the two ways a user would."""
    pytest.importorskip("langchain_qdrant")
    from langchain_qdrant import QdrantVectorStore, RetrievalMode
    from qdrant_client import QdrantClient
    from qdrant_client import models as qm

    from recemb_integrations.langchain_sparse import RecembBm25SparseEmbeddings

    emb = RecembEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
    if request.param == "from_texts":
        store = QdrantVectorStore.from_texts(
            CORPUS, embedding=emb, sparse_embedding=RecembBm25SparseEmbeddings(), retrieval_mode=RetrievalMode.HYBRID,
            sparse_vector_params={"modifier": qm.Modifier.IDF}, location=":memory:", collection_name="hybrid")
    else:
        client = QdrantClient(":memory:")
        client.create_collection(
            "hybrid", vectors_config=qm.VectorParams(size=reference.dim, distance=qm.Distance.COSINE),
            sparse_vectors_config={"langchain-sparse": qm.SparseVectorParams(modifier=qm.Modifier.IDF)})
        store = QdrantVectorStore(client, "hybrid", embedding=emb, sparse_embedding=RecembBm25SparseEmbeddings(),
                                  retrieval_mode=RetrievalMode.HYBRID)
        store.add_texts(CORPUS)
    with closing(store.client):
        yield store


@pytest.fixture(scope="module")
def rankings(reference, bm25):
    return brute_force_rankings(reference, bm25)


def assert_same_hits(hits, expected):
    """LangChain's (document, score) hits against brute-force (CORPUS index, score); Qdrant scores in float32."""
    assert [CORPUS.index(doc.page_content) for doc, _ in hits] == [d for d, _ in expected]
    np.testing.assert_allclose([score for _, score in hits], [score for _, score in expected], rtol=1e-5)


@pytest.mark.parametrize("k", [3, 6])
def test_hybrid_search_is_rrf_of_dense_and_bm25_rankings(hybrid_store, rankings, k):
    from qdrant_client import models as qm

    sparse_config = hybrid_store.client.get_collection("hybrid").config.params.sparse_vectors["langchain-sparse"]
    assert sparse_config.modifier == qm.Modifier.IDF
    for query in QUERIES:
        dense, sparse = rankings(query)
        assert_no_near_ties(dense, k)
        assert_no_near_ties(sparse, k)
        dense_top, sparse_top = [d for d, _ in dense[:k]], [d for d, _ in sparse[:k]]
        assert dense_top != sparse_top  # a query the fusion has work to do on
        expected = reciprocal_rank_fusion([dense_top, sparse_top], limit=k)  # both prefetches take k
        hits = hybrid_store.similarity_search_with_score(query, k=k)
        assert_same_hits(hits, expected)
        retrieved = hybrid_store.as_retriever(search_kwargs={"k": k}).invoke(query)
        assert [CORPUS.index(doc.page_content) for doc in retrieved] == [d for d, _ in expected]


def test_sparse_mode_is_the_bm25_ranking(hybrid_store, rankings):
    from langchain_qdrant import QdrantVectorStore, RetrievalMode

    from recemb_integrations.langchain_sparse import RecembBm25SparseEmbeddings

    sparse_only = QdrantVectorStore(hybrid_store.client, "hybrid", sparse_embedding=RecembBm25SparseEmbeddings(),
                                    retrieval_mode=RetrievalMode.SPARSE)
    for query in QUERIES:
        _, expected = rankings(query)
        assert_no_near_ties(expected, 4)
        assert_same_hits(sparse_only.similarity_search_with_score(query, k=4), expected[:4])


@pytest.mark.parametrize("query", ["", "the of and"])
def test_query_without_bm25_terms_ranks_by_the_dense_side(hybrid_store, rankings, bm25, query):
    assert len(bm25.embed_query(query)) == 0  # empty and stopword-only queries have no sparse terms
    dense, _ = rankings(query)
    hits = hybrid_store.similarity_search_with_score(query, k=4)
    assert_same_hits(hits, reciprocal_rank_fusion([[d for d, _ in dense[:4]]], limit=4))


def test_langchain_qdrant_creates_sparse_vectors_without_idf_unless_asked():
    """Why the docs insist on ``sparse_vector_params``: BM25 without Qdrant's IDF ranks wrongly, silently."""
    pytest.importorskip("langchain_qdrant")
    from langchain_qdrant import QdrantVectorStore, RetrievalMode

    from recemb_integrations.langchain_sparse import RecembBm25SparseEmbeddings

    emb = RecembEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
    store = QdrantVectorStore.from_texts(["x"], embedding=emb, sparse_embedding=RecembBm25SparseEmbeddings(),
                                         retrieval_mode=RetrievalMode.HYBRID, location=":memory:",
                                         collection_name="plain")
    with closing(store.client):
        assert store.client.get_collection("plain").config.params.sparse_vectors["langchain-sparse"].modifier is None
