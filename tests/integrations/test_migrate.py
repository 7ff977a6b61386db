"""recemb_integrations.migrate: a collection copied between stores (qdrant-client's local mode and Qdrant Edge, either
way) with its metadata, resumably and verified. Points are built here directly: no model is needed."""

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

pytest.importorskip("qdrant_client")
from qdrant_client import QdrantClient  # noqa: E402
from qdrant_client import models as qm  # noqa: E402

from recemb_integrations import migrate as migrate_module  # noqa: E402
from recemb_integrations.migrate import (  # noqa: E402
    MIGRATION_KEY,
    MigrationError,
    collection_digest,
    migrate_collection,
    point_digest,
)
from recemb_integrations.qdrant import collection_settings  # noqa: E402
from recemb_integrations.qdrant.record import META_KEY, REBUILD_SUFFIX  # noqa: E402
from recemb_integrations.sparse import SparseVector  # noqa: E402
from recemb_integrations.stores import DEFAULT_LAYOUT, LAYOUT_RAM, SearchRequest, StoredPoint  # noqa: E402
from recemb_integrations.stores.client import ClientStore  # noqa: E402

DIM = 16
N = 300
BATCH = 50
RECORDED = {"model": "tiny-test-model", "model_fingerprint": "f00d", "dim": DIM, "distance": "Cosine", "layout": 2,
            "passage_tokens": 64, "passage_overlap": 8, "vectors": {"dense": "dense", "sparse": "bm25"},
            "sparse": {"language": "english", "avg_len": 812.5}, "recemb_version": "test"}
METADATA = {META_KEY: RECORDED, "owner": "kept as well"}
NAMESPACE = uuid.UUID("0f0e0d0c-0b0a-4908-8706-050403020100")


def make_store(kind, folder):
    if kind == "edge":
        pytest.importorskip("qdrant_edge")
        from recemb_integrations.stores.edge import EdgeStore

        return EdgeStore(folder)
    return ClientStore(QdrantClient(":memory:"))


def make_points(n=N, seed=0):
    """Points like a recemb collection's: documents and passages, nested metadata, booleans, unicode, floats; the
    dense vectors normalised in float32 (as the model writes them), point 7 without a BM25 vector."""
    rng = np.random.default_rng(seed)
    points = []
    for i in range(n):
        dense = rng.standard_normal(DIM).astype(np.float32)
        dense /= np.linalg.norm(dense)
        kind = "document" if i % 3 == 0 else "passage"
        payload = {"document_id": f"docs/fichier-{i // 3:03d}-été.txt", "kind": kind,
                   "content_hash": f"{i:064x}", "metadata": {"lang": "fr", "tags": ["a", "ü"], "n": i,
                                                            "nested": {"ok": i % 2 == 0, "score": i / 7,
                                                                       "none": None}},
                   "text": "naïve café ☕ 日本語 " * (i % 4), "flag": i % 5 == 0}
        if kind == "passage":
            payload["passage"] = i % 3
        indices = np.sort(rng.choice(50_000, size=1 + i % 9, replace=False)).tolist()
        vector = {"dense": dense.tolist()}
        if i != 7:
            vector["bm25"] = SparseVector(tuple(indices), tuple(rng.uniform(0.1, 2.5, len(indices)).tolist()))
        points.append(StoredPoint(str(uuid.uuid5(NAMESPACE, str(i))), payload, vector))
    return points


def fill(store, name="docs", points=None, metadata=METADATA, layout=DEFAULT_LAYOUT):
    store.create_collection(name, DIM, True, metadata, layout=layout)
    points = make_points() if points is None else points
    for i in range(0, len(points), 64):
        store.upsert(name, points[i:i + 64])
    return points


def snapshot(store, name="docs"):
    points, offset = [], None
    while True:
        page, offset = store.scroll(name, 1000, offset=offset, with_payload=True, with_vectors=True)
        points += page
        if offset is None:
            return {p.id: p for p in points}


