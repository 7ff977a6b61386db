"""The hostile pass on what the earlier ones did not reach: crashes, a second writer, read-only and copied stores,
damage beside framework documents and huge inputs, each case a test, on Qdrant Edge (the default store), through the
real LangChain store, the real `recemb` command (in a child process where it is killed: hostile_child.py) and the
Python API.

1. kill -9 at six seeded random moments of a LangChain ``add_documents`` of 40 documents (two of them over an earlier
   version of every document, half of them edited): the store opens, nothing half-written is visible
   (``get_by_ids`` and every search show complete documents only), and the same add run again converges to exactly
   a clean run's collection; an edit killed midway shows no part of either version;
2. the same with four kills of a `recemb sync FOLDER` of long files (one streamed); a search after such a kill asks
   the store a few times, however many passages it hides;
3. two writers at once (the command and a LangChain store, each way round; a store another process is creating): a
   one-line refusal naming the other process, no damage, and the refused writer's retry ends in a clean run's
   collection; a folder left with only the store's lock is a new store;
4. a read-only store: searched in a private copy, every write refused in one line, nothing changed;
5. a store copied (``shutil.copytree``) while a sync writes into it: each copy opens consistent (and a sync of it
   converges) or is refused as damaged in one line naming the way back, never a crash or a wrong answer;
6. damage to a collection that holds framework documents beside a folder's: one line from every door; the rebuild that
   line names is refused while the record says a framework's store wrote there;
7. a 30 MB single file synced in bounded memory (slow);
8. a 5 MB query: a bounded answer from `recemb search`, ``QdrantSync.search`` and the LangChain retriever (slow).

The kill and copy moments are drawn from ``random.Random(KILL_SEED)`` as numbers of points the store acknowledged
plus a delay, so they are the same on every run; each test prints what it measured (``-s`` shows it; the closing
note of issue #61 quotes it).
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qdrant_client")
pytest.importorskip("qdrant_edge")
pytest.importorskip("langchain_core")
from langchain_core.documents import Document as LCDocument  # noqa: E402

from recemb_integrations.framework_collection import FrameworkCollection  # noqa: E402
from recemb_integrations.langchain import RecembEmbeddings, RecembVectorStore  # noqa: E402
from recemb_integrations.qdrant import content_hash  # noqa: E402
from recemb_integrations.stores import StoreDamagedError, StoreError, filters, open_store  # noqa: E402
from tests.integrations.cli_cases import one_line_error, run  # noqa: E402
from tests.integrations.hostile_child import (  # noqa: E402
    SMALL_STREAM_MIN_CHARS,
    documents,
    long_files,
    small_streams,
)
from tests.utils import stored_points  # noqa: E402

CHILD = Path(__file__).with_name("hostile_child.py")
KILL_SEED = 20_251_207
PASSAGES = {"passage_tokens": 16, "passage_overlap": 4, "passages_above": 32}
PASSAGE_FLAGS = ["--passage-tokens", "16", "--passage-overlap", "4", "--passages-above", "32"]
# Batches of 8 documents (64 by default): their own points are written after each batch, so kills land between
# complete documents too, not only before the first.
LC_OPTIONS = {**PASSAGES, "batch_size": 8}
ALL = 10_000  # a search's most hits: more than any collection here holds
QUERY = "harbour boats tide moon lantern fog reef wharf state space models scan"


# ---------------------------------------------------------------------- the child process and its progress
def start_child(progress: Path, mode: str, *args: str, pause: float = 0.0, streams: bool = False
                ) -> subprocess.Popen:
    """hostile_child.py in a process of its own (``streams``: documents stream from 32K characters there, as
    ``small_streams`` makes them here)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), HOSTILE_SMALL_STREAMS="1" if streams else "0")
    return subprocess.Popen([sys.executable, str(CHILD), str(progress), str(pause), mode, *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def events(progress: Path) -> list[str]:
    return progress.read_text(encoding="utf-8").splitlines() if progress.exists() else []


def acknowledged(lines: list[str]) -> tuple[int, int]:
    """(points, documents' own points) the store acknowledged, from a child's progress lines."""
    done = [line.split() for line in lines if line.startswith("e ")]
    return sum(int(e[1]) for e in done), sum(int(e[2]) for e in done)


def wait_until(proc: subprocess.Popen, progress: Path, points: int | None, seal: bool = False,
               timeout: float = 300) -> None:
    """Until the store acknowledged at least ``points`` points (``seal``: began to index what was written); fails
    if the child ended first."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        lines = events(progress)
        if ("ob" in lines or "sb" in lines) if seal else acknowledged(lines)[0] >= points:
            return
        time.sleep(0.002)
    _, err = proc.communicate() if proc.poll() is not None else ("", "")
    raise AssertionError(f"the child ended (rc {proc.returncode}) or stalled before the moment: {err[-3000:]}")


WHERE = {"b": "inside an upsert", "e": "between writes", "sb": "inside a seal", "se": "after a seal",
         "ob": "inside the optimize", "oe": "after the optimize"}


def kill_after(proc: subprocess.Popen, progress: Path, points: int | None, delay: float, seal: bool = False) -> dict:
    """SIGKILL ``proc`` ``delay`` seconds after the store acknowledged at least ``points`` points (``seal``: began
    to index what was written); what it had done when it died (its last event: inside a write, between writes,
    inside the indexing)."""
    wait_until(proc, progress, points, seal)
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    lines = events(progress)
    acked, own = acknowledged(lines)
    return {"asked": "the indexing" if seal else points, "delay_s": delay, "acknowledged": acked,
            "own_points": own, "landed": WHERE.get(lines[-1].split()[0], lines[-1]) if lines else "before any write",
            "finished": "added" in lines or "done" in lines}


def kill_moments(rng: random.Random, total: int, n: int) -> list[tuple[int, float]]:
    """``n`` kill moments: a number of acknowledged points in the first 85% of a clean run's ``total`` (so the kill
    lands before the end) and a delay of up to 25 ms after it (inside the writes and embedding that follow)."""
    return [(rng.randint(1, int(total * 0.85)), round(rng.uniform(0.0, 0.025), 4)) for _ in range(n)]


class Counted:
    """While in use: the report of every ``FrameworkCollection.add`` (what ``add_documents`` did) and every store
    upsert (points, their document ids); the code runs as it is."""

    def __init__(self, monkeypatch):
        from recemb_integrations.stores import edge

        self.reports, self.points, self.upserts = [], 0, []
        add, upsert = FrameworkCollection.add, edge.EdgeStore.upsert

        def counted_add(collection, *args, **kwargs):
            self.reports.append(add(collection, *args, **kwargs))
            return self.reports[-1]

        def counted_upsert(store, collection, points):
            points = list(points)
            self.points += len(points)
            self.upserts.append((len(points), {p.payload["document_id"] for p in points}))
            return upsert(store, collection, points)

        monkeypatch.setattr(FrameworkCollection, "add", counted_add)
        monkeypatch.setattr(edge.EdgeStore, "upsert", counted_upsert)


# ---------------------------------------------------------------------- what a collection holds
def snapshot(store_path: Path, collection: str = "c") -> dict:
    """Every point (id -> payload, dense vector, BM25 as index -> value) and the collection's recorded metadata."""
    with open_store(path=store_path) as store:
        return {"points": stored_points(store, collection), "metadata": store.collection_info(collection).metadata}


def assert_same_collection(got: dict, want: dict) -> None:
    """Exactly the same points with the same payloads (ids, kinds, passages, hashes, roots, spans, texts) and BM25
    vectors, the same recorded settings, and dense vectors equal to the float16 rounding the store keeps (a batch of
    other documents may round a value to its neighbour)."""
    assert got["metadata"] == want["metadata"]
    assert sorted(got["points"]) == sorted(want["points"]), (
        f"{len(set(got['points']) - set(want['points']))} points more, "
        f"{len(set(want['points']) - set(got['points']))} fewer than a clean run")
    for pid, (payload, dense, sparse) in want["points"].items():
        g_payload, g_dense, g_sparse = got["points"][pid]
        assert g_payload == payload, (pid, g_payload, payload)
        assert g_sparse == sparse, pid
        ulp = np.spacing(np.maximum(np.abs(dense), np.abs(g_dense)).astype(np.float16)).astype(np.float64)
        assert np.all(np.abs(g_dense - dense) <= ulp), (pid, np.abs(g_dense - dense).max())


def raw_state(store, collection: str = "c") -> tuple[dict, dict]:
    """(document id -> its own point's payload, document id -> {passage: payload}) as the store holds them."""
    points, _ = store.scroll(collection, limit=1_000_000, with_payload=True)
    own, passages = {}, defaultdict(dict)
    for p in points:
        if p.payload["kind"] == "document":
            own[p.payload["document_id"]] = p.payload
        else:
            passages[p.payload["document_id"]][p.payload["passage"]] = p.payload
    return own, passages


def of_version(own: dict, passages: dict, doc_id: str) -> int:
    """How many of ``doc_id``'s passages were cut from the version its own point records."""
    return sum(p["document_hash"] == own[doc_id]["content_hash"] for p in passages.get(doc_id, {}).values())


def complete_points(own: dict, passages: dict) -> set[tuple[str, int | None]]:
    """(document id, passage or None) of every point a search may show: each document's own point and the passages
    cut from the version that point records."""
    return {(d, None) for d in own} | {(d, n) for d, payload in own.items()
                                       for n, p in passages.get(d, {}).items()
                                       if p["document_hash"] == payload["content_hash"]}


def assert_every_own_point_complete(own: dict, passages: dict, texts: dict[str, str]) -> None:
    """Nothing older was there to overwrite: a document's own point, written last, means all its passages."""
    for doc_id, payload in own.items():
        assert payload["content_hash"] == content_hash(texts[doc_id]), doc_id
        assert of_version(own, passages, doc_id) == payload["passages"], doc_id


def search_points(sync, mode: str, granularity: str) -> set[tuple[str, int | None]]:
    """(document id, passage) of every hit of the main job's search, each point its own hit (nothing merged)."""
    return {(h.document_id, h.passage) for h in sync.search(QUERY, limit=ALL, mode=mode, granularity=granularity)}


# ---------------------------------------------------------------------- 1. kills during a LangChain add
def lc_store(tiny_folder, path: Path) -> RecembVectorStore:
    embeddings = RecembEmbeddings(model_name=str(tiny_folder), model_kwargs={"device": "cpu", "backend": "torch"})
    return RecembVectorStore(embeddings, "c", path=path, **LC_OPTIONS)


def lc_documents(version: int, few: slice = slice(None), prefix: str = "") -> list[LCDocument]:
    return [LCDocument(text, metadata=metadata, id=prefix + doc_id)
            for doc_id, text, metadata in documents(version=version)[few]]


def write_spec(path: Path, version: int, few: slice = slice(None), prefix: str = "") -> Path:
    given = [(prefix + d, t, m) for d, t, m in documents(version=version)[few]]
    path.write_text(json.dumps({"documents": given, "options": LC_OPTIONS}), encoding="utf-8")
    return path


def add_once(tiny_folder, path: Path, version: int) -> None:
    with lc_store(tiny_folder, path) as store:
        store.add_documents(lc_documents(version))


def check_nothing_half_visible(store: RecembVectorStore, versions: dict[str, dict[str, str]]) -> dict:
    """The store after a kill: each document whose own point is there records a complete version (the hash of a
    text it was given; all that version's passages there where nothing older was), ``get_by_ids`` gives exactly
    those documents with that version's text, and no search (dense, BM25, hybrid; documents, passages, both) shows
    anything else: each hit is of a document whose own point is there, with that version's characters, and the main
    job's dense search at "any" granularity shows exactly the complete documents' points."""
    own, passages = raw_state(store.collection.store)
    text_of = {}
    for doc_id, payload in own.items():
        matching = [t for t in versions.values() if content_hash(t[doc_id]) == payload["content_hash"]]
        assert matching, f"{doc_id}'s own point records a hash of no text it was given"
        text_of[doc_id] = matching[0][doc_id]
    if len(versions) == 1:
        assert_every_own_point_complete(own, passages, versions["given"])
    ids = sorted({d for texts in versions.values() for d in texts})
    assert {d.id: d.page_content for d in store.get_by_ids(ids)} == text_of
    shown = 0
    for mode in ("dense", "sparse", "hybrid"):
        for granularity in ("any", "passage", "document"):
            # (LangChain merges a document's overlapping passages into one hit: the main job's search below shows
            # each point)
            wide = {"k": 50} if granularity == "document" else {"k": ALL, "per_document": None}
            hits = store.similarity_search(QUERY, mode=mode, granularity=granularity, **wide)
            for hit in hits:
                assert hit.id in own, f"a {mode} {granularity} search showed {hit.id}, which has no own point"
                if hit.metadata.get("kind") == "passage":
                    assert hit.metadata["content_hash"] == own[hit.id]["content_hash"]
                    assert hit.page_content == text_of[hit.id][hit.metadata["start"]:hit.metadata["end"]]
                else:
                    assert hit.page_content == text_of[hit.id]
            if mode == "dense" and granularity == "document":
                assert {h.id for h in hits} == set(own)
            if granularity != "document":
                found = search_points(store.collection.sync, mode, granularity)
                assert found <= complete_points(own, passages), (mode, granularity)
                if mode == "dense" and granularity == "any":
                    assert found == complete_points(own, passages)
                    shown = len(found)
    current = sum(payload["content_hash"] == content_hash(versions["given"][d]) for d, payload in own.items())
    partial = sorted(d for d, payload in own.items() if of_version(own, passages, d) < payload["passages"])
    return {"documents": len(own), "current": current, "orphan_passage_documents": len(set(passages) - set(own)),
            "points_shown": shown, "old_versions_partly_overwritten": len(partial)}


def test_kill_9_during_a_langchain_add_of_40_documents(tmp_path, tiny_folder, monkeypatch, capsys):
    """Six kills at seeded random moments of one ``add_documents`` of 40 documents in a child process: four into a
    new store, two over a store holding an earlier version of every document (half of them edited since)."""
    rng = random.Random(KILL_SEED)
    spec = write_spec(tmp_path / "v1.json", 1)
    given = {d: t for d, t, _ in documents(version=1)}
    earlier = {d: t for d, t, _ in documents(version=0)}
    assert sum(given[d] != earlier[d] for d in given) == 20
    with monkeypatch.context() as m:  # the clean runs: a new store, and one that held the earlier version first
        counted = Counted(m)
        add_once(tiny_folder, tmp_path / "clean-new", 1)
        total_new = counted.points
        add_once(tiny_folder, tmp_path / "clean-update", 0)
        before = counted.points
        add_once(tiny_folder, tmp_path / "clean-update", 1)
        total_update = counted.points - before
    clean = {"new": snapshot(tmp_path / "clean-new"), "update": snapshot(tmp_path / "clean-update")}
    assert sum(p[0]["kind"] == "document" for p in clean["new"]["points"].values()) == 40
    assert len(clean["new"]["points"]) == total_new > 400  # passages: most documents have them
    add_once(tiny_folder, tmp_path / "earlier", 0)  # the store an update starts from

    kills = [("new", *moment) for moment in kill_moments(rng, total_new, 4)]
    kills += [("update", *moment) for moment in kill_moments(rng, total_update, 2)]
    measured = []
    for i, (kind, points, delay) in enumerate(kills):
        store_path = tmp_path / f"killed-{i}"
        if kind == "update":
            shutil.copytree(tmp_path / "earlier", store_path)
        progress = tmp_path / f"progress-{i}"
        proc = start_child(progress, "langchain", str(tiny_folder), str(store_path), str(spec), "--hold")
        landed = kill_after(proc, progress, points, delay)
        assert not landed["finished"], f"kill {i} landed after the add had returned: {landed}"
        with monkeypatch.context() as m:
            counted = Counted(m)
            with lc_store(tiny_folder, store_path) as store:  # it opens
                seen = check_nothing_half_visible(store, {"given": given} if kind == "new" else
                                                  {"given": given, "earlier": earlier})
                store.add_documents(lc_documents(1))  # the same add again
            report = counted.reports[-1]
        # the rerun redid exactly what the kill left undone: documents without their own point are added, those
        # whose own point records the earlier version updated, the rest (complete and current) left alone
        assert report.unchanged == seen["current"] and report.updated == seen["documents"] - seen["current"]
        assert report.added == 40 - seen["documents"] and not report.failed
        assert_same_collection(snapshot(store_path), clean[kind])
        measured.append({"kill": i, "store": kind, **landed, **seen, "rerun": {
            "added": report.added, "updated": report.updated, "unchanged": report.unchanged,
            "embedded_tokens": report.embedded_tokens}})
    print(f"\n[kills during add_documents] clean: {total_new} points into a new store, {total_update} written "
          "by the update")
    for m in measured:
        print("  ", json.dumps(m))


def test_an_edit_killed_midway_shows_all_or_none_of_a_version(tmp_path, tiny_folder, capsys):
    """One long document (about 150 passages, written 64 at a time) edited, the add of its new version killed after
    its first 64 passages (the child pauses a second after each write): its old own point was retracted before the
    first new passage, so no search shows any of it (neither the old version with part of its passages nor the new
    one's first passages), ``get_by_ids`` does not give it, and the same add again writes exactly the new version."""
    from tests.integrations.hostile_child import WORDS

    def long(seed: int) -> str:
        rng = random.Random(seed)
        return " ".join(rng.choice(WORDS) for _ in range(300))

    for path in ("store", "clean"):
        with lc_store(tiny_folder, tmp_path / path) as store:
            store.add_documents([LCDocument(long(1), metadata={}, id="log")])
    with lc_store(tiny_folder, tmp_path / "clean") as store:  # the edit, not killed
        store.add_documents([LCDocument(long(2), metadata={}, id="log")])
    spec = tmp_path / "edit.json"
    spec.write_text(json.dumps({"documents": [["log", long(2), {}]], "options": LC_OPTIONS}), encoding="utf-8")
    progress = tmp_path / "progress"
    proc = start_child(progress, "langchain", str(tiny_folder), str(tmp_path / "store"), str(spec), pause=1.0)
    landed = kill_after(proc, progress, 1, 0.0)
    assert not landed["finished"]
    with lc_store(tiny_folder, tmp_path / "store") as store:
        own, passages = raw_state(store.collection.store)
        found = set()
        for mode in ("dense", "sparse", "hybrid"):
            for granularity in ("any", "passage"):
                found |= search_points(store.collection.sync, mode, granularity)
        merged = store.similarity_search(QUERY, k=4)
        kept = store.get_by_ids(["log"])
        written = len(passages["log"])
        store.add_documents([LCDocument(long(2), metadata={}, id="log")])  # the same add again
    print(f"\n[an edit killed midway] {landed}; {written} passage points in the store, own point "
          f"{'there' if own else 'retracted'}; searches show {len(found)} points, the retriever {len(merged)}")
    assert "log" not in own and written >= 64
    assert not found and not merged and not kept
    assert_same_collection(snapshot(tmp_path / "store"), snapshot(tmp_path / "clean"))


# ---------------------------------------------------------------------- 2. kills during a folder sync of long files
def cli_opts(tiny_folder, store: Path) -> list[str]:
    return ["--model", str(tiny_folder), "--qdrant-path", str(store), "--collection", "c", "--store", "edge"]


def cli_search(capsys, argv: list[str]) -> list[dict]:
    code, hits, err = run(capsys, ["search", *argv])
    assert code == 0, err
    return hits


def check_cli_search_shows_complete_documents(capsys, opts: list[str], own: dict, passages: dict) -> int:
    """Every `recemb search` (dense, BM25, hybrid; passages and documents, passages alone) shows points of
    complete documents only, and the dense one at "any" granularity exactly those: how many points it showed.
    (Document granularity is test_a_search_after_a_killed_sync_of_a_long_file_asks_the_store_a_few_times's.)"""
    allowed = complete_points(own, passages)
    shown = 0
    for mode in ("dense", "sparse", "hybrid"):
        for granularity in ("any", "passage"):
            hits = cli_search(capsys, [QUERY, "--mode", mode, "--granularity", granularity, "--limit", str(ALL),
                                       *opts])
            found = {(h["document_id"], h["passage"]) for h in hits}
            assert found <= allowed, (mode, granularity, sorted(found - allowed)[:5])
            if mode == "dense" and granularity == "any":
                assert found == allowed
                shown = len(found)
    return shown


def test_kill_9_during_a_folder_sync_of_long_files(tmp_path, tiny_folder, monkeypatch, capsys):
    """Four kills of `recemb sync FOLDER` (a child process) of four long files, one of them streamed (tokenized in
    windows and embedded as a stream; the threshold lowered to 32K characters in both processes, so the test can
    afford to embed it many times): two inside the streamed file, one inside the batch of the three others, one
    while the store indexes what was written, at the end."""
    small_streams(monkeypatch.setattr)
    rng = random.Random(KILL_SEED + 2)
    folder = tmp_path / "long"
    texts = long_files(folder, SMALL_STREAM_MIN_CHARS + 16_000)
    sync = ["sync", str(folder), *PASSAGE_FLAGS]
    with monkeypatch.context() as m:
        counted = Counted(m)
        started = time.perf_counter()
        code, report, err = run(capsys, [*sync, *cli_opts(tiny_folder, tmp_path / "clean")])
        clean_s = time.perf_counter() - started
    assert code == 0 and report["added"] == 4, err
    clean = snapshot(tmp_path / "clean")
    total = counted.points
    # the streamed file is written first (as its stream goes: passages, then its own point), the batch of three
    # files after it (all their passages, then their three own points)
    streamed = sum(n for n, ids in counted.upserts if ids == {"streamed.txt"})
    assert counted.upserts[-1] == (3, {"part0.txt", "part1.txt", "part2.txt"}) and 0 < streamed < total - 3
    moments = [(rng.randint(1, streamed), round(rng.uniform(0, 0.02), 4), False) for _ in range(2)]
    moments += [(rng.randint(streamed + 1, total - 3 - 64), round(rng.uniform(0, 0.02), 4), False)]
    moments += [(None, round(rng.uniform(0, 0.05), 4), True)]
    measured = []
    for i, (points, delay, seal) in enumerate(moments):
        store_path, progress = tmp_path / f"killed-{i}", tmp_path / f"progress-{i}"
        proc = start_child(progress, "cli", *sync, *cli_opts(tiny_folder, store_path), streams=True)
        landed = kill_after(proc, progress, points, delay, seal=seal)
        assert not landed["finished"], f"kill {i} landed after the sync had ended: {landed}"
        with open_store(path=store_path) as store:  # it opens
            own, passages = raw_state(store)
        assert_every_own_point_complete(own, passages, texts)
        shown = check_cli_search_shows_complete_documents(capsys, cli_opts(tiny_folder, store_path), own, passages)
        started = time.perf_counter()
        code, report, err = run(capsys, [*sync, *cli_opts(tiny_folder, store_path)])  # the same command again
        rerun_s = time.perf_counter() - started
        assert code == 0, err
        assert report["unchanged"] == len(own) and report["added"] == 4 - len(own) and not report["failed"]
        assert_same_collection(snapshot(store_path), clean)
        measured.append({"kill": i, **landed, "documents": sorted(own), "orphan_passages": sum(
            len(p) for d, p in passages.items() if d not in own), "points_shown": shown, "rerun": {
            k: report[k] for k in ("added", "unchanged", "embedded_tokens")}, "rerun_s": round(rerun_s, 1)})
    print(f"\n[kills during recemb sync FOLDER] clean: {total} points ({streamed} of the streamed file) in "
          f"{clean_s:.1f} s; files: {', '.join(f'{n} {len(t):,} chars' for n, t in texts.items())}")
    for m in measured:
        print("  ", json.dumps(m))


class TooManyQueries(BaseException):
    """Raised through the command (not an error it reports) once a search has asked the store too often."""


def test_a_search_after_a_killed_sync_of_a_long_file_asks_the_store_a_few_times(tmp_path, tiny_folder,
                                                                                 monkeypatch, capsys):
    """The state a kill inside the streamed file leaves (its passages written, its own point not: measured by the
    kills above), made exactly: `recemb search` at its default (documents, 10 hits) must show the three complete
    files after a few store queries, however many passages are hidden."""
    from recemb_integrations.stores import edge

    small_streams(monkeypatch.setattr)
    folder = tmp_path / "long"
    long_files(folder, SMALL_STREAM_MIN_CHARS + 16_000)
    opts = cli_opts(tiny_folder, tmp_path / "store")
    code, _, err = run(capsys, ["sync", str(folder), *PASSAGE_FLAGS, *opts])
    assert code == 0, err
    def streamed(*more):
        return filters.Filter(must=(filters.FieldCondition(key="document_id", match=filters.MatchValue(
            value="streamed.txt")), *more))

    shutil.copytree(tmp_path / "store", tmp_path / "without")
    with open_store(path=tmp_path / "without") as store:  # what the search should show: the three other files
        store.delete("c", streamed())
    with open_store(path=tmp_path / "store") as store:  # the kill came before the streamed file's own point
        store.delete("c", streamed(filters.FieldCondition(key="kind", match=filters.MatchValue(value="document"))))
        hidden = store.count("c", streamed())
    asked, cap = [], [None]
    for name in ("query", "query_groups"):
        real = getattr(edge.EdgeStore, name)

        def counted(self, *args, _real=real, **kwargs):
            asked.append(1)
            if cap[0] is not None and len(asked) > cap[0]:
                raise TooManyQueries(f"{len(asked)} store queries for one search, {hidden} passages hidden")
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(edge.EdgeStore, name, counted)
    baseline = cli_search(capsys, [QUERY, *cli_opts(tiny_folder, tmp_path / "without")])
    plain = len(asked)
    asked.clear()
    cap[0] = 2 * plain + 4  # a search that meets hidden passages may repeat itself once, not once per passage
    started = time.perf_counter()
    try:
        hits = cli_search(capsys, [QUERY, *opts])
    finally:
        print(f"\n[search after a killed long sync] {hidden} passages hidden: {len(asked)} store queries (cap "
              f"{cap[0]}; {plain} without them) in {time.perf_counter() - started:.1f} s")
    assert [h["document_id"] for h in hits] == [h["document_id"] for h in baseline]
    assert sorted(h["document_id"] for h in hits) == ["part0.txt", "part1.txt", "part2.txt"]


# ---------------------------------------------------------------------- 3. two writers at once
def write_folder(folder: Path, version: int, few: slice) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for doc_id, text, _ in documents(version=version)[few]:
        (folder / f"{doc_id}.txt").write_text(text, encoding="utf-8")
    return folder


def test_two_writers_at_once_one_is_refused_in_one_line_and_nothing_is_damaged(tmp_path, tiny_folder, monkeypatch,
                                                                               capsys):
    """`recemb sync` in a child process (slowed: 0.3 s after each write) while a LangChain store adds, and a
    LangChain add in a child while `recemb sync` runs: the second writer is refused in one line naming the other
    process and the way on, writes nothing, and its retry once the first is done ends in exactly the collection
    the two make one after the other."""
    folder = write_folder(tmp_path / "docs", 0, slice(0, 12))
    sync = ["sync", str(folder), *PASSAGE_FLAGS, "--batch-size", "1"]
    framework = lc_documents(1, slice(20, 32), prefix="fw-")
    spec = write_spec(tmp_path / "fw.json", 1, slice(20, 32), prefix="fw-")
    # the clean runs, one writer after the other
    assert run(capsys, [*sync, *cli_opts(tiny_folder, tmp_path / "clean-a")])[0] == 0
    with lc_store(tiny_folder, tmp_path / "clean-a") as store:
        store.add_documents(framework)
    with lc_store(tiny_folder, tmp_path / "clean-b") as store:
        store.add_documents(framework)
    assert run(capsys, [*sync, *cli_opts(tiny_folder, tmp_path / "clean-b")])[0] == 0
    measured = {}

    # a. the command writing, a LangChain store refused
    store_a = tmp_path / "a"
    proc = start_child(tmp_path / "progress-a", "cli", *sync, *cli_opts(tiny_folder, store_a), pause=0.3)
    wait_until(proc, tmp_path / "progress-a", 1)
    with lc_store(tiny_folder, store_a) as store, pytest.raises(StoreError) as refused:
        store.add_documents(framework)
    message = str(refused.value)
    assert "\n" not in message and f"the embedded store at {store_a} is in use by another process" in message
    measured["langchain refused"] = message
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    with lc_store(tiny_folder, store_a) as store:  # the retry
        store.add_documents(framework)
    assert_same_collection(snapshot(store_a), snapshot(tmp_path / "clean-a"))

    # b. a LangChain store writing, the command refused (before its model loads)
    store_b = tmp_path / "b"
    proc = start_child(tmp_path / "progress-b", "langchain", str(tiny_folder), str(store_b), str(spec), pause=0.3)
    wait_until(proc, tmp_path / "progress-b", 1)
    capsys.readouterr()  # (the progress bars of the writes above)
    code, _, err = run(capsys, [*sync, *cli_opts(tiny_folder, store_b)], json_out=False)
    line = one_line_error(err)
    assert code == 2 and f"the embedded store at {store_b} is in use by another process" in line, err
    measured["command refused"] = line
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert run(capsys, [*sync, *cli_opts(tiny_folder, store_b)])[0] == 0  # the retry
    assert_same_collection(snapshot(store_b), snapshot(tmp_path / "clean-b"))
    print("\n[two writers]", json.dumps(measured, indent=1))


LOCK_HOLDER = """
import fcntl, os, sys, time
os.makedirs(sys.argv[1], exist_ok=True)
handle = open(os.path.join(sys.argv[1], ".lock"), "a+")  # what EdgeStore does before it writes the store's marker
fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(120)
"""


def hold_a_new_store_lock(folder: Path) -> subprocess.Popen:
    """A process that created ``folder`` as a store and holds its lock, not yet having written the marker (the
    moment between EdgeStore's lock and its marker, which two writers starting together on a new store meet)."""
    proc = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_store_another_process_is_creating_is_in_use_and_one_it_left_is_new(tmp_path, tiny_folder):
    """A folder holding only a store's lock, held by another process: in use (not "other files"); once that process
    is killed (before it wrote the marker), a new store: it opens, and a LangChain store writes into it."""
    folder = tmp_path / "store"
    holder = hold_a_new_store_lock(folder)
    try:
        with pytest.raises(StoreError, match="is in use by another process"):
            open_store(path=folder)
        with lc_store(tiny_folder, folder) as store, pytest.raises(StoreError, match="in use by another process"):
            store.add_documents(lc_documents(0, slice(0, 2)))
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in folder.iterdir()) == [".lock"]
    with lc_store(tiny_folder, folder) as store:
        store.add_documents(lc_documents(0, slice(0, 2)))
        assert [d.id for d in store.get_by_ids(["note-00", "note-01"])] == ["note-00", "note-01"]


