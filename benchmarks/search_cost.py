"""What one framework search costs in calls and code: store calls and the project's modules entered (issue #63).

    python3 benchmarks/search_cost.py            # the table in docs/benchmarks.md ("What one search costs")

One ``similarity_search(query, k=4)`` on a collection of two documents (one long enough for passages), after one
warm-up search, for each store:

- recemb's LangChain ``RecembVectorStore`` and LlamaIndex ``RecembVectorStore`` (``VectorStoreIndex.as_retriever``
  not involved: the store's ``query``), over Qdrant Edge, with a deterministic fake embedding (no model: the count
  is the store's, not a model's) and with the bundled recemb model;
- langchain-qdrant's ``QdrantVectorStore`` over qdrant-client's in-memory mode with the same fake embedding.

Store calls: calls into recemb's ``Store`` (or the ``QdrantClient``) by method name. Modules: the distinct modules
of the project (``recemb``, ``recemb_integrations``; for langchain-qdrant, ``langchain_qdrant``) in which a Python
frame ran during the search (``sys.setprofile``), and re-entries: the times the search came back into one of them
from another of them. "Route" counts the search's own way from the framework's call to the ``Store`` interface:
without the store's engine below it (``stores/edge*.py``, ``stores/client.py``: what qdrant-client is to
langchain-qdrant, whose modules are not counted) and without the model (``recemb.core``, ``recemb.kernels``, the
adapter of another library's model, ``qdrant/external.py``: what the embedding is to langchain-qdrant).
``tests/integrations/test_search_cost.py`` holds recemb's route to ``ROUTE_MAX_CALLS`` and ``ROUTE_MAX_MODULES``.
Prints a markdown table; writes benchmarks/results/search_cost.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
LONG = " ".join(f"Sentence {i} of the long document speaks of rivers, bridges and the winter of year {i}."
                for i in range(120))
SHORT = "A short note about the harbour lights."
QUERY = "the winter of year 40"


class Counting:
    """A store (or client) whose public method calls are counted by name; everything else passes through."""

    def __init__(self, inner, calls: Counter):
        self._inner, self._calls = inner, calls

    def __getattr__(self, name):
        value = getattr(self._inner, name)
        if callable(value) and not name.startswith("_"):
            def counted(*args, **kwargs):
                self._calls[name] += 1
                return value(*args, **kwargs)
            return counted
        return value

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


# Below the Store interface (an engine) and the model: not the search's route (the module docstring says why).
NOT_ROUTE = ("recemb_integrations.stores.edge", "recemb_integrations.stores.client", "recemb.core", "recemb.kernels",
             "recemb_integrations.qdrant.external")


def trace(run, prefixes: tuple[str, ...]) -> dict:
    """(modules entered, re-entries) of the project's code while ``run()`` runs."""
    entered, order = Counter(), []

    def profile(frame, event, arg):
        if event != "call":
            return
        name = frame.f_globals.get("__name__", "")
        if name.split(".")[0] in prefixes and "benchmarks" not in (frame.f_code.co_filename or ""):
            if not order or order[-1] != name:
                order.append(name)
            entered[name] += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    left, reentries = set(), 0
    for before, now in zip(order, order[1:]):
        left.add(before)
        reentries += now in left
    route = sorted(m for m in entered if not m.startswith(NOT_ROUTE))
    return {"modules": sorted(entered), "module_count": len(entered), "reentries": reentries, "route": route,
            "route_count": len(route)}


def fake_langchain_embedding():
    from langchain_core.embeddings import DeterministicFakeEmbedding

    return DeterministicFakeEmbedding(size=32)


def recemb_langchain(folder: Path, embedding) -> dict:
    from langchain_core.documents import Document

    from recemb_integrations.langchain import RecembVectorStore
    from recemb_integrations.stores import open_store

    calls: Counter = Counter()
    store = Counting(open_store(path=str(folder)), calls)
    vs = RecembVectorStore(embedding=embedding, collection_name="docs", client=store)
    vs.add_documents([Document(page_content=LONG, metadata={"n": 1}), Document(page_content=SHORT)],
                     ids=["long", "short"])
    vs.similarity_search(QUERY, k=4)  # warm-up: the record read, the model built
    calls.clear()
    found = {}
    cost = trace(lambda: found.update(hits=vs.similarity_search(QUERY, k=4)), ("recemb", "recemb_integrations"))
    store._inner.close()
    return {**cost, "store_calls": sum(calls.values()), "calls": dict(calls), "hits": len(found["hits"])}


