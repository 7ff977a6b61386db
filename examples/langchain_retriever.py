"""LangChain: a folder of documents kept in a recemb collection, searched by a retriever; each answer cites the
document, line and characters of the passages it was given. Offline: a fake chat model stands in for the LLM.

    python3 examples/langchain_retriever.py [--model PATH_OR_ID] [--folder FOLDER] [--store PATH]

With --store, a second run embeds nothing (one point per document id; unchanged documents are skipped).
"""

import argparse
import tempfile
from pathlib import Path

from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.prompts import ChatPromptTemplate

from recemb.core import DEFAULT_MODEL
from recemb_integrations.langchain import RecEmbEmbeddings, RecembVectorStore

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=DEFAULT_MODEL)
parser.add_argument("--folder", type=Path, default=Path(__file__).resolve().parent / "documents")
parser.add_argument("--store", type=Path, default=None, help="the store's folder (default: a temporary one)")
args = parser.parse_args()
QUESTIONS = ["How does a lighthouse lens make its light carry far?", "Why are spring tides strong?"]

files = sorted(p for p in args.folder.rglob("*") if p.suffix in (".md", ".txt"))
embeddings = RecEmbEmbeddings(model_name=args.model, model_kwargs={"device": "cpu"})
with tempfile.TemporaryDirectory() as tmp, RecembVectorStore(
        embedding=embeddings, collection_name="docs", path=args.store or Path(tmp) / "store") as store:
    # Whole files in, each under its name: long ones also get passages (with their character offsets).
    store.add_documents([Document(f.read_text(encoding="utf-8"), metadata={"source": f.name}, id=f.name)
                         for f in files])
    retriever = store.as_retriever(search_kwargs={"k": 3, "granularity": "passage"})
    prompt = ChatPromptTemplate.from_template("Answer from these passages:\n{context}\n\nQuestion: {question}")
    llm = FakeListChatModel(responses=["(a chat model's answer from the passages below)"])
    for question in QUESTIONS:
        passages = retriever.invoke(question)
        answer = (prompt | llm).invoke({"question": question,
                                        "context": "\n\n".join(p.page_content for p in passages)})
        print(f"Q: {question}\nA: {answer.content}")
        for p in passages:  # a passage's metadata says where it is; a short document is its own passage
            m = p.metadata
            start, end = m.get("start", 0), m.get("end", len(p.page_content))
            print(f"   [{p.id}, line {m.get('line', 1)}, characters {start:,}-{end:,}] "
                  f"{' '.join(p.page_content.split())[:60]}...")