def test_the_command_takes_a_store_folder_left_with_only_its_lock(tmp_path, tiny_folder, capsys):
    folder = write_folder(tmp_path / "docs", 0, slice(0, 3))
    store = tmp_path / "store"
    holder = hold_a_new_store_lock(store)
    try:
        code, _, err = run(capsys, ["sync", str(folder), *cli_opts(tiny_folder, store)], json_out=False)
    finally:
        holder.kill()
        holder.wait()
    assert code == 2 and "in use by another process" in one_line_error(err), err
    code, report, err = run(capsys, ["sync", str(folder), *cli_opts(tiny_folder, store)])
    assert code == 0 and report["added"] == 3, err


# ---------------------------------------------------------------------- 4. a read-only store
READ_ONLY = r"""
import json, os, subprocess, sys
mnt, source, steps = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
os.makedirs(mnt, exist_ok=True)
done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", mnt], capture_output=True, text=True)
if done.returncode:
    print(json.dumps({"skip": done.stderr.strip() or "mount failed"}))
    sys.exit(0)
subprocess.run(["cp", "-a", "--sparse=always", source, os.path.join(mnt, "store")], check=True)
subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
results = {}
for name, argv in steps:
    if name == "copy-out":
        subprocess.run(["cp", "-a", "--sparse=always", os.path.join(mnt, "store"), argv[0]], check=True)
        continue
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    results[name] = {"rc": done.returncode, "out": done.stdout, "err": done.stderr}
print(json.dumps(results))
"""


