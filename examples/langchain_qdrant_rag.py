"""LangChain + Qdrant retrieval with recemb embeddings, offline, with the bundled default model.

    python3 examples/langchain_qdrant_rag.py [--model PATH_OR_ID]
"""

import argparse
from contextlib import closing
from pathlib import Path

from langchain_qdrant import QdrantVectorStore
from qdrant_client import QdrantClient, models
from recemb.core import DEFAULT_MODEL

from recemb_integrations.langchain import RecEmbEmbeddings

DOCS = sorted((Path(__file__).resolve().parent / "documents").glob("*.md"))
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=DEFAULT_MODEL)
args = parser.parse_args()

embeddings = RecEmbEmbeddings(model_name=args.model, model_kwargs={"device": "cpu"})
with closing(QdrantClient(":memory:")) as client:
    client.create_collection("docs", vectors_config=models.VectorParams(
        size=len(embeddings.embed_query("probe")), distance=models.Distance.COSINE))
    store = QdrantVectorStore(client=client, collection_name="docs", embedding=embeddings)
    store.add_texts([p.read_text() for p in DOCS], metadatas=[{"file": p.name} for p in DOCS])  # no instruction
    retriever = store.as_retriever(search_kwargs={"k": 2})  # queries get the instruction
    for doc in retriever.invoke("Why does a recurrent model need little memory?"):
        print(doc.metadata["file"], "|", doc.page_content.splitlines()[0])
