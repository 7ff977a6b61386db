"""LlamaIndex ingestion into Qdrant with recemb embeddings and recemb's BM25 (hybrid search); re-runs embed only what
changed. Offline.

    python3 examples/llamaindex_ingestion.py [--model PATH_OR_ID]
"""

import argparse
from contextlib import closing
from pathlib import Path

from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient, models

from recemb.core import DEFAULT_MODEL
from recemb_integrations.llama_index import RecEmbEmbedding, bm25_sparse_fns

Settings.llm = None
FILES = sorted((Path(__file__).resolve().parent / "documents").glob("*.md"))
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=DEFAULT_MODEL)
args = parser.parse_args()


def documents(files):  # stable ids; the path is metadata but stays out of the embedded text
    return [Document(text=f.read_text(), id_=f.name, metadata={"path": f.name}, excluded_embed_metadata_keys=["path"])
            for f in files]


embed_model = RecEmbEmbedding(model_name=args.model, model_kwargs={"device": "cpu"}, embed_batch_size=8)
with closing(QdrantClient(":memory:")) as client:
    bm25_documents, bm25_queries = bm25_sparse_fns()
    store = QdrantVectorStore(collection_name="docs", client=client, enable_hybrid=True, sparse_doc_fn=bm25_documents,
                              sparse_query_fn=bm25_queries,  # BM25's IDF comes from Qdrant: LlamaIndex leaves it off
                              sparse_config=models.SparseVectorParams(modifier=models.Modifier.IDF))
    pipeline = IngestionPipeline(transformations=[SentenceSplitter(chunk_size=256), embed_model],
                                 vector_store=store, docstore=SimpleDocumentStore(),
                                 docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
    print("first run, nodes embedded:", len(pipeline.run(documents=documents(FILES))))
    print("second run (one file dropped), nodes embedded:", len(pipeline.run(documents=documents(FILES[1:]))))
    print("points in Qdrant:", client.count("docs").count)
    index = VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
    retriever = index.as_retriever(vector_store_query_mode="hybrid", similarity_top_k=3, sparse_top_k=3,
                                   hybrid_top_k=2)  # 3 dense + 3 BM25 hits, min-max normalised, mixed 0.5 / 0.5
    for hit in retriever.retrieve("Why does a recurrent model need little memory for long inputs?"):
        print(f"{hit.score:.3f}", hit.node.metadata["path"])
