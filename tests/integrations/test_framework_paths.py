"""The main job's ways in for the framework stores (LangChain, LlamaIndex): another library's model as the
embedder, a document's own vector given by the caller, documents got and deleted by id, and a hit's original
text. Each on both embedded stores, the store compared with what was given."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

pytest.importorskip("qdrant_client")

from recemb_integrations.evidence import EvidenceReader  # noqa: E402
from recemb_integrations.qdrant import (  # noqa: E402
    CollectionMismatchError,
    Document,
    ExternalEmbedder,
    QdrantSync,
    content_hash,
)
from recemb_integrations.stores import open_store  # noqa: E402
from tests.integrations.cli_cases import write  # noqa: E402
from tests.utils import assert_stored_dense  # noqa: E402

TEXTS = {"a": "owls hunt at night over the fields", "b": "the tide follows the moon", "c": "bread needs time to rise"}


def fake_embeddings(dim: int = 6):
    """A deterministic stand-in for another library's model: a vector from the text's hash."""
    def vector(text: str) -> list[float]:
        rng = np.random.default_rng(int(content_hash(text)[:8], 16))
        return rng.normal(size=dim).tolist()

    return ExternalEmbedder("fake-model", dim, lambda texts: [vector(t) for t in texts], vector), vector


def points(store, collection="c"):
    found, _ = store.scroll(collection, limit=1000, with_payload=True, with_vectors=True)
    return {p.payload["document_id"]: p for p in found}


def test_another_librarys_model_fills_a_collection_with_one_point_a_document(tmp_path, store_kind):
    embedder, vector = fake_embeddings()
    with open_store(path=tmp_path / "s", kind=store_kind) as store:
        sync = QdrantSync(store, "c", embedder, store_text=True)
        report = sync.sync([Document(k, v) for k, v in TEXTS.items()])
        assert report.added == 3 and not report.failed and sync.settings.passage_tokens is None
        stored = points(store)
        assert sorted(stored) == sorted(TEXTS) and all(p.payload["kind"] == "document" for p in stored.values())
        for doc_id, p in stored.items():  # its own vector (normalised), recemb's BM25 beside it
            expected = np.asarray(vector(TEXTS[doc_id]), dtype=np.float32)
            assert_stored_dense(p.vector["dense"], expected / np.linalg.norm(expected), rtol=1e-5, atol=1e-6)
            assert len(p.vector["bm25"].indices) > 0
        assert [h.document_id for h in sync.search("the tide follows the moon", limit=1, mode="dense")] == ["b"]
        assert [h.document_id for h in sync.search("owls", limit=1, mode="sparse")] == ["a"]
        assert sync.sync([Document(k, v) for k, v in TEXTS.items()]).unchanged == 3  # nothing embedded again
        with pytest.raises(ValueError, match="needs the model's tokenizer"):  # no tokenizer to cut 8 tokens by
            QdrantSync(store, "c", embedder, passage_tokens=8)
        other, _ = fake_embeddings(dim=8)  # another model (another dimension) is refused by the pin
        with pytest.raises(CollectionMismatchError, match="dimension"):
            QdrantSync(store, "c", ExternalEmbedder("other", 8, other._embed_documents, other._embed_query)).sync(
                [Document("d", "x")], delete_missing=False)


def test_a_given_vector_is_the_documents_own_point_and_its_passages_are_embedded(tmp_path, tiny_embedder,
                                                                                store_kind):
    text = "the tide follows the moon and the sea rises twice a day " * 12
    given = tiny_embedder.encode_documents([text])[0]
    with open_store(path=tmp_path / "s", kind=store_kind) as store:
        sync = QdrantSync(store, "c", tiny_embedder, passage_tokens=16, passages_above=0, store_text=True)
        report = sync.sync([Document("long", text, {}, given.tolist())])
        assert report.added == 1 and not report.failed
        stored, _ = store.scroll("c", limit=1000, with_payload=True, with_vectors=True)
        own = next(p for p in stored if p.payload["kind"] == "document")
        passages = [p for p in stored if p.payload["kind"] == "passage"]
        assert_stored_dense(own.vector["dense"], given, rtol=1e-5, atol=1e-6)
        assert len(passages) > 1 and all(text[p.payload["start"]:p.payload["end"]] == p.payload["text"]
                                         for p in passages)
        # the same as embedding the text itself, which is what the given vector was
        other = QdrantSync(store, "d", tiny_embedder, passage_tokens=16, passages_above=0, store_text=True)
        other.sync([Document("long", text)])
        again, _ = store.scroll("d", limit=1000, with_payload=True, with_vectors=True)
        assert sorted((p.id, p.payload["kind"]) for p in again) == sorted((p.id, p.payload["kind"]) for p in stored)
        # a vector of another size, or all zeros, is refused for that document alone
        report = sync.sync([Document("bad", "x", {}, [0.0] * tiny_embedder.dim), Document("short", "y", {}, [1.0])],
                           delete_missing=False)
        assert sorted(f[0] for f in report.failed) == ["bad", "short"]
        why = dict(report.failed)
        assert "is all zeros" in why["bad"] and f"has 1 values; the collection's model makes vectors of " \
            f"{tiny_embedder.dim}" in why["short"]


def test_documents_by_id_and_deletes_that_never_mean_everything(tmp_path, tiny_embedder, store_kind):
    with open_store(path=tmp_path / "s", kind=store_kind) as store:
        sync = QdrantSync(store, "c", tiny_embedder, passage_tokens=4, passages_above=0, store_text=True)
        assert sync.get_documents(["a"]) == [] and sync.delete_documents(["a"]) == 0  # no collection yet
        sync.sync([Document(k, v, {"n": i}) for i, (k, v) in enumerate(TEXTS.items())])
        got = sync.get_documents(["c", "missing", "a"])
        assert [(d.id, d.text, d.metadata) for d in got] == [("c", TEXTS["c"], {"n": 2}), ("a", TEXTS["a"], {"n": 0})]
        assert got[0].passages > 0 and got[0].content_hash == content_hash(TEXTS["c"])
        before = store.count("c")
        for slip in (None, "a", b"a", [""], [None], 3):
            with pytest.raises(TypeError):
                sync.delete_documents(slip)
        assert sync.delete_documents([]) == 0 and store.count("c") == before  # empty: nothing, never "all"
        assert sync.delete_documents(["nope"]) == 0 and store.count("c") == before
        assert sync.delete_documents(["a", "a"]) == 1
        left = {p.payload["document_id"] for p in points(store).values()}
        assert left == {"b", "c"}  # its passages gone with it
        everything, _ = store.scroll("c", limit=1000, with_payload=True)
        assert {p.payload["document_id"] for p in everything} == {"b", "c"}


def test_a_hits_original_text_is_the_users_own_characters(tmp_path, tiny_embedder, store_kind):
    text = "First line about owls.\nSecond line: the TIDE, the Moon — and café crème.\n" * 6
    path = write(tmp_path / "docs" / "note.md", text)
    with open_store(path=tmp_path / "s", kind=store_kind) as store:
        for name, store_text in (("stored", True), ("on-file", False)):
            sync = QdrantSync(store, name, tiny_embedder, passage_tokens=12, passages_above=0, store_text=store_text)
            sync.sync([Document("note.md", text, {"path": str(path)})])
            reader = EvidenceReader()
            for hit in sync.search("tide moon", limit=3, granularity="passage", mode="sparse"):
                original = reader.original(hit)
                assert original.text == text[hit.start:hit.end], name  # never a decode of the token ids
                assert original.line == text[:hit.start].count("\n") + 1
            document = sync.search("tide moon", limit=1, mode="sparse")[0]
            assert reader.original(document).text == text
        path.write_text("changed since")
        hit = QdrantSync.open(store, "on-file", tiny_embedder).search("tide", limit=1, mode="sparse",
                                                                      granularity="passage")[0]
        original = EvidenceReader().original(hit)
        assert original.text is None and "changed" in original.note


def test_per_document_caps_each_documents_hits_and_keeps_the_best_under_the_cap(tmp_path, tiny_embedder, store_kind):
    """``search(per_document=n)`` at passage granularity returns the best hits with at most n of one document: the
    uncapped ranking with every hit beyond a document's n-th left out (dense and BM25 scores do not depend on the
    other candidates, so the two rankings are comparable)."""
    words = "tide moon spring neap ebb flood harbour boat sail wind rope anchor gull shore wave salt".split()
    rng = np.random.default_rng(7)  # every passage its own words, so no two score alike
    texts = {f"d{i}": " ".join(rng.choice(words, size=160)) for i in range(4)}
    texts["short"] = "a short note on the tide"
    with open_store(path=tmp_path / "s", kind=store_kind) as store:
        sync = QdrantSync(store, "c", tiny_embedder, passage_tokens=12, passages_above=24, store_text=True)
        sync.sync([Document(k, v) for k, v in texts.items()])
        for mode in ("dense", "sparse"):
            everything = sync.search("spring tide and moon", limit=500, granularity="passage", mode=mode)
            assert len({h.document_id for h in everything}) == 5 and len(everything) > 20
            # the uncapped ranking does give one document several of the first hits: the cap has work to do
            assert max(Counter(h.document_id for h in everything[:5]).values()) > 1
            for cap, limit in ((1, 3), (1, 10), (2, 5), (3, 8)):
                counts: dict[str, int] = {}
                expected = []
                for hit in everything:
                    counts[hit.document_id] = counts.get(hit.document_id, 0) + 1
                    if counts[hit.document_id] <= cap:
                        expected.append(hit.score)
                got = sync.search("spring tide and moon", limit=limit, granularity="passage", mode=mode,
                                  per_document=cap)
                # the same scores in the same order (hits of equal score may be either), at most cap a document
                assert [h.score for h in got] == pytest.approx(expected[:limit], rel=1e-5), (mode, cap, limit)
                scores = {(h.document_id, h.passage): h.score for h in everything}
                assert all(scores[(h.document_id, h.passage)] == pytest.approx(h.score, rel=1e-5) for h in got)
                assert max(Counter(h.document_id for h in got).values()) <= cap
                assert all(texts[h.document_id][h.start:h.end] == h.text for h in got if h.passage is not None)
        hybrid = sync.search("spring tide and moon", limit=4, granularity="passage", per_document=1)
        assert len(hybrid) == 4 and len({h.document_id for h in hybrid}) == 4
        for bad in (0, -1, True, 1.5, "2"):
            with pytest.raises(ValueError, match="per_document"):
                sync.search("tide", granularity="passage", per_document=bad)


def test_query_and_given_vectors_are_checked_against_the_collections_model(tmp_path, tiny_embedder, store_kind):
    from recemb_integrations.framework_collection import FrameworkCollection
    from recemb_integrations.qdrant import VectorError

    query = tiny_embedder.encode_queries(["the tide follows the moon"])[0]
    with FrameworkCollection("c", lambda: tiny_embedder, path=tmp_path / "s", store_kind=store_kind) as collection:
        collection.add([Document(k, v) for k, v in TEXTS.items()])
        assert collection.search("", k=1, mode="dense", query_vector=query.tolist())[0].document_id == "b"
        bad = {"has 3 values": [0.1, 0.2, 0.3], "is all zeros": [0.0] * tiny_embedder.dim,
               "holds NaN": [float("nan")] * tiny_embedder.dim, "has length 2": (2 * query).tolist(),
               "is not a vector of numbers": ["a"] * tiny_embedder.dim}
        for why, vector in bad.items():
            with pytest.raises(VectorError, match=f"the query vector {why}"):
                collection.search("", k=1, mode="dense", query_vector=vector)
            with pytest.raises(VectorError, match=f"the embedding of 'new' {why}"):  # before any write
                collection.add([Document("fine", "x", {}, query.tolist()), Document("new", "y", {}, vector)])
            assert collection.get(["fine", "new"]) == []
    embedder, _ = fake_embeddings()  # another library's model: its vectors are normalised here, any length taken
    with FrameworkCollection("e", lambda: embedder, path=tmp_path / "s", store_kind=store_kind) as collection:
        collection.add([Document(k, v) for k, v in TEXTS.items()])
        long_query = (10 * np.asarray(embedder._embed_query(TEXTS["c"]))).tolist()
        assert collection.search("", k=1, mode="dense", query_vector=long_query)[0].document_id == "c"
        with pytest.raises(VectorError, match="is all zeros"):
            collection.search("", k=1, mode="dense", query_vector=[0.0] * 6)


def test_api_ids_are_nfc_and_an_earlier_collections_spelling_is_still_found(tmp_path, tiny_embedder, store_kind,
                                                                           monkeypatch):
    from recemb_integrations.qdrant import documents

    nfd, nfc = "notes/cafe\u0301.md", "notes/caf\u00e9.md"
    with open_store(path=tmp_path / "s", kind=store_kind) as store:
        sync = QdrantSync(store, "new", tiny_embedder, store_text=True)
        sync.sync([Document(nfd, "a text about coffee")])
        assert [d.id for d in sync.get_documents([nfd])] == [nfc] == sync.document_ids()  # kept in NFC
        with monkeypatch.context() as m:  # what an earlier recemb stored: the id as given
            m.setattr(documents, "clean_document_id", lambda doc_id: doc_id)
            old = QdrantSync(store, "old", tiny_embedder, store_text=True)
            old.sync([Document(nfd, "a text about coffee"), Document("tea.md", "a text about tea")])
        assert old.document_ids() == sorted([nfd, "tea.md"])
        points = store.count("old")
        # either spelling finds it, a sync of it changes nothing and writes no second copy, an edit updates it
        assert [d.text for d in old.get_documents([nfc])] == ["a text about coffee"]
        report = old.sync([Document(nfc, "a text about coffee"), Document("tea.md", "a text about tea")])
        assert report.unchanged == 2 and report.added == report.deleted == 0 and store.count("old") == points
        report = old.sync([Document(nfc, "coffee, edited"), Document("tea.md", "a text about tea")])
        assert report.updated == 1 and store.count("old") == points and old.document_ids() == sorted([nfd, "tea.md"])
        assert old.delete_documents([nfc]) == 1 and old.document_ids() == ["tea.md"]