def test_a_read_only_store_is_searched_in_a_copy_and_every_write_is_refused(tmp_path, tiny_folder, capsys):
    """A store (a folder's documents and a LangChain store's) on a read-only filesystem (a tmpfs remounted
    read-only in a user and mount namespace: root ignores file modes, not a read-only mount): `recemb search` and
    ``QdrantSync.search`` on ``open_store(read_only="copy")`` answer as the writable store does, from a private copy
    removed afterwards; `recemb sync`, a LangChain add and a LangChain search are refused in one line with the way
    on; the store is as it was."""
    if shutil.which("unshare") is None:
        pytest.skip("no read-only filesystem can be made here: `unshare` (util-linux) is not installed")
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True, text=True)
    if probe.returncode:
        pytest.skip(f"no read-only filesystem can be made here: unshare -Urm: {probe.stderr.strip()}")
    folder = write_folder(tmp_path / "docs", 0, slice(0, 6))
    original = tmp_path / "store"
    assert run(capsys, ["sync", str(folder), *PASSAGE_FLAGS, *cli_opts(tiny_folder, original)])[0] == 0
    with lc_store(tiny_folder, original) as store:
        store.add_documents(lc_documents(1, slice(20, 24), prefix="fw-"))
    before = snapshot(original)
    expected = cli_search(capsys, [QUERY, *cli_opts(tiny_folder, original)])
    ro = tmp_path / "mnt" / "store"
    child = [sys.executable, str(CHILD), str(tmp_path / "progress"), "0"]
    cli = [sys.executable, "-m", "recemb_integrations.cli"]
    steps = [["search", [*cli, "search", QUERY, "--json", *cli_opts(tiny_folder, ro)]],
             ["sync", [*cli, "sync", str(folder), *cli_opts(tiny_folder, ro)]],
             ["langchain add", [*child, "langchain", str(tiny_folder), str(ro),
                                str(write_spec(tmp_path / "more.json", 1, slice(30, 32), prefix="fw-"))]],
             ["langchain search", [*child, "lc-search", str(tiny_folder), str(ro), QUERY]],
             ["api search", [*child, "api-search", str(tiny_folder), str(ro), QUERY]],
             ["copy-out", [str(tmp_path / "after")]]]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-c", READ_ONLY,
                           str(tmp_path / "mnt"), str(original), json.dumps(steps)], capture_output=True, text=True,
                          env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in results:
        pytest.skip(f"no read-only filesystem can be made here: mounting a tmpfs failed ({results['skip']})")
    search = results["search"]
    assert search["rc"] == 0, search
    hits = json.loads(search["out"].strip().splitlines()[-1])
    assert [(h["document_id"], h["score"]) for h in hits] == [(h["document_id"], h["score"]) for h in expected]
    note = [line for line in search["err"].splitlines() if "note:" in line]
    assert len(note) == 1 and "searched in a copy at" in note[0], search
    copy = note[0].split("searched in a copy at ")[1].split(",")[0]
    assert not Path(copy).exists()  # removed when done
    api = json.loads(results["api search"]["out"].strip().splitlines()[-1])
    assert "searched in a copy" in api["note"]
    assert [d for d, _ in api["hits"]] == [h["document_id"] for h in expected][:5]
    refusals = {}
    for name in ("sync", "langchain add", "langchain search"):
        result = results[name]
        if name == "langchain search":  # the child prints the store's refusal as its result
            assert result["rc"] == 0, result
            line = json.loads(result["out"].strip().splitlines()[-1])["error"]
            assert "\n" not in line
        else:
            assert result["rc"] == 2, (name, result)  # nothing done
            line = one_line_error(result["err"])
        refusals[name] = line
        assert f"the embedded store at {ro} cannot be opened here: it is on a read-only filesystem" in line, line
        assert "copy the store to a folder you can write" in line, line
    assert_same_collection(snapshot(tmp_path / "after"), before)  # nothing changed
    print("\n[read-only store]", json.dumps({"search note": note[0], "api note": api["note"], **refusals},
                                            indent=1))


