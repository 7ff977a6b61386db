"""LangChain RAG over a folder of documents kept in a recemb collection: retriever -> prompt -> LLM, with the
defaults. The retriever hands the LLM each document's best passage (its own characters, with the file, line and
span to cite), each document once, never whole files. Offline: a fake LLM stands in for the real one.

    python3 examples/langchain_retriever.py [--model PATH_OR_ID] [--folder FOLDER] [--store PATH] [--k K]

For each question it prints the context the LLM is sent: each passage's file, line and characters, and the
context's size against the whole files'. With --store, a second run embeds nothing (one point per document id;
unchanged documents are skipped).
"""

import argparse
import tempfile
from pathlib import Path

from langchain_core.documents import Document
from langchain_core.language_models import FakeListLLM
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from recemb.core import DEFAULT_MODEL
from recemb_integrations.langchain import RecembEmbeddings, RecembVectorStore

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=DEFAULT_MODEL)
parser.add_argument("--folder", type=Path, default=Path(__file__).resolve().parent / "documents")
parser.add_argument("--store", type=Path, default=None, help="the store's folder (default: a temporary one)")
parser.add_argument("--k", type=int, default=3, help="passages handed to the LLM per question")
parser.add_argument("--question", action="append", help="a question to ask (repeatable; default: two about the "
                                                           "sample documents)")
args = parser.parse_args()
QUESTIONS = args.question or ["How does a lighthouse lens make its light carry far?", "Why are spring tides strong?"]


def cite(passage: Document) -> str:
    """Where a passage is: its file, line and characters (a short document is its own passage, from 0)."""
    m = passage.metadata
    start, end = m.get("start", 0), m.get("end", len(passage.page_content))
    return f"[{passage.id}, line {m.get('line', 1)}, characters {start:,}-{end:,}]"


def context_of(passages: list[Document]) -> str:
    return "\n\n".join(f"{cite(p)}\n{p.page_content}" for p in passages)


files = sorted(p for p in args.folder.rglob("*") if p.suffix in (".md", ".txt"))
texts = {f.relative_to(args.folder).as_posix(): f.read_text(encoding="utf-8") for f in files}
embeddings = RecembEmbeddings(model_name=args.model, model_kwargs={"device": "cpu"})
with tempfile.TemporaryDirectory() as tmp, RecembVectorStore(
        embedding=embeddings, collection_name="docs", path=args.store or Path(tmp) / "store") as store:
    # Whole files in, each under its name: the long ones also get passages, with their character offsets.
    store.add_documents([Document(text, metadata={"source": name}, id=name) for name, text in texts.items()])
    retriever = store.as_retriever(search_kwargs={"k": args.k})  # the defaults: passages, each document once
    prompt = PromptTemplate.from_template("Answer from these passages, citing them:\n\n{context}\n\n"
                                          "Question: {question}\nAnswer:")
    llm = FakeListLLM(responses=["(an LLM's answer from the passages above)"])
    chain = ({"context": retriever | RunnableLambda(context_of), "question": RunnablePassthrough()} | prompt | llm
             | StrOutputParser())
    whole = sum(len(t) for t in texts.values())
    for question in QUESTIONS:
        print(f"Q: {question}\nA: {chain.invoke(question)}")
        passages = retriever.invoke(question)  # (again, to show them: the chain's context is context_of(passages))
        context = context_of(passages)
        print(f"   context: {len(context):,} characters from {len(passages)} passages "
              f"(the whole files: {whole:,} characters in {len(texts)} files)")
        for p in passages:
            print(f"   {cite(p)} {' '.join(p.page_content.split())[:60]}")
