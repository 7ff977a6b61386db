"""LangChain + Qdrant hybrid retrieval: recemb embeddings and recemb's BM25, fused by Qdrant. Offline, with the bundled
default model.

    python3 examples/langchain_qdrant_rag.py [--model PATH_OR_ID]
"""

import argparse
from contextlib import closing
from pathlib import Path

from langchain_qdrant import QdrantVectorStore, RetrievalMode
from qdrant_client import models

from recemb.core import DEFAULT_MODEL
from recemb_integrations.langchain import RecembEmbeddings
from recemb_integrations.langchain_sparse import RecembBm25SparseEmbeddings

DOCS = sorted((Path(__file__).resolve().parent / "documents").glob("*.md"))
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=DEFAULT_MODEL)
args = parser.parse_args()

store = QdrantVectorStore.from_texts(
    [p.read_text() for p in DOCS], metadatas=[{"file": p.name} for p in DOCS],  # documents: no instruction
    embedding=RecembEmbeddings(model_name=args.model, model_kwargs={"device": "cpu"}),
    sparse_embedding=RecembBm25SparseEmbeddings(), retrieval_mode=RetrievalMode.HYBRID,
    sparse_vector_params={"modifier": models.Modifier.IDF},  # BM25's IDF comes from Qdrant; langchain leaves it off
    location=":memory:", collection_name="docs")
with closing(store.client):
    retriever = store.as_retriever(search_kwargs={"k": 2})  # top 2 of each side, fused by reciprocal rank
    for doc in retriever.invoke("Why does a recurrent model need little memory?"):  # the query gets the instruction
        print(doc.metadata["file"], "|", doc.page_content.splitlines()[0])