# ---------------------------------------------------------------------- 5. a store copied while being written
def test_a_store_copied_while_a_sync_writes_opens_consistent_or_is_refused_as_damaged(tmp_path, tiny_folder,
                                                                                       capsys):
    """Three copies (``shutil.copytree``, as a user's backup would be made) of a store while `recemb sync` writes
    40 documents into it (slowed to 50 ms after each write, so the copies overlap the writes): each copy opens with
    only complete documents visible and a sync of it converges to a clean run, or is refused as damaged in one line
    naming the rebuild, which then converges; the store being written ends as a clean run."""
    rng = random.Random(KILL_SEED + 5)
    folder = write_folder(tmp_path / "docs", 1, slice(None))
    texts = {f"{d}.txt": t for d, t, _ in documents(version=1)}
    sync = ["sync", str(folder), *PASSAGE_FLAGS, "--batch-size", "8"]
    assert run(capsys, [*sync, *cli_opts(tiny_folder, tmp_path / "clean")])[0] == 0
    clean = snapshot(tmp_path / "clean")
    moments = sorted(rng.randint(1, int(len(clean["points"]) * 0.9)) for _ in range(3))
    store, progress = tmp_path / "store", tmp_path / "progress"
    proc = start_child(progress, "cli", *sync, *cli_opts(tiny_folder, store), pause=0.05)
    copies = []
    for i, points in enumerate(moments):
        wait_until(proc, progress, points)
        copy = tmp_path / f"copy-{i}"
        acked, started = acknowledged(events(progress))[0], time.perf_counter()
        try:
            shutil.copytree(store, copy)
            failed = 0
        except shutil.Error as e:  # a file the writer replaced while it was copied: the copy is what it is
            failed = len(e.args[0])
        copies.append((copy, {"copy": i, "asked": points, "acknowledged_at_start": acked,
                              "acknowledged_at_end": acknowledged(events(progress))[0], "files_not_copied": failed,
                              "copy_s": round(time.perf_counter() - started, 2)}))
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert_same_collection(snapshot(store), clean)  # the copying did the store no harm
    measured = []
    for copy, seen in copies:
        opts = cli_opts(tiny_folder, copy)
        try:
            with open_store(path=copy) as opened:
                own, passages = raw_state(opened)
            assert_every_own_point_complete(own, passages, texts)
            seen["documents"] = len(own)
            seen["points_shown"] = check_cli_search_shows_complete_documents(capsys, opts, own, passages)
            seen["opened"] = "consistent"
            code, report, err = run(capsys, [*sync, *opts])
            assert code == 0 and report["unchanged"] == len(own) and report["added"] == 40 - len(own), err
        except StoreDamagedError as e:
            line = str(e)
            assert "\n" not in line and "--rebuild --allow-mass-delete" in line, line
            code, _, err = run(capsys, ["search", QUERY, *opts], json_out=False)
            assert code == 1 and one_line_error(err).endswith("or restore the store from a backup"), err
            seen["opened"] = "refused as damaged: " + line[:300]
            code, report, err = run(capsys, [*sync, "--rebuild", "--allow-mass-delete", *opts])
            assert code == 0 and report["added"] == 40, err
        assert_same_collection(snapshot(copy), clean)
        measured.append(seen)
    print("\n[copies while writing]")
    for m in measured:
        print("  ", json.dumps(m))


