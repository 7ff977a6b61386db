"""LlamaIndex ingestion into Qdrant with recemb embeddings: re-runs embed only what changed. Offline.

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
from qdrant_client import QdrantClient
from recemb.core import DEFAULT_MODEL

from recemb_integrations.llama_index import RecEmbEmbedding

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
    store = QdrantVectorStore(collection_name="docs", client=client)
    pipeline = IngestionPipeline(transformations=[SentenceSplitter(chunk_size=256), embed_model],
                                 vector_store=store, docstore=SimpleDocumentStore(),
                                 docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
    print("first run, nodes embedded:", len(pipeline.run(documents=documents(FILES))))
    print("second run (one file dropped), nodes embedded:", len(pipeline.run(documents=documents(FILES[1:]))))
    print("points in Qdrant:", client.count("docs").count)
    index = VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
    for hit in index.as_retriever(similarity_top_k=2).retrieve("How is a vector index kept up to date?"):
        print(f"{hit.score:.3f}", hit.node.metadata["path"])
