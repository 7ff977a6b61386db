"""The hostile pass over the embedded stores' files (#44, items 5 and 7 and two messages), through the real `recemb`
command on Qdrant Edge and, where it applies, qdrant-client's local mode:

5. a full disk is one line naming the store and the lack of space, exit code 1 (not a SIGBUS), for sync and for
   search; nothing is lost, and the same sync completes once space is freed. The filesystem is a small tmpfs mounted
   in a user and mount namespace (``unshare``), with the commands in child processes: a SIGBUS kills them, not pytest;
7. a damaged store (a corrupt or truncated write-ahead log, segment, record or marker file, zeroed or garbage
   vectors, a deleted segment) is one line naming the file (or the collection's folder) and the way to recover,
   exit code 1, for search and for sync; the way it names works;
-  a store on a read-only filesystem is refused in one line with the way on (Qdrant Edge writes when it opens a
   collection); the lock's message names the store once, whatever its folder is called.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("qdrant_client")
from qdrant_client import models as qm  # noqa: E402

from recemb_integrations.stores import StoredPoint, open_store  # noqa: E402
from tests.integrations.cli_cases import assert_store_is, make_corpus, one_line_error, run, texts_under  # noqa: E402


def kind_opts(tiny_folder, tmp_path, kind: str) -> list[str]:
    return ["--model", str(tiny_folder), "--qdrant-path", str(tmp_path / "store"), "--collection", "c", "--store",
            kind]


@pytest.fixture
def edge_opts(tiny_folder, tmp_path):
    pytest.importorskip("qdrant_edge")
    return kind_opts(tiny_folder, tmp_path, "edge")


@pytest.fixture
def local_opts(tiny_folder, tmp_path):
    return kind_opts(tiny_folder, tmp_path, "local")



def with_store(opts: list[str], path) -> list[str]:
    """``opts`` with --qdrant-path replaced."""
    i = opts.index("--qdrant-path")
    return [*opts[:i + 1], str(path), *opts[i + 2:]]


def synced(tmp_path, opts, capsys, n: int = 6) -> Path:
    corpus = make_corpus(tmp_path / "docs", n)
    code, _, err = run(capsys, ["sync", str(corpus), "--passage-tokens", "8", "--passages-above", "8", *opts])
    assert code == 0, err
    return corpus


# ---------------------------------------------------------------------- a small filesystem of its own
# Runs inside `unshare --user --map-root-user --mount`: mounts a tmpfs, then follows the plan (a JSON list of steps)
# and prints what each command returned as one JSON line.
SCENARIO = r"""
import json, os, shutil, subprocess, sys
mnt, plan = sys.argv[1], json.loads(sys.argv[2])
results = {}
for step, *args in plan:
    if step == "mount":
        os.makedirs(mnt, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args[0]}", "tmpfs", mnt], capture_output=True,
                              text=True)
        if done.returncode:
            print(json.dumps({"skip": done.stderr.strip() or "mount failed"}))
            sys.exit(0)
    elif step == "copy":  # keeping the holes of Edge's sparse files, as a store that was written there has them
        subprocess.run(["cp", "-a", "--sparse=always", args[0], args[1]], check=True)
    elif step == "fill":  # leave args[0] bytes free
        filler = os.path.join(mnt, "filler")
        if os.path.exists(filler):
            os.unlink(filler)
        with open(filler, "wb") as f:
            while True:
                free = shutil.disk_usage(mnt).free - args[0]
                if free <= 0:
                    break
                try:
                    f.write(b"\0" * min(free, 1 << 20))
                    f.flush()
                except OSError:
                    break
        results["free " + str(args[0])] = shutil.disk_usage(mnt).free
    elif step == "unfill":
        os.unlink(os.path.join(mnt, "filler"))
    elif step == "read-only":
        subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
    elif step == "cli":
        name, argv = args
        done = subprocess.run([sys.executable, "-m", "recemb_integrations.cli", *argv], capture_output=True,
                              text=True, timeout=300)
        results[name] = {"rc": done.returncode, "out": done.stdout, "err": done.stderr}