def assert_same_points(source, target, name="docs", target_name="docs"):
    """Same ids, payloads and BM25 vectors; dense vectors equal at float32, or each value rounded to float16 in a
    compact collection; a local-mode target normalises them again, in float64 (which moves the last bit of a float32
    unit vector, and a float16-rounded vector, not quite of unit length, by up to that rounding)."""
    a, b = snapshot(source, name), snapshot(target, target_name)
    assert sorted(a) == sorted(b)
    exact = target.kind != "local"
    float16 = target.collection_info(target_name).dense_datatype == "float16"
    for pid, p in a.items():
        q = b[pid]
        assert q.payload == p.payload
        assert sorted(q.vector) == sorted(p.vector)
        x, y = np.asarray(p.vector["dense"], np.float32), np.asarray(q.vector["dense"], np.float32)
        if float16:
            x = x.astype(np.float16).astype(np.float32)
        if exact:
            assert x.tobytes() == y.tobytes()
        else:
            np.testing.assert_allclose(y, x / np.linalg.norm(x.astype(np.float64)), rtol=0, atol=1e-6)
        if "bm25" in p.vector:
            assert q.vector["bm25"].indices == p.vector["bm25"].indices
            assert (np.asarray(q.vector["bm25"].values, np.float32).tobytes()
                    == np.asarray(p.vector["bm25"].values, np.float32).tobytes())


class Proxy:
    """A store that forwards everything to ``inner`` (``as_store`` takes it as a store: it has collection_info)."""

    def __init__(self, inner):
        self.inner = inner
        self.upserts = 0
        self.optimized = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def upsert(self, collection, points):
        self.upserts += 1
        return self.inner.upsert(collection, points)

    def optimize(self, collection, show_progress_bar=None, **kwargs):
        self.optimized.append(kwargs)
        return self.inner.optimize(collection, show_progress_bar=show_progress_bar, **kwargs)


class CrashingProxy(Proxy):
    """Dies (an exception standing in for a kill) on the ``crash_at``-th upsert, before writing it."""

    def __init__(self, inner, crash_at=3):
        super().__init__(inner)
        self.crash_at = crash_at

    def upsert(self, collection, points):
        if self.upserts + 1 == self.crash_at:
            raise RuntimeError("injected crash")
        return super().upsert(collection, points)


class TamperingProxy(Proxy):
    """Writes one point of the first page altered: a store that loses or changes data."""

    def __init__(self, inner, what):
        super().__init__(inner)
        self.what = what

    def upsert(self, collection, points):
        if self.upserts == 0:
            p = points[1]
            if self.what == "payload":
                p = dataclasses.replace(p, payload={**p.payload, "metadata": {**p.payload["metadata"], "n": -1}})
            elif self.what == "dense":
                dense = list(p.vector["dense"])
                dense[0] += 0.01
                p = dataclasses.replace(p, vector={**p.vector, "dense": dense})
            elif self.what == "sparse":
                bm25 = p.vector["bm25"]
                p = dataclasses.replace(p, vector={**p.vector, "bm25": SparseVector(
                    bm25.indices, (bm25.values[0] * 2,) + bm25.values[1:])})
            points = [points[0], p, *points[2:]]
        return super().upsert(collection, points)


KINDS = ["local", "edge"]


@pytest.fixture(params=KINDS)
def source(request, tmp_path):
    with make_store(request.param, tmp_path / "source") as s:
        yield s


@pytest.fixture(params=KINDS)
def target(request, tmp_path):
    with make_store(request.param, tmp_path / "target") as s:
        yield s


def mark_of(store, name="docs"):
    return store.collection_info(name).metadata[META_KEY].get(MIGRATION_KEY)