# ---------------------------------------------------------------------- 6. damage beside framework documents
def shared_collection(tmp_path, tiny_folder, capsys) -> tuple[Path, Path, list[str]]:
    """A collection written by `recemb sync` of a folder (6 files) and a LangChain store (6 documents), then
    damaged: garbage over the payload pages of every segment. (store, folder, the framework's ids)."""
    folder = write_folder(tmp_path / "docs", 0, slice(0, 6))
    store = tmp_path / "store"
    assert run(capsys, ["sync", str(folder), *PASSAGE_FLAGS, *cli_opts(tiny_folder, store)])[0] == 0
    framework = lc_documents(1, slice(20, 26), prefix="fw-")
    with lc_store(tiny_folder, store) as vectors:
        vectors.add_documents(framework)
        owners = sorted({d.metadata.get("i") for d in vectors.get_by_ids([d.id for d in framework])})
    assert owners == list(range(20, 26))
    segments = sorted((store / "collections" / "c" / "shard" / "segments").iterdir())
    assert segments
    for segment in segments:
        with open(segment / "payload_storage" / "page_0.dat", "r+b") as f:
            f.write(random.Random(segment.name).randbytes(1 << 14))
    return store, folder, [d.id for d in framework]


def test_damage_to_a_collection_with_framework_documents_is_one_line_at_every_door(tmp_path, tiny_folder, capsys):
    store, folder, framework = shared_collection(tmp_path, tiny_folder, capsys)
    opts = cli_opts(tiny_folder, store)
    lines = {}
    for name, argv in (("search", ["search", QUERY]), ("sync", ["sync", str(folder)])):
        code, _, err = run(capsys, [*argv, *opts], json_out=False)
        lines[name] = one_line_error(err)
        assert code == 1 and "is damaged" in lines[name] and "--rebuild --allow-mass-delete" in lines[name], err
    for name, act in (("langchain search", lambda s: s.similarity_search(QUERY)),
                      ("langchain add", lambda s: s.add_documents(lc_documents(1, slice(30, 31), prefix="fw-")))):
        with lc_store(tiny_folder, store) as vectors, pytest.raises(StoreDamagedError) as damaged:
            act(vectors)
        lines[name] = str(damaged.value)
        assert "\n" not in lines[name] and "is damaged" in lines[name], lines[name]
    # A read by id meets the damage only where the pages it reads are damaged: refused in one line, or right.
    with lc_store(tiny_folder, store) as vectors:
        try:
            got = {d.id: d.metadata for d in vectors.get_by_ids(framework)}
            assert got == {d.id: d.metadata for d in lc_documents(1, slice(20, 26), prefix="fw-")}
            lines["langchain get"] = "answered (its pages are not among the damaged ones)"
        except StoreDamagedError as e:
            lines["langchain get"] = str(e)
            assert "\n" not in lines["langchain get"] and "is damaged" in lines["langchain get"]
    print("\n[damage beside framework documents]", json.dumps(lines, indent=1))