def recemb_llama_index(folder: Path, embed_model) -> dict:
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import VectorStoreQuery

    from recemb_integrations.llama_index import RecembVectorStore
    from recemb_integrations.stores import open_store

    calls: Counter = Counter()
    store = Counting(open_store(path=str(folder)), calls)
    vs = RecembVectorStore(collection_name="docs", client=store, embed_model=embed_model)
    nodes = [TextNode(text=LONG, id_="long"), TextNode(text=SHORT, id_="short")]
    vs.add(nodes)
    query = VectorStoreQuery(query_str=QUERY, similarity_top_k=4)
    vs.query(query)
    calls.clear()
    found = {}
    cost = trace(lambda: found.update(hits=vs.query(query).nodes), ("recemb", "recemb_integrations"))
    store._inner.close()
    return {**cost, "store_calls": sum(calls.values()), "calls": dict(calls), "hits": len(found["hits"])}


def langchain_qdrant(embedding) -> dict:
    from langchain_core.documents import Document
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient
    from qdrant_client.models import Distance, VectorParams

    calls: Counter = Counter()
    client = QdrantClient(location=":memory:")
    client.create_collection("docs", vectors_config=VectorParams(size=32, distance=Distance.COSINE))
    vs = QdrantVectorStore(client=Counting(client, calls), collection_name="docs", embedding=embedding,
                           validate_collection_config=False)
    vs.add_documents([Document(page_content=LONG), Document(page_content=SHORT)])
    vs.similarity_search(QUERY, k=4)
    calls.clear()
    found = {}
    cost = trace(lambda: found.update(hits=vs.similarity_search(QUERY, k=4)), ("langchain_qdrant",))
    return {**cost, "store_calls": sum(calls.values()), "calls": dict(calls), "hits": len(found["hits"])}


class FakeLlamaEmbedding:
    """A LlamaIndex embed model of the same fake vectors (built lazily: llama-index imported only when asked)."""

    @staticmethod
    def make():
        from llama_index.core.embeddings import MockEmbedding

        return MockEmbedding(embed_dim=32)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-model", action="store_true", help="skip the rows with the bundled recemb model")
    parser.add_argument("--out", type=Path, default=RESULTS / "search_cost.json")
    args = parser.parse_args(argv)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="search_cost-") as tmp:
        tmp = Path(tmp)
        rows["langchain-qdrant QdrantVectorStore (fake embedding)"] = langchain_qdrant(fake_langchain_embedding())
        rows["recemb LangChain RecembVectorStore (fake embedding)"] = recemb_langchain(
            tmp / "lc-fake", fake_langchain_embedding())
        rows["recemb LlamaIndex RecembVectorStore (fake embedding)"] = recemb_llama_index(
            tmp / "li-fake", FakeLlamaEmbedding.make())
        if not args.no_model:
            from recemb_integrations.langchain import RecembEmbeddings
            from recemb_integrations.llama_index import RecembEmbedding

            rows["recemb LangChain RecembVectorStore (bundled model)"] = recemb_langchain(
                tmp / "lc-model", RecembEmbeddings(model_name="recemb-mamba2-mini"))
            rows["recemb LlamaIndex RecembVectorStore (bundled model)"] = recemb_llama_index(
                tmp / "li-model", RecembEmbedding(model_name="recemb-mamba2-mini"))
    print("| store | store calls | which | route modules | all project modules | re-entries | hits |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        which = ", ".join(f"{k} {v}" for k, v in sorted(row["calls"].items()))
        print(f"| {name} | {row['store_calls']} | {which} | {row['route_count']} | {row['module_count']} | "
              f"{row['reentries']} | {row['hits']} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