# ---------------------------------------------------------------------------------------------- copies
def test_migrates_points_and_metadata(source, target):
    points = fill(source)
    proxy = Proxy(target)
    report = migrate_collection(source, proxy, "docs", batch_size=BATCH, show_progress_bar=False)
    assert (report.collection, report.target_collection) == ("docs", "docs")
    assert (report.points, report.copied, report.resumed) == (N, N, False)
    assert report.seconds > 0 and len(report.source_digest) == 64
    assert proxy.upserts == N // BATCH
    rounds = [s.collection_info("docs").dense_datatype for s in (source, target)] == ["float32", "float16"]
    if rounds:  # a compact Edge collection keeps float16 vectors: each point's dense values rounded, and counted
        assert report.source_digest != report.target_digest and report.rounded == N
    elif target.kind != "local":  # stores that keep vectors as written: the very same digest
        assert report.source_digest == report.target_digest and report.rounded == 0
    else:  # local mode normalises every vector again, in float64: a third of these move by a float32 ulp
        assert report.source_digest != report.target_digest and report.rounded > 0 if source.kind == "edge" else (
            report.source_digest == report.target_digest or report.rounded > 0)
    assert target.collection_info("docs").metadata == METADATA  # the mark is gone, foreign keys kept
    assert collection_settings(target, "docs") == RECORDED
    assert_same_points(source, target)
    info = target.collection_info("docs")
    assert (info.dense_size, info.sparse, info.named) == (DIM, True, True)
    assert proxy.optimized == ([{"force": True}] if target.kind == "edge" else [{}])

    # the copy searches like the original: a point's own vector finds it, its BM25 vector finds it with IDF
    probe = points[42]
    for store in (source, target):
        assert store.query("docs", SearchRequest(limit=1, dense=probe.vector["dense"]))[0].id == probe.id
        hits = store.query("docs", SearchRequest(limit=1, sparse=probe.vector["bm25"]))
        assert hits[0].id == probe.id
    # a filter on an indexed payload field
    passages = target.count("docs", qm.Filter(must=[qm.FieldCondition(key="kind", match=qm.MatchValue(
        value="passage"))]))
    assert passages == sum(p.payload["kind"] == "passage" for p in points)


def test_other_target_name_and_empty_collection(tmp_path):
    with make_store("local", None) as source, make_store("edge", tmp_path / "t") as target:
        fill(source, points=[])
        report = migrate_collection(source, target, "docs", "copy of docs", show_progress_bar=False)
        assert (report.points, report.copied, report.target_collection) == (0, 0, "copy of docs")
        assert report.source_digest == report.target_digest == "0" * 64
        assert target.list_collections() == ["copy of docs"]
        assert target.collection_info("copy of docs").metadata == METADATA


def test_progress_bar_and_unverified(capsys):
    with make_store("local", None) as source, make_store("local", None) as target:
        fill(source)
        report = migrate_collection(source, target, "docs", batch_size=BATCH, show_progress_bar=True, verify=False)
        assert report.copied == N and report.source_digest == report.target_digest == ""
        assert "Migrating docs" in capsys.readouterr().err
        assert mark_of(target) is None


# ---------------------------------------------------------------------------------------------- resuming
def test_resume_after_a_crash(source, target):
    fill(source)
    with pytest.raises(RuntimeError, match="injected crash"):
        migrate_collection(source, CrashingProxy(target), "docs", batch_size=BATCH, show_progress_bar=False)
    mark = mark_of(target)
    assert mark["state"] == "copying" and mark["points"] == N and mark["source"].endswith("/docs")
    assert "checkpoint" not in mark  # fewer pages than CHECKPOINT_PAGES
    assert target.count("docs") == 2 * BATCH
    assert collection_settings(target, "docs")[MIGRATION_KEY] == mark  # what QdrantSync sees and refuses

    report = migrate_collection(source, target, "docs", batch_size=BATCH, show_progress_bar=False)
    assert report.resumed and report.copied == N and report.points == N
    assert target.collection_info("docs").metadata == METADATA
    assert_same_points(source, target)


def test_resume_skips_checkpointed_pages(monkeypatch, tmp_path):
    monkeypatch.setattr(migrate_module, "CHECKPOINT_PAGES", 1)
    with make_store("edge", tmp_path / "s") as source, make_store("local", None) as target:
        fill(source)
        with pytest.raises(RuntimeError, match="injected crash"):
            migrate_collection(source, CrashingProxy(target, crash_at=4), "docs", batch_size=BATCH,
                               show_progress_bar=False)
        assert mark_of(target)["checkpoint"]["done"] == 3 * BATCH
        report = migrate_collection(source, target, "docs", batch_size=BATCH, show_progress_bar=False)
        assert report.resumed and report.copied == N - 3 * BATCH
        assert target.collection_info("docs").metadata == METADATA
        assert_same_points(source, target)