def test_a_rebuild_of_a_damaged_collection_never_drops_framework_documents_silently(tmp_path, tiny_folder, capsys,
                                                                                   monkeypatch):
    """The rebuild the damage line names, on a collection a LangChain store also wrote into: refused in one line
    that names the framework's store and the way on (the record says who wrote, read without the damaged
    payloads), before the model loads, nothing written; the same through ``QdrantSync.sync`` (``RebuildError``);
    with --drop-other-writers the rebuild runs, the folder's documents come back and the framework's are gone, to
    be added again through their store."""
    from recemb.core import Embedder
    from recemb_integrations.cli import resources
    from recemb_integrations.qdrant import QdrantSync, RebuildError
    from recemb_integrations.sources import folder_sources

    store, folder, framework = shared_collection(tmp_path, tiny_folder, capsys)

    def files() -> list[str]:  # (Qdrant Edge rewrites some of a collection's files as it opens it, so not their times)
        return sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())

    before = files()
    loads = []
    real_load = resources.load_embedder
    monkeypatch.setattr(resources, "load_embedder", lambda *a, **k: loads.append(1) or real_load(*a, **k))
    code, _, err = run(capsys, ["sync", str(folder), "--rebuild", "--allow-mass-delete",
                                *cli_opts(tiny_folder, store)], json_out=False)
    line = one_line_error(err)
    assert code == 2 and "a framework's vector store (LangChain, LlamaIndex) also wrote into it" in line, err
    code, _, err = run(capsys, ["sync", str(folder), "--drop-other-writers", *cli_opts(tiny_folder, store)],
                       json_out=False)  # without --rebuild it would do nothing: refused, not ignored
    assert code == 2 and "applies to a --rebuild" in one_line_error(err) and not loads, err
    assert "--drop-other-writers" in line and "Nothing was written" in line and not loads
    embedder = Embedder.from_pretrained(str(tiny_folder), device="cpu", backend="torch")
    with open_store(path=store) as opened, pytest.raises(RebuildError, match="drop_other_writers=True"):
        QdrantSync(opened, "c", embedder).sync(folder_sources(folder).sources, rebuild=True, allow_mass_delete=True)
    assert files() == before and sorted(p.name for p in (store / "collections").iterdir()) == ["c"]  # no staging
    code, report, err = run(capsys, ["sync", str(folder), "--rebuild", "--allow-mass-delete", "--drop-other-writers",
                                     *PASSAGE_FLAGS, *cli_opts(tiny_folder, store)])
    assert code == 0 and report["added"] == 6, err
    with lc_store(tiny_folder, store) as vectors:
        assert vectors.get_by_ids(framework) == []
        vectors.add_documents(lc_documents(1, slice(20, 26), prefix="fw-"))
        assert [d.id for d in vectors.get_by_ids(framework)] == framework
    print(f"\n[rebuild of a damaged shared collection] refused: {line}")


