"""RecEmbEmbedding in LlamaIndex: batching, query path, IngestionPipeline into Qdrant with upserts and deletes."""

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
from recemb_integrations.llama_index import RecEmbEmbedding  # noqa: E402
from tests.integrations.conftest import tiny_model_dir  # noqa: E402

Settings.llm = None


class Spy(RecEmbEmbedding):
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
    assert RecEmbEmbedding.class_name() == "RecEmbEmbedding"


async def test_async_paths(reference):
    emb = RecEmbEmbedding(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
    q = await emb.aget_query_embedding("question")
    docs = await emb.aget_text_embedding_batch(["a", "b"])
    np.testing.assert_allclose(q, reference.encode_queries(["question"])[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(docs, reference.encode_documents(["a", "b"]), rtol=1e-5, atol=1e-6)


def test_shares_the_model_with_langchain_adapter():
    pytest.importorskip("langchain_core")
    from recemb_integrations.langchain import RecEmbEmbeddings

    li = RecEmbEmbedding(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
    lc = RecEmbEmbeddings(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
    assert li.embedder.model is lc._embedder.model


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

    emb = RecEmbEmbedding(model_name=tiny_model_dir(), model_kwargs={"device": "cpu"})
    with closing(QdrantClient(":memory:")) as client:
        store = QdrantVectorStore(collection_name="raw", client=client)
        with pytest.raises(ValueError, match="not a valid UUID"):
            IngestionPipeline(transformations=[emb], vector_store=store).run(documents=[Document(text="x", id_="a.md")])
        doc_id = str(uuid.uuid5(uuid.NAMESPACE_URL, "a.md"))
        IngestionPipeline(transformations=[emb], vector_store=store).run(documents=[Document(text="x", id_=doc_id)])
        assert client.count("raw").count == 1
