"""RecEmbEmbeddings: LangChain's standard suites, the shared model, async, and langchain-qdrant."""

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
from recemb_integrations.langchain import RecEmbEmbeddings  # noqa: E402
from tests.integrations.conftest import tiny_model_dir  # noqa: E402
from tests.utils import SAMPLE_TEXT  # noqa: E402


class TestRecEmbEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self):
        return RecEmbEmbeddings

    @property
    def embedding_model_params(self):
        return {"model_name": tiny_model_dir(), "model_kwargs": {"device": "cpu"}}


class TestRecEmbEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self):
        return RecEmbEmbeddings

    @property
    def embedding_model_params(self):
        return {"model_name": tiny_model_dir(), "model_kwargs": {"device": "cpu"}}


@pytest.fixture(scope="module")
def reference():
    return Embedder.from_pretrained(tiny_model_dir(), device="cpu")


def test_documents_plain_queries_instructed(reference):
    emb = RecEmbEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"}, query_instruction="SciFact",
                           encode_kwargs={"batch_size": 2})
    texts = ["first", "a second, longer text", ""]
    np.testing.assert_allclose(emb.embed_documents(texts), reference.encode_documents(texts), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(emb.embed_query("a claim"), reference.encode_queries(["a claim"],
                                                                                    instruction="SciFact")[0],
                               rtol=1e-5, atol=1e-6)
    assert isinstance(emb.embed_query("x")[0], float)


def test_one_model_per_model_device_dtype():
    a = RecEmbEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
    b = RecEmbEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu", "vertical_chunk_size": 4})
    c = RecEmbEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu", "dtype": "bfloat16"})
    assert a._embedder.model is b._embedder.model  # shared weights, own settings
    assert b._embedder.vertical_chunk_size == 4 and a._embedder.vertical_chunk_size is None
    assert c._embedder.model is not a._embedder.model


def test_unknown_options_are_rejected():
    with pytest.raises(ValueError, match="unknown model_kwargs"):
        RecEmbEmbeddings(model_name=tiny_model_dir(), model_kwargs={"devcie": "cpu"})
    with pytest.raises(ValueError):
        RecEmbEmbeddings(model_name=tiny_model_dir(), surprise=1)


async def test_async_does_not_block_the_event_loop():
    emb = RecEmbEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
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
    original_docs, original_query = RecEmbEmbeddings.embed_documents, RecEmbEmbeddings.embed_query
    monkeypatch.setattr(RecEmbEmbeddings, "embed_documents",
                        lambda self, texts: calls["documents"].append(list(texts)) or original_docs(self, texts))
    monkeypatch.setattr(RecEmbEmbeddings, "embed_query",
                        lambda self, text: calls["query"].append(text) or original_query(self, text))
    emb = RecEmbEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
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