def test_source_changed_between_runs(tmp_path):
    """A point deleted from the source after it was copied goes from the copy too; an edit is copied again."""
    with make_store("edge", tmp_path / "s") as source, make_store("edge", tmp_path / "t") as target:
        points = fill(source)
        with pytest.raises(RuntimeError):
            migrate_collection(source, CrashingProxy(target), "docs", batch_size=BATCH, show_progress_bar=False)
        first = sorted(points, key=lambda p: p.id)[:2 * BATCH]  # scrolled by id: the two pages copied
        source.delete("docs", qm.Filter(must=[qm.HasIdCondition(has_id=[first[0].id])]))
        source.set_payload("docs", {"text": "edited"}, ids=[first[1].id])
        report = migrate_collection(source, target, "docs", batch_size=BATCH, show_progress_bar=False)
        assert report.points == N - 1 and target.count("docs") == N - 1
        assert_same_points(source, target)


def test_killed_process_then_rerun(tmp_path):
    """SIGKILL in the middle of the copy (Qdrant Edge to local mode, each in its folder); a rerun finishes it."""
    pytest.importorskip("qdrant_edge")
    from recemb_integrations.stores import open_store

    src, dst = tmp_path / "edge", tmp_path / "local"
    with open_store(path=src, kind="edge") as source:
        fill(source)
    child = textwrap.dedent(f"""
        import os, signal
        from recemb_integrations.migrate import migrate_collection
        from recemb_integrations.stores import open_store
        from tests.integrations.test_migrate import Proxy

        class Killed(Proxy):
            def upsert(self, collection, points):
                if self.upserts == 2:
                    os.kill(os.getpid(), signal.SIGKILL)
                return super().upsert(collection, points)

        source, target = open_store(path={str(src)!r}), open_store(path={str(dst)!r}, kind="local")
        migrate_collection(source, Killed(target), "docs", batch_size={BATCH}, show_progress_bar=False)
    """)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", child], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with open_store(path=src) as source, open_store(path=dst, kind="local") as target:
        assert mark_of(target)["state"] == "copying" and target.count("docs") == 2 * BATCH
        report = migrate_collection(source, target, "docs", batch_size=BATCH, show_progress_bar=False)
        assert report.resumed and report.points == N
        assert target.collection_info("docs").metadata == METADATA
        assert_same_points(source, target)


