"""One framework search costs at most two store calls (the query, and one fetch of its passages' documents) and
walks at most twelve of the project's modules from the framework's call to the Store interface
(benchmarks/search_cost.py prints the same beside langchain-qdrant's, for docs/benchmarks.md)."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "search_cost.py"
ROUTE_MAX_CALLS = 2
ROUTE_MAX_MODULES = 12


@pytest.fixture(scope="module")
def cost():
    spec = importlib.util.spec_from_file_location("search_cost", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("framework", ["langchain", "llama_index"])
def test_a_framework_search_makes_two_store_calls_through_twelve_modules(cost, framework, tmp_path):
    run = cost.recemb_langchain if framework == "langchain" else cost.recemb_llama_index
    embedding = cost.fake_langchain_embedding() if framework == "langchain" else cost.FakeLlamaEmbedding.make()
    row = run(tmp_path / "store", embedding)
    assert row["hits"] == 2  # both documents found: the count is of a search that did its work
    assert row["calls"] == {"query_groups": 1, "retrieve": 1}
    assert row["store_calls"] <= ROUTE_MAX_CALLS
    assert row["route_count"] <= ROUTE_MAX_MODULES, row["route"]
    assert f"recemb_integrations.{framework}_store" in row["route"]


def test_the_counts_see_what_they_count(cost, tmp_path):
    """The instruments themselves: a store call is counted, a module entered is listed."""
    from collections import Counter

    from recemb_integrations.stores import open_store

    calls = Counter()
    store = cost.Counting(open_store(path=str(tmp_path / "s")), calls)
    traced = cost.trace(lambda: store.list_collections(), ("recemb_integrations",))
    store._inner.close()
    assert calls == {"list_collections": 1}
    assert any(m.startswith("recemb_integrations.stores.edge") for m in traced["modules"]) and traced["route"] == []


def test_a_collection_deleted_since_it_was_seen_searches_as_empty(tmp_path):
    """The store keeps that its collection exists (no call a search to ask); one deleted by another process since
    is found out by the search and answers [] as a collection never made does."""
    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from recemb_integrations.langchain import RecembVectorStore
    from recemb_integrations.stores import open_store

    store = open_store(path=str(tmp_path / "s"))
    vs = RecembVectorStore(embedding=DeterministicFakeEmbedding(size=16), collection_name="docs", client=store)
    vs.add_documents([Document(page_content="a note about harbour lights")], ids=["a"])
    assert len(vs.similarity_search("harbour", k=2)) == 1
    store.delete_collection("docs")
    assert vs.similarity_search("harbour", k=2) == []
    store.close()
