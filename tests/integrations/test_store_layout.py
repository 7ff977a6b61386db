"""Store layouts (issue #47): a new collection on Qdrant Edge is compact (an int8 copy of the dense vectors in memory,
the originals, the BM25 index and the payloads on disk), and on a server the same through the collection config; an
old collection keeps the layout it was created with, and a rebuild or a migration moves it; every layout answers the
same searches with the same scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("qdrant_client")
pytest.importorskip("qdrant_edge")
from qdrant_client import models  # noqa: E402

from recemb_integrations.stores import LAYOUT_COMPACT, LAYOUT_LEAN, LAYOUT_RAM, open_store  # noqa: E402
from recemb_integrations.stores.client import ClientStore  # noqa: E402
from recemb_integrations.stores.edge import EdgeStore  # noqa: E402
from tests.integrations.cli_cases import run  # noqa: E402

WORDS = ("harbour tide boat lamp reef storm keeper glass light coast winter sail anchor rope gull fog bell chart "
         "pier cliff wave salt net oar").split()
QUERIES = ["the keeper lit the lamp in the storm", "fog bell", "anchor rope on the pier"]


def make_corpus(folder: Path, n: int, words: int = 40) -> Path:
    """``n`` documents of distinct word sequences (no two passages alike: no tied scores)."""
    import random

    rng = random.Random(7)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        # lengths differ, so BM25 scores do not tie either
        (folder / f"doc{i:03d}.txt").write_text(" ".join(rng.choice(WORDS) for _ in range(words + 7 * i)) + ".\n")
    return folder


@pytest.fixture
def ram_by_default(monkeypatch):
    """Collections created as recemb created them before store layouts: everything in memory."""
    create = EdgeStore.create_collection

    def create_ram(self, collection, dense_size, sparse, metadata, layout=None):
        return create(self, collection, dense_size, sparse, metadata, layout=LAYOUT_RAM)

    monkeypatch.setattr(EdgeStore, "create_collection", create_ram)
    return monkeypatch


def layout_of(store: Path, collection: str = "c") -> str:
    with open_store(path=store) as s:
        return s.collection_info(collection).layout


def shard_config(store: Path, collection: str = "c") -> dict:
    for record in (store / "collections").glob("*/collection.json"):
        if json.loads(record.read_text())["name"] == collection:
            return json.loads((record.parent / "shard" / "edge_config.json").read_text())
    raise AssertionError(f"no collection {collection} in {store}")


def searches(capsys, opts, modes=("dense", "hybrid", "sparse")) -> list:
    found = []
    for query in QUERIES:
        for mode in modes:
            code, hits, err = run(capsys, ["search", query, "--mode", mode, "--granularity", "any", "--limit", "6",
                                           *opts])
            assert code == 0, err
            found.append((mode, [(h["document_id"], h.get("passage"), h["score"]) for h in hits]))
    return found


# A compact collection rescores with float16 originals and rounds the query to float16 as well: each of two unit
# vectors moves by at most fp16's unit roundoff (2**-11, relative, per component), so their cosine by at most twice
# that. BM25 is not rounded.
FLOAT16_COSINE = 2 * 2.0 ** -11
EXACT = 1e-6


def assert_same_answers(a: list, b: list, rounded: float = EXACT) -> None:
    """The same hits with the same scores, dense and fused ones within ``rounded``; hits whose score ties another's
    within it (two passages with the same BM25 terms) may come in either order, so they are compared by score
    alone."""
    for (mode, x), (mode_b, y) in zip(a, b, strict=True):
        assert mode == mode_b
        tolerance = EXACT if mode == "sparse" else rounded
        assert [s for *_, s in x] == pytest.approx([s for *_, s in y], rel=1e-5, abs=tolerance)
        scores = [s for *_, s in x]
        # the sixth hit only tells whether the fifth ties with what lies beyond the page
        untied = [i for i, s in enumerate(scores[:5]) if sum(abs(s - t) < 2 * tolerance for t in scores) == 1]
        assert [x[i][:2] for i in untied] == [y[i][:2] for i in untied], (x, y)


def test_a_new_collection_is_lean_and_answers_as_the_old_layout(tmp_path, tiny_folder, capsys, ram_by_default):
    corpus = make_corpus(tmp_path / "docs", 12)
    common = ["--model", str(tiny_folder), "--collection", "c", "--passage-tokens", "8"]
    old = ["--qdrant-path", str(tmp_path / "old"), *common]
    assert run(capsys, ["sync", str(corpus), *old])[0] == 0
    ram_by_default.undo()
    new = ["--qdrant-path", str(tmp_path / "new"), *common]
    assert run(capsys, ["sync", str(corpus), *new])[0] == 0
    assert layout_of(tmp_path / "old") == LAYOUT_RAM and layout_of(tmp_path / "new") == LAYOUT_LEAN
    config = shard_config(tmp_path / "new")
    # lean: the point-id tracker mapped, every segment indexed (its BM25 postings on disk), payload indexes on disk
    assert config["id_tracker_memory"] == "cold" and config["optimizers"]["indexing_threshold"] == 1
    assert config["optimizers"]["default_segment_number"] == 8
    for found in (tmp_path / "new").rglob("payload_index/config.json"):
        fields = json.loads(found.read_text())["indexed_fields"]
        assert {"document_id", "kind", "passage", "passages", "root"} <= set(fields)
        assert all(f["on_disk"] is True for f in fields.values()), fields
    dense = config["vectors"]["dense"]
    assert dense["memory"] == "cold" and dense["quantization_config"]["scalar"]["type"] == "int8"
    assert dense["quantization_config"]["scalar"]["memory"] == "pinned"
    assert config["sparse_vectors"]["bm25"]["memory"] == "cold" and config["payload_memory"] == "cold"
    assert "quantization_config" not in shard_config(tmp_path / "old")["vectors"]["dense"]
    assert dense["datatype"] == "float16" and "datatype" not in shard_config(tmp_path / "old")["vectors"]["dense"]
    # Rescored with the float16 originals: the same hits, the same scores to fp16's rounding, in every mode.
    assert_same_answers(searches(capsys, old), searches(capsys, new), rounded=FLOAT16_COSINE)


def test_an_old_collection_keeps_its_layout_and_a_rebuild_or_a_migration_moves_it(tmp_path, tiny_folder, capsys,
                                                                                  ram_by_default):
    corpus = make_corpus(tmp_path / "docs", 8)
    opts = ["--model", str(tiny_folder), "--qdrant-path", str(tmp_path / "store"), "--collection", "c"]
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    ram_by_default.undo()
    (corpus / "doc000.txt").write_text("a changed document about the harbour " * 6)
    code, report, _ = run(capsys, ["sync", str(corpus), *opts])  # a sync into it keeps its layout
    assert code == 0 and report["updated"] == 1 and layout_of(tmp_path / "store") == LAYOUT_RAM
    before = searches(capsys, opts)
    code, report, err = run(capsys, ["migrate", "--qdrant-path", str(tmp_path / "store"), "--collection", "c",
                                     "--to-path", str(tmp_path / "moved")])
    assert code == 0 and report["copied"] == report["points"], err
    assert layout_of(tmp_path / "moved") == LAYOUT_LEAN
    assert_same_answers(before, searches(capsys, [*opts[:2], "--qdrant-path", str(tmp_path / "moved"),
                                                  "--collection", "c"]), rounded=FLOAT16_COSINE)
    dense_before = searches(capsys, opts, modes=("dense",))
    code, report, err = run(capsys, ["sync", str(corpus), "--rebuild", *opts])
    assert code == 0 and report["added"] == 8, err
    assert layout_of(tmp_path / "store") == LAYOUT_LEAN
    # (a rebuild also chooses its BM25 lengths afresh from today's documents: the dense side is compared)
    assert_same_answers(dense_before, searches(capsys, opts, modes=("dense",)), rounded=FLOAT16_COSINE)


def test_local_mode_is_created_plain_and_a_server_gets_the_compact_config(tmp_path):
    with open_store(path=tmp_path / "local", kind="local") as local:
        local.create_collection("c", 8, True, {})
        assert local.collection_info("c").layout == LAYOUT_RAM  # local mode holds every point in Python anyway

    class ServerClient:  # records what a server would be asked to create
        def __init__(self):
            self.created = {}

        def create_collection(self, name, **kwargs):
            self.created[name] = kwargs

    client = ServerClient()
    server = ClientStore(client, location="http://server:6333")
    assert server.kind == "server"
    server.create_collection("new", 8, True, {"recemb": {}})
    server.create_collection("old", 8, True, {}, layout=LAYOUT_RAM)
    new, old = client.created["new"], client.created["old"]
    dense = new["vectors_config"]["dense"]
    assert dense.on_disk is True and dense.quantization_config.scalar.type == models.ScalarType.INT8
    assert dense.quantization_config.scalar.always_ram is True
    assert new["sparse_vectors_config"]["bm25"].index.on_disk is True and new["on_disk_payload"] is True
    assert old["vectors_config"]["dense"].quantization_config is None and old["on_disk_payload"] is None
    with pytest.raises(ValueError, match="layout"):
        server.create_collection("x", 8, True, {}, layout="tiny")


def test_a_compact_collection_is_indexed_as_it_is_written(tmp_path, monkeypatch):
    """Every SEAL_AFTER_POINTS points a compact collection is indexed and its shard reopened (what bounds a big
    sync's memory); nothing is lost or changed by it, and a ram collection is left to the one optimize."""
    import numpy as np

    from recemb_integrations.sparse import SparseVector
    from recemb_integrations.stores import SearchRequest, StoredPoint
    from recemb_integrations.stores import edge as edge_module

    monkeypatch.setattr(edge_module, "SEAL_AFTER_POINTS", 40)
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(200, 8))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    points = [StoredPoint(f"00000000-0000-0000-0000-{i + 1:012d}", {"document_id": str(i), "kind": "passage"},
                          {"dense": vectors[i].tolist(), "bm25": SparseVector((i,), (1.0,))}) for i in range(200)]
    for layout, reopenings in ((LAYOUT_COMPACT, 4), (LAYOUT_RAM, 0)):  # 5 seals, the last one not reopened yet
        with open_store(path=tmp_path / layout) as store:
            store.create_collection("c", 8, True, {}, layout=layout)
            loads = []
            load = store._edge.EdgeShard.load
            monkeypatch.setattr(store._edge.EdgeShard, "load", lambda path, *a: loads.append(path) or load(path, *a))
            for start in range(0, 200, 20):
                store.upsert("c", points[start:start + 20])
            monkeypatch.undo()
            monkeypatch.setattr(edge_module, "SEAL_AFTER_POINTS", 40)
            assert len(loads) == reopenings and store.count("c") == 200
        with open_store(path=tmp_path / layout) as store:  # the count recorded at each reopening holds
            assert store.count("c") == 200
            stored = store.retrieve("c", [p.id for p in points], with_vectors=True)
            assert sorted(p.payload["document_id"] for p in stored) == sorted(str(i) for i in range(200))
            # a compact collection keeps the float16 rounding of each value, a ram one the float32 value
            kept = vectors.astype(np.float16 if layout == LAYOUT_COMPACT else np.float32).astype(np.float64)
            rounded = FLOAT16_COSINE if layout == LAYOUT_COMPACT else 1e-5
            for p in stored:
                np.testing.assert_allclose(p.vector["dense"], kept[int(p.payload["document_id"])], atol=1e-7)
            for i in (0, 77, 199):
                hits = store.query("c", SearchRequest(limit=1, dense=vectors[i].tolist(), candidates=10))
                assert hits[0].payload["document_id"] == str(i) and hits[0].score == pytest.approx(1.0, abs=rounded)