# ---------------------------------------------------------------------------------------------- verification
@pytest.mark.parametrize("what", ["payload", "dense", "sparse"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_difference_fails_verification_and_keeps_the_mark(what, kind, tmp_path, monkeypatch):
    """Also into local mode, where the point-by-point comparison that forgives rounding must still see a change."""
    monkeypatch.setattr(migrate_module, "CHECKPOINT_PAGES", 1)
    with make_store("edge", tmp_path / "s") as source, make_store(kind, tmp_path / "t") as target:
        fill(source)
        expected = {"payload": "payload differs", "dense": "dense vector 'dense' differs",
                    "sparse": "sparse vector 'bm25' differs"}[what]
        with pytest.raises(MigrationError, match="verification failed") as failure:
            migrate_collection(source, TamperingProxy(target, what), "docs", batch_size=BATCH,
                               show_progress_bar=False)
        assert expected in str(failure.value) and f"{N} points" in str(failure.value)
        mark = mark_of(target)
        assert mark["state"] == "copying" and "checkpoint" not in mark  # the next run copies everything
        report = migrate_collection(source, target, "docs", batch_size=BATCH, show_progress_bar=False)
        assert report.resumed and report.copied == N
        assert (report.source_digest == report.target_digest) == (kind == "edge")
        assert_same_points(source, target)


def test_missing_point_fails_verification(tmp_path):
    class Dropping(Proxy):
        def upsert(self, collection, points):
            return super().upsert(collection, points[1:] if self.upserts == 0 else points)

    with make_store("local", None) as source, make_store("local", None) as target:
        fill(source)
        with pytest.raises(MigrationError, match=f"holds {N} points, the target 'docs' {N - 1}"):
            migrate_collection(source, Dropping(target), "docs", batch_size=BATCH, show_progress_bar=False)
        assert mark_of(target)["state"] == "copying"


def test_digest_ignores_order_and_store_and_sees_every_field(tmp_path):
    points = make_points(40)
    with make_store("local", None) as a, make_store("edge", tmp_path / "b") as b:
        fill(a, points=points)
        # local mode normalises the vectors again (in float64): b is given them as a stores them, in reverse order,
        # and keeps them as float32 (the ram layout)
        fill(b, points=list(snapshot(a).values())[::-1], layout=LAYOUT_RAM)
        assert collection_digest(a, "docs") == collection_digest(b, "docs", batch_size=7)
    p = points[3]
    base = point_digest(p)
    bm25 = p.vector["bm25"]
    shuffled = SparseVector(bm25.indices[::-1], bm25.values[::-1])
    assert point_digest(dataclasses.replace(p, vector={**p.vector, "bm25": shuffled})) == base
    assert point_digest(dataclasses.replace(p, payload=dict(reversed(list(p.payload.items()))))) == base
    assert point_digest(dataclasses.replace(p, vector={"dense": p.vector["dense"]})) != base
    assert point_digest(dataclasses.replace(p, id=points[4].id)) != base
    assert point_digest(dataclasses.replace(p, payload={**p.payload, "flag": not p.payload["flag"]})) != base
    float64_only = list(p.vector["dense"])
    float64_only[0] = float(np.float32(float64_only[0])) + 1e-12  # below float32 precision: the same
    assert point_digest(dataclasses.replace(p, vector={**p.vector, "dense": float64_only})) == base


# ---------------------------------------------------------------------------------------------- refusals
def test_refusals_write_nothing(tmp_path):
    with make_store("local", None) as source, make_store("edge", tmp_path / "t") as target:
        fill(source)
        fill(source, "foreign", points=make_points(3), metadata={"someone": "else"})
        fill(source, "rebuilding", points=make_points(3),
             metadata={META_KEY: {**RECORDED, "rebuild": {"state": "copying", "source": "x" + REBUILD_SUFFIX}}})
        fill(source, "half-migrated", points=make_points(3),
             metadata={META_KEY: {**RECORDED, MIGRATION_KEY: {"state": "copying", "source": "elsewhere/x"}}})
        source.client.create_collection(  # recemb 0.1: one unnamed dense vector
            "legacy", vectors_config=qm.VectorParams(size=DIM, distance=qm.Distance.COSINE),
            metadata={META_KEY: {**RECORDED, "layout": 1}})

        def refused(match, *args, **kwargs):
            with pytest.raises(MigrationError, match=match):
                migrate_collection(*args, show_progress_bar=False, **kwargs)

        refused("does not exist", source, target, "nope")
        refused("not created by recemb", source, target, "foreign")
        refused("rebuild", source, target, "rebuilding")
        refused("unfinished migration", source, target, "half-migrated")
        refused(r"recemb sync --rebuild", source, target, "legacy")
        refused("same collection", source, source, "docs")
        refused("kept for rebuilds", source, target, "docs", "docs" + REBUILD_SUFFIX)
        refused("not allow", source, target, "docs", "a/b")
        assert target.list_collections() == []
        with pytest.raises(ValueError, match="batch_size"):
            migrate_collection(source, target, "docs", batch_size=0)

        migrate_collection(source, source, "docs", "docs-copy", show_progress_bar=False)  # same store, new name
        assert_same_points(source, source, "docs", "docs-copy")


def test_existing_targets_are_never_overwritten(tmp_path):
    with make_store("local", None) as source, make_store("edge", tmp_path / "t") as target:
        fill(source)
        fill(target, points=make_points(5, seed=9))  # a complete recemb collection
        fill(target, "foreign", points=make_points(5, seed=9), metadata={"someone": "else"})
        before = snapshot(target)
        with pytest.raises(MigrationError, match=r"already exists.*--to-collection.*delete"):
            migrate_collection(source, target, "docs", show_progress_bar=False)
        with pytest.raises(MigrationError, match="already exists"):
            migrate_collection(source, target, "docs", "foreign", show_progress_bar=False)
        assert snapshot(target).keys() == before.keys() and target.collection_info("docs").metadata == METADATA
        assert target.collection_info("foreign").metadata == {"someone": "else"}

        # an unfinished copy of another source is not taken over either
        target.create_collection("other", DIM, True, {META_KEY: {**RECORDED, MIGRATION_KEY: {
            "state": "copying", "source": "http://elsewhere:6333/docs", "points": 3}}})
        with pytest.raises(MigrationError, match="unfinished copy of http://elsewhere:6333/docs"):
            migrate_collection(source, target, "docs", "other", show_progress_bar=False)
        assert target.count("other") == 0