print(json.dumps(results))
"""


def in_namespace(tmp_path, plan) -> dict:
    """Run ``plan`` in a mount namespace of its own (see SCENARIO); skip where no small filesystem can be made."""
    if shutil.which("unshare") is None:
        pytest.skip("no small filesystem can be made here: `unshare` (util-linux) is not installed")
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True, text=True)
    if probe.returncode:
        pytest.skip("no small filesystem can be made here: user and mount namespaces are not permitted "
                    f"(unshare -Urm: {probe.stderr.strip()})")
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", sys.executable, str(script),
                           str(tmp_path / "mnt"), json.dumps(plan)], capture_output=True, text=True, env=env,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in results:
        pytest.skip(f"no small filesystem can be made here: mounting a tmpfs failed ({results['skip']})")
    return results


def test_a_full_disk_is_one_line_and_the_same_sync_completes_once_space_is_freed(tmp_path, opts, store_kind,
                                                                                  capsys):
    corpus = synced(tmp_path, opts, capsys)
    (corpus / "new.txt").write_text("a note about owls written while the disk was full")
    store = tmp_path / "mnt" / "store"
    argv = with_store(opts, store)
    sync, search = ["sync", str(corpus), *argv], ["search", "topic 3", *argv]
    # 384 MiB: Edge's files on tmpfs take ~100 MiB once opened, and opening one asks for what they could still take
    plan = [["mount", "384m"], ["copy", str(tmp_path / "store"), str(store)], ["fill", 0],
            ["cli", "search full", search], ["cli", "sync full", sync]]
    if store_kind == "edge":  # a disk almost full: less than an opening needs, more than nothing
        plan += [["fill", 8 << 20], ["cli", "search nearly full", search], ["cli", "sync nearly full", sync]]
    plan += [["unfill"], ["cli", "sync after", sync], ["copy", str(store), str(tmp_path / "after")]]
    results = in_namespace(tmp_path, plan)
    assert results["free 0"] < 1 << 20
    failing = ["sync full"] + (["search full", "search nearly full", "sync nearly full"] if store_kind == "edge"
                               else [])
    for name in failing:
        result = results[name]
        assert result["rc"] == 1, (name, result)  # not 135 (SIGBUS), not a traceback's 1 with many lines
        line = one_line_error(result["err"])
        assert f"no space left for the embedded store at {store}" in line, (name, line)
        assert "free some space there and run the command again" in line, (name, line)
    if store_kind == "local":  # local mode writes nothing to search: it searches a full disk
        result = results["search full"]
        assert result["rc"] == 0 and "topic 3" in result["out"] and not result["err"], result
    result = results["sync after"]
    assert result["rc"] == 0 and "1 added" in result["out"], result
    assert_store_is(tmp_path / "after", texts_under(corpus))


def test_the_free_space_check_comes_before_any_write_and_loses_nothing(tmp_path, edge_opts, capsys, monkeypatch):
    """Anywhere (no namespace needed): a disk with less free space than Edge's margin refuses the sync before it
    writes, and the same sync completes once there is room."""
    from recemb_integrations.stores import edge_checks

    opts = edge_opts
    corpus = synced(tmp_path, opts, capsys)
    before = texts_under(corpus)
    (corpus / "doc000.txt").write_text("a changed text")
    (corpus / "new.txt").write_text("a new one")
    with monkeypatch.context() as m:
        m.setattr(edge_checks, "free_space", lambda folder: edge_checks.SPACE_FLOOR - 1)
        for argv in (["sync", str(corpus)], ["search", "topic"]):
            code, _, err = run(capsys, [*argv, *opts], json_out=False)
            line = one_line_error(err)
            assert code == 1 and f"no space left for the embedded store at {tmp_path / 'store'}" in line, err
            assert "MiB free on its disk" in line
    assert_store_is(tmp_path / "store", before)  # nothing was written
    code, report, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0 and report["added"] == 1 and report["updated"] == 1, err
    assert_store_is(tmp_path / "store", texts_under(corpus))


def test_the_engine_reporting_a_full_disk_is_the_same_line(tmp_path, edge_opts, capsys, monkeypatch):
    """Where the check passed and Edge still ran out (it reports ENOSPC from a small file it writes as an
    exception, measured on ext4), its error is the same one line."""
    import qdrant_edge

    from recemb_integrations.stores import edge_collections

    opts = edge_opts
    synced(tmp_path, opts, capsys)

    class Engine:
        def __getattr__(self, name):
            return getattr(qdrant_edge, name)

        class EdgeShard:
            @staticmethod
            def load(path, config=None):
                raise Exception("Service runtime error: Failed to save structure on disk with error: No space left "
                                f'on device (os error 28) at path "{path}/.atomicwriteX"')

    monkeypatch.setattr(edge_collections, "_edge", Engine)
    code, _, err = run(capsys, ["search", "topic", *opts], json_out=False)
    line = one_line_error(err)
    assert code == 1 and f"no space left for the embedded store at {tmp_path / 'store'}" in line
    assert "its disk is full" in line and "os error 28" in line


# ---------------------------------------------------------------------- damaged stores
def _segments(store: Path) -> list[Path]:
    return sorted((store / "collections" / "c" / "shard" / "segments").iterdir())


def _garbage(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.write(random.Random(path.name).randbytes(size))


def _zero(path: Path) -> None:
    with open(path, "r+b") as f:
        f.write(b"\0" * path.stat().st_size)


def _truncate(path: Path, size: int) -> None:
    os.truncate(path, size)


def _vector_files(store: Path) -> list[Path]:
    """The dense vectors' files: an appendable segment's chunks, an indexed one's matrix (a lean collection indexes
    every segment it writes)."""
    return [f for p in _segments(store) for pattern in ("vector_storage-dense/vectors/chunk_*.mmap",
                                                        "vector_storage-dense/matrix.dat") for f in p.glob(pattern)]


def _in_segments(store: Path, *patterns: str) -> list[Path]:
    """The files of these names in any segment (appendable and indexed segments name their files apart)."""
    return [f for p in _segments(store) for pattern in patterns for f in p.glob(pattern)]


SHARD = Path("collections", "c", "shard")
# name -> (the damage, what the line names besides the collection's folder: the file where the engine says which)
EDGE_DAMAGE = {
    "wal-garbage": (lambda s: _garbage(s / SHARD / "wal" / "open-1", 4096),
                    lambda s: [f"{s / SHARD / 'wal'}: ", "Illegal segment header"]),
    "wal-index-truncated": (lambda s: _truncate(s / SHARD / "wal" / "first-index", 3),
                            lambda s: [str(s / SHARD / "wal" / "first-index")]),
    "shard-config-truncated": (lambda s: _truncate(s / SHARD / "edge_config.json", 20),
                               lambda s: [str(s / SHARD / "edge_config.json")]),
    "segment-state-truncated": (lambda s: [_truncate(p / "segment.json", 30) for p in _segments(s)],
                                lambda s: [f"{_segments(s)[0] / 'segment.json'}"]),
    "id-tracker-garbage": (lambda s: [_garbage(f, 200) for f in _in_segments(s, "mutable_id_tracker.mappings",
                                                                             "id_tracker.e2i")],
                           lambda s: ["failed to load segment", "Inconsistent storage"]),
    "vectors-truncated": (lambda s: [_truncate(f, 0) for f in _vector_files(s)],
                          lambda s: ["have lost their dense vector", f"a file under {s / SHARD / 'segments'}"]),
    "vectors-zeroed": (lambda s: [_zero(f) for f in _vector_files(s)],
                       lambda s: ["dense vector is all zeros", f"the vector files under {s / SHARD / 'segments'}"]),
    "vectors-garbage": (lambda s: [_garbage(f, 1 << 16) for f in _vector_files(s)],
                        lambda s: ["not a unit vector", f"the vector files under {s / SHARD / 'segments'}"]),
    "deleted-flags-garbage": (lambda s: [_garbage(f, 4096) for f in _in_segments(
        s, "vector_storage-dense/deleted/flags_a.dat", "vector_storage-dense/deleted.dat")],
        lambda s: ["have lost their dense vector"]),
    "payloads-garbage": (lambda s: [_garbage(p / "payload_storage" / "page_0.dat", 1 << 14) for p in _segments(s)],
                         lambda s: ["Qdrant Edge cannot read it", "Failed to decode value"]),
    "record-truncated": (lambda s: _truncate(s / "collections" / "c" / "collection.json", 40),
                         lambda s: [f"{s / 'collections' / 'c' / 'collection.json'} is damaged"]),
}


@pytest.mark.parametrize("damage", list(EDGE_DAMAGE))
def test_a_damaged_edge_store_is_one_line_naming_the_file_and_the_way_to_recover(tmp_path, edge_opts, capsys, damage):
    opts = edge_opts
    store = tmp_path / "store"
    corpus = synced(tmp_path, opts, capsys)
    harm, named = EDGE_DAMAGE[damage]
    harm(store)
    folder = store / "collections" / "c"
    for argv in (["search", "document number 3"], ["sync", str(corpus)]):
        code, _, err = run(capsys, [*argv, *opts], json_out=False)
        line = one_line_error(err)
        assert code == 1, (argv, err)
        assert all(part in line for part in named(store)), (argv, line)
        assert "rebuild it from every folder it was synced from with `recemb sync PATHS --rebuild " \
               "--allow-mass-delete`" in line, line
        assert f"delete its folder {folder} and sync it again" in line and "or restore the store from a backup" in line
    (corpus / "doc001.txt").unlink()  # the source moved on since: the rebuild follows it
    # What a damaged collection holds cannot be counted: a rebuild without the flag (a mistyped path would drop the
    # rest unread) is refused before anything is written, the damage still there and still reported.
    code, _, err = run(capsys, ["sync", str(corpus), "--rebuild", *opts], json_out=False)
    assert code == 2 and "the guard against deleting most of a collection cannot count it. Nothing was written" \
        in one_line_error(err), err
    code, _, err = run(capsys, ["search", "document number 3", *opts], json_out=False)
    assert code == 1 and all(part in one_line_error(err) for part in named(store)), err
    code, report, err = run(capsys, ["sync", str(corpus), "--rebuild", "--allow-mass-delete", *opts])  # the way
    assert code == 0 and report["added"] == len(texts_under(corpus)), err
    note = [ln for ln in err.splitlines() if ln.startswith("recemb sync: note:")]
    assert len(note) == 1 and "drops what it cannot read" in note[0], err  # said before anything was written
    assert any("could not be read" in why for _, why in report["warnings"]), report
    # ... and says what was damaged, never again the advice to run the rebuild it has just done
    assert not any("--rebuild" in why or "restore" in why for _, why in report["warnings"]), report
    assert_store_is(store, texts_under(corpus))
    assert run(capsys, ["search", "document number 3", *opts])[0] == 0
    code, report, err = run(capsys, ["sync", str(corpus), *opts])  # and it is whole: nothing left to do
    assert code == 0 and report["unchanged"] == len(texts_under(corpus)) and not report["warnings"], err


@pytest.mark.parametrize("damage", ["record-truncated", "vectors-zeroed"])
def test_the_apis_rebuild_of_a_damaged_collection_needs_allow_mass_delete(tmp_path, edge_opts, capsys, tiny_embedder,
                                                                         damage):
    from recemb_integrations.qdrant import MassDeletionError, QdrantSync
    from recemb_integrations.sources import folder_sources

    store = tmp_path / "store"
    corpus = synced(tmp_path, edge_opts, capsys)
    EDGE_DAMAGE[damage][0](store)
    sources = folder_sources([str(corpus)]).sources
    with open_store(path=store) as s:
        sync = QdrantSync(s, "c", tiny_embedder, passage_tokens=8, passages_above=8)
        with pytest.raises(MassDeletionError, match="cannot count it. Nothing was written") as refused:
            sync.sync(sources, rebuild=True)
        assert "allow_mass_delete=True" in str(refused.value) and "--" not in str(refused.value)
        assert sorted(f.name for f in (store / "collections").iterdir()) == ["c"]  # no staging collection either
        report = sync.sync(sources, rebuild=True, allow_mass_delete=True)
        assert report.added == len(texts_under(corpus)) and any("could not be read" in w for _, w in report.warnings)
    assert_store_is(store, texts_under(corpus))


def test_a_damaged_store_marker_is_one_line_and_the_way_on_works(tmp_path, edge_opts, capsys):
    opts = edge_opts
    store = tmp_path / "store"
    corpus = synced(tmp_path, opts, capsys)
    marker = store / "recemb-edge.json"
    _truncate(marker, 5)
    for argv in (["search", "document number 3"], ["sync", str(corpus)]):
        code, _, err = run(capsys, [*argv, *opts], json_out=False)
        line = one_line_error(err)
        assert code == 1 and f"{marker} is damaged" in line, err
        assert 'write {"format": 1, "engine": "qdrant-edge"} into it, or restore the store from a backup' in line
    marker.write_text('{"format": 1, "engine": "qdrant-edge"}')
    code, report, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0 and report["unchanged"] == len(texts_under(corpus)), err


def test_a_deleted_segment_is_noticed_not_searched_around(tmp_path, edge_opts, capsys):
    """Once the write-ahead log has moved past the first writes (it keeps 32 MiB), a deleted segment loses points:
    the count recorded when the collection was last closed says so."""
    opts = edge_opts
    store = tmp_path / "store"
    corpus = synced(tmp_path, opts, capsys)
    padding = qm.Filter(must=[qm.FieldCondition(key="kind", match=qm.MatchValue(value="padding"))])
    with open_store(path=store) as s:  # a store that has lived: 40 MB written and deleted since the sync
        points = s.count("c")
        dim = s.collection_info("c").dense_size
        for i in range(40):
            s.upsert("c", [StoredPoint(f"00000000-0000-0000-0000-{i:012d}", {"kind": "padding", "x": "x" * 1_000_000},
                                       {"dense": [1.0] * dim})])
        s.delete("c", padding)
    assert json.loads((store / "collections" / "c" / "collection.json").read_text())["points"] == points
    for segment in _segments(store):
        shutil.rmtree(segment)
    folder = store / "collections" / "c"
    for argv in (["search", "document number 3"], ["sync", str(corpus)]):
        code, _, err = run(capsys, [*argv, *opts], json_out=False)
        line = one_line_error(err)
        assert code == 1 and f"where {points} were written, so points were lost" in line, err
        assert f"a segment under {folder / 'shard' / 'segments'} is missing or damaged" in line
        assert f"delete its folder {folder} and sync it again" in line
    shutil.rmtree(folder)
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    assert_store_is(store, texts_under(corpus))


KILLED_WHILE_WRITING = """
import os, signal, sys
from qdrant_client import models as qm
from recemb_integrations.stores import open_store
store = open_store(path=sys.argv[1])
store.delete("c", qm.Filter(must=[qm.FieldCondition(key="document_id", match=qm.MatchValue(value="doc003.txt"))]))
os.kill(os.getpid(), signal.SIGKILL)  # before the close that records the count
"""


def test_writes_and_a_kill_never_look_like_lost_points(tmp_path, edge_opts, capsys):
    """The recorded count follows every sync (adds, updates, deletes), and a process killed after a write records
    none: the next opening checks nothing rather than crying damage, and its close records the count again."""
    opts = edge_opts
    store = tmp_path / "store"
    corpus = synced(tmp_path, opts, capsys)
    (corpus / "doc001.txt").unlink()
    (corpus / "doc002.txt").write_text("changed " * 40)
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    record = store / "collections" / "c" / "collection.json"
    with open_store(path=store) as s:
        assert json.loads(record.read_text())["points"] == s.count("c") > 0
    killed = subprocess.run([sys.executable, "-c", KILLED_WHILE_WRITING, str(store)], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert killed.returncode == -9, killed.stderr
    assert json.loads(record.read_text())["points"] is None  # written, never closed: unknown
    code, report, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0 and report["added"] == 1, err  # doc003.txt, whose points the killed process deleted
    assert_store_is(store, texts_under(corpus))
    with open_store(path=store) as s:
        assert json.loads(record.read_text())["points"] == s.count("c")


LOCAL_DAMAGE = {
    "sqlite-truncated": (lambda s: _truncate(s / "collection" / "c" / "storage.sqlite", 5000),
                         "collection/c/storage.sqlite", "delete it and sync the collection again"),
    "sqlite-garbage": (lambda s: _garbage(s / "collection" / "c" / "storage.sqlite", 4096),
                       "collection/c/storage.sqlite", "delete it and sync the collection again"),
    "meta-truncated": (lambda s: _truncate(s / "meta.json", 30), "meta.json",
                       "delete the store folder {store} and sync its collections again"),
}


@pytest.mark.parametrize("damage", list(LOCAL_DAMAGE))
def test_a_damaged_local_mode_store_is_one_line_naming_the_file_and_the_way_to_recover(tmp_path, local_opts,
                                                                                        capsys, damage):
    opts = local_opts
    store = tmp_path / "store"
    corpus = synced(tmp_path, opts, capsys)
    harm, named, way = LOCAL_DAMAGE[damage]
    harm(store)
    for argv in (["search", "document number 3"], ["sync", str(corpus)]):
        code, _, err = run(capsys, [*argv, *opts], json_out=False)
        line = one_line_error(err)
        assert code == 1 and f"{store / named} is damaged" in line, (argv, err)
        assert way.format(store=store) in line and "or restore the store from a backup" in line, line
    # the way the line names
    shutil.rmtree(store) if named == "meta.json" else (store / named).unlink()
    code, report, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0 and report["added"] == len(texts_under(corpus)), err
    assert_store_is(store, texts_under(corpus))


# ---------------------------------------------------------------------- read-only and in use
def test_a_store_on_a_read_only_filesystem_is_searched_in_a_copy_or_refused_with_the_way_on(tmp_path, opts,
                                                                                            store_kind, capsys):
    """Qdrant Edge writes to its files even to search: a search of a read-only Edge store reads a private copy,
    with a note, and answers as the store itself does; a sync is refused before any work, and so is local mode."""
    synced(tmp_path, opts, capsys)
    code, expected, err = run(capsys, ["search", "topic 3", *opts])
    assert code == 0, err
    store = tmp_path / "mnt" / "store"
    plan = [["mount", "256m"], ["copy", str(tmp_path / "store"), str(store)], ["read-only"],
            ["cli", "search", ["search", "topic 3", *with_store(opts, store), "--json"]],
            ["cli", "sync", ["sync", str(tmp_path / "docs"), *with_store(opts, store)]]]
    results = in_namespace(tmp_path, plan)
    for name in (("sync",) if store_kind == "edge" else ("search", "sync")):
        line = one_line_error(results[name]["err"])
        assert results[name]["rc"] == 2, results[name]  # nothing was done
        assert f"the embedded store at {store} cannot be opened here" in line and "read-only" in line, line
        assert "copy the store to a folder you can write and give that folder (--qdrant-path)" in line, line
    if store_kind == "edge":
        search = results["search"]
        assert search["rc"] == 0, search
        note = [ln for ln in search["err"].splitlines() if "note:" in ln]
        assert len(note) == 1 and "searched in a copy at" in note[0] and "removed when done" in note[0], search
        hits = json.loads(search["out"].strip().splitlines()[-1])
        assert [(h["document_id"], h["score"]) for h in hits] == [(h["document_id"], h["score"]) for h in expected]
        copy = note[0].split("searched in a copy at ")[1].split(",")[0]
        assert not Path(copy).exists()  # removed when done


def test_the_in_use_message_names_a_folder_called_store_once(tmp_path, opts, store_kind, capsys, monkeypatch):
    synced(tmp_path, opts, capsys)
    monkeypatch.chdir(tmp_path)
    with open_store(path=tmp_path / "store", kind=store_kind):  # another process, as far as the lock can tell
        code, _, err = run(capsys, ["search", "topic", *with_store(opts, "store")], json_out=False)
    line = one_line_error(err)
    assert code == 2 and f"the embedded store at {tmp_path / 'store'} is in use by another process" in line, line
    assert "store store" not in line
