"""LangChain + Qdrant retrieval with recemb embeddings, offline (a demo model is built; pass --model for a real one).

    python3 examples/langchain_qdrant_rag.py [--model PATH_OR_ID]
"""

import argparse
import sys
import tempfile
from contextlib import closing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_model import build_demo_model  # noqa: E402
from langchain_qdrant import QdrantVectorStore  # noqa: E402
from qdrant_client import QdrantClient, models  # noqa: E402

from recemb_integrations.langchain import RecEmbEmbeddings  # noqa: E402

DOCS = sorted((Path(__file__).resolve().parent / "documents").glob("*.md"))
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model")
args = parser.parse_args()

with tempfile.TemporaryDirectory() as tmp:
    model = args.model or build_demo_model(Path(tmp) / "demo", " ".join(p.read_text() for p in DOCS) * 20,
                                           hidden_size=128, layers=2, vocab_size=1000)
    embeddings = RecEmbEmbeddings(model_name=str(model), model_kwargs={"device": "cpu"})
    with closing(QdrantClient(":memory:")) as client:
        client.create_collection("docs", vectors_config=models.VectorParams(
            size=len(embeddings.embed_query("probe")), distance=models.Distance.COSINE))
        store = QdrantVectorStore(client=client, collection_name="docs", embedding=embeddings)
        store.add_texts([p.read_text() for p in DOCS], metadatas=[{"file": p.name} for p in DOCS])  # no instruction
        retriever = store.as_retriever(search_kwargs={"k": 2})  # queries get the instruction
        for doc in retriever.invoke("Why does a recurrent model need little memory?"):
            print(doc.metadata["file"], "|", doc.page_content.splitlines()[0])
print("(with the demo model's random weights the ranking shows the plumbing, not retrieval quality)")
