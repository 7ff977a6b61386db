"""LlamaIndex ingestion into Qdrant with recemb, hybrid search (dense + recemb's BM25), two ways; re-runs embed only
what changed. Offline.

    python3 examples/llamaindex_ingestion.py [--model PATH_OR_ID]

1. recemb's own store (``RecembVectorStore``, Qdrant Edge in a folder): ``EmbedInStore()`` leaves the embedding to
   the store, whose sync embeds each new or changed file once (a long one as its passages), so the script run again
   over unchanged files (a new pipeline and docstore) embeds nothing. Within one pipeline and docstore,
   ``UPSERTS_AND_DELETE`` deletes a dropped file.
2. LlamaIndex's ``QdrantVectorStore`` with recemb embeddings and ``bm25_sparse_fns``: such a store takes the vectors
   the pipeline made, so the embed model is a transformation (after a splitter), and a new docstore embeds every
   chunk again.
"""

import argparse
import tempfile
import time
from contextlib import closing
from pathlib import Path

from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient, models

from recemb.core import DEFAULT_MODEL
from recemb_integrations.llama_index import EmbedInStore, RecembEmbedding, RecembVectorStore, bm25_sparse_fns

Settings.llm = None
FILES = sorted((Path(__file__).resolve().parent / "documents").glob("*.md"))
QUESTION = "Why does a recurrent model need little memory for long inputs?"
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=DEFAULT_MODEL)
args = parser.parse_args()


def documents(files):  # stable ids; the path is metadata but stays out of the embedded text
    return [Document(text=f.read_text(), id_=f.name, metadata={"path": f.name}, excluded_embed_metadata_keys=["path"])
            for f in files]


def pipeline(transformations, store):
    return IngestionPipeline(transformations=transformations, vector_store=store, docstore=SimpleDocumentStore(),
                             docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)


embed_model = RecembEmbedding(model_name=args.model, model_kwargs={"device": "cpu"}, embed_batch_size=8)

print("1. RecembVectorStore, transformations=[EmbedInStore()]")
with tempfile.TemporaryDirectory() as tmp, RecembVectorStore(collection_name="docs", path=Path(tmp) / "store",
                                                             embed_model=embed_model) as store:
    for run in ("first run", "run again (a new pipeline and docstore, files unchanged)"):
        start = time.perf_counter()
        pipeline([EmbedInStore()], store).run(documents=documents(FILES))  # the store skips unchanged files
        print(f"   {run}: {time.perf_counter() - start:.2f} s")
    ingest = pipeline([EmbedInStore()], store)
    ingest.run(documents=documents(FILES))
    ingest.run(documents=documents(FILES[1:]))  # the same docstore: the dropped file is deleted from the store
    print("   documents in the collection after one file was dropped:", len(store.get_nodes()))
    retriever = VectorStoreIndex.from_vector_store(store, embed_model=embed_model).as_retriever(
        similarity_top_k=2)  # the collection's default: hybrid, fused in Qdrant; each document's best passage
    for hit in retriever.retrieve(QUESTION):
        print(f"   {hit.score:.3f}", hit.node.ref_doc_id)

print("2. LlamaIndex's QdrantVectorStore, transformations=[SentenceSplitter(...), embed_model]")
with closing(QdrantClient(":memory:")) as client:
    bm25_documents, bm25_queries = bm25_sparse_fns()
    store = QdrantVectorStore(collection_name="docs", client=client, enable_hybrid=True, sparse_doc_fn=bm25_documents,
                              sparse_query_fn=bm25_queries,  # BM25's IDF comes from Qdrant: LlamaIndex leaves it off
                              sparse_config=models.SparseVectorParams(modifier=models.Modifier.IDF))
    ingest = pipeline([SentenceSplitter(chunk_size=256), embed_model], store)
    print("   first run, nodes embedded:", len(ingest.run(documents=documents(FILES))))
    print("   second run (one file dropped), nodes embedded:", len(ingest.run(documents=documents(FILES[1:]))))
    print("   points in Qdrant:", client.count("docs").count)
    index = VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
    retriever = index.as_retriever(vector_store_query_mode="hybrid", similarity_top_k=3, sparse_top_k=3,
                                   hybrid_top_k=2)  # 3 dense + 3 BM25 hits, min-max normalised, mixed 0.5 / 0.5
    for hit in retriever.retrieve(QUESTION):
        print(f"   {hit.score:.3f}", hit.node.metadata["path"])