# ---------------------------------------------------------------------- 7. and 8. huge inputs
def measured_run(argv: list[str], timeout: float = 1800) -> dict:
    """Run ``argv`` in a child process: its exit code, output and wall time."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=timeout)
    seconds = time.perf_counter() - started
    return {"rc": proc.returncode, "out": out, "err": err, "s": round(seconds, 1)}


def run_measured(argv: list[str], timeout: float = 3600) -> dict:
    """Run ``argv`` under a small process of its own that reports its exit code, output, wall time and peak
    resident memory (RUSAGE_CHILDREN of that process: ``argv``'s alone, not this test process's other children)."""
    script = ("import json, resource, subprocess, sys, time\n"
              "t = time.perf_counter()\n"
              "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
              "print(json.dumps({'rc': done.returncode, 'out': done.stdout[-20000:], 'err': done.stderr[-5000:], "
              "'s': round(time.perf_counter() - t, 1), "
              "'rss_mib': round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)}))\n")
    result = measured_run([sys.executable, "-c", script, *argv], timeout=timeout)
    assert result["rc"] == 0, result["err"][-3000:]
    return json.loads(result["out"].strip().splitlines()[-1])


@pytest.mark.slow
def test_a_30_mb_single_file_syncs_in_bounded_memory(tmp_path, tiny_folder, capsys):
    """One 30 MB text file (lines of words, no other file), `recemb sync` with its defaults (passages of 128 tokens
    above 512) in a process of its own: it completes, every passage is there, a search finds it, and the process
    stays under 1.5 GiB (README: 924 MiB with the bundled model for 50 MB)."""
    folder = tmp_path / "big"
    folder.mkdir()
    rng = random.Random(30)
    words = QUERY.split() + "the of a in to and is was for on with as by at from".split()
    with open(folder / "book.txt", "w", encoding="utf-8") as f:
        written = 0
        while written < 30_000_000:
            line = " ".join(rng.choice(words) for _ in range(14)) + ".\n"
            f.write(line)
            written += len(line)
    store = tmp_path / "store"
    result = run_measured([sys.executable, "-m", "recemb_integrations.cli", "sync", str(folder), "--json",
                           *cli_opts(tiny_folder, store)], timeout=5400)
    assert result["rc"] == 0, result["err"]
    report = json.loads(result["out"].strip().splitlines()[-1])
    assert report["added"] == 1 and not report["failed"]
    with open_store(path=store) as opened:
        own, passages = raw_state(opened)
    assert of_version(own, passages, "book.txt") == own["book.txt"]["passages"] > 100_000
    hits = cli_search(capsys, [QUERY, *cli_opts(tiny_folder, store)])
    assert [h["document_id"] for h in hits] == ["book.txt"]
    print(f"\n[30 MB file] {written:,} characters, {own['book.txt']['tokens']:,} tokens, "
          f"{own['book.txt']['passages']:,} passages: {result['s']} s, peak RSS {result['rss_mib']} MiB, "
          f"{report['embedded_tokens']:,} tokens embedded")
    assert result["rss_mib"] < 1536


@pytest.mark.slow
def test_a_5_mb_query_gets_a_bounded_answer_at_every_door(tmp_path, tiny_folder, capsys):
    """A 5 MB query (the collection's words and 40,000 distinct made-up ones, so BM25 sees many terms): the
    operating system refuses it as one argument of a new process (E2BIG: 128 KiB at most); `recemb search` given it
    (its main, as a shell's `"$(cat q)"` would within the limit), ``QdrantSync.search`` and the LangChain retriever
    each answer with at most their limit of real documents, in bounded time and memory (a process each)."""
    folder = write_folder(tmp_path / "docs", 0, slice(0, 8))
    store = tmp_path / "store"
    assert run(capsys, ["sync", str(folder), *PASSAGE_FLAGS, *cli_opts(tiny_folder, store)])[0] == 0
    rng = random.Random(5)
    made_up = ["".join(rng.choice("bcdfghjklmnpqrstvwxz") + rng.choice("aeiou") for _ in range(4))
               for _ in range(40_000)]
    words = QUERY.split() + made_up
    query_file = tmp_path / "query.txt"
    parts, size = [], 0
    while size < 5_000_000:
        part = " ".join(rng.choice(words) for _ in range(12)) + ". "
        parts.append(part)
        size += len(part)
    query_file.write_text("".join(parts), encoding="utf-8")
    query = query_file.read_text(encoding="utf-8")
    with pytest.raises(OSError) as too_long:  # what a shell's `recemb search "$(cat query.txt)"` meets
        subprocess.run([sys.executable, "-m", "recemb_integrations.cli", "search", query, "--limit", "1"])
    assert too_long.value.errno == errno.E2BIG
    ids = {f"{d}.txt" for d, _, _ in documents(version=0)[:8]}
    child = [sys.executable, str(CHILD), str(tmp_path / "progress"), "0"]
    doors = {"recemb search": [*child, "cli", "search", f"@file:{query_file}", "--json", "--limit", "5",
                               *cli_opts(tiny_folder, store)],
             "QdrantSync.search": [*child, "api-search", str(tiny_folder), str(store), f"@file:{query_file}"],
             "LangChain retriever": [*child, "lc-search", str(tiny_folder), str(store), f"@file:{query_file}"]}
    measured = {}
    for door, argv in doors.items():
        result = run_measured(argv, timeout=1200)
        assert result["rc"] == 0, (door, result["err"][-3000:])
        out = json.loads(result["out"].strip().splitlines()[-1])
        found = [h["document_id"] for h in out] if door == "recemb search" else [h[0] for h in out["hits"]]
        assert 1 <= len(found) <= 5 and set(found) <= ids, (door, found)
        measured[door] = {"s": result["s"], "rss_mib": result["rss_mib"], "hits": len(found)}
        assert result["rss_mib"] < 2048, (door, result)
    print(f"\n[5 MB query] {len(query):,} characters: {json.dumps(measured)}")
