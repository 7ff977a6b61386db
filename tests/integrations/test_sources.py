"""The Python folder sync (``recemb_integrations.sources``): ``folder_sources`` + ``QdrantSync`` build the same
collection as ``recemb sync`` on both embedded stores, and ``folder_sources`` names, reports and refuses what the
command does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from recemb_integrations.sources import (
    FILE_METADATA_INDEXES,
    FolderSources,
    clean_id_prefix,
    file_metadata,
    folder_sources,
    read_text,
    text_fingerprint,
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def docs(tmp_path) -> Path:
    """A nested folder: documents at three depths, and entries that are not documents."""
    folder = tmp_path / "docs"
    write(folder / "a.md", "# A\nstate space models keep a fixed-size state")
    write(folder / "sub" / "b.txt", "vertical chunking carries the state across chunks")
    write(folder / "sub" / "deeper" / "c.rst", "tides follow the moon")
    write(folder / "sub" / "deeper" / "d.txt", "sourdough needs a starter")
    write(folder / ".hidden.md", "hidden files are not documents")
    (folder / "image.bin").write_bytes(b"\x00\x01")
    return folder


# ---------------------------------------------------------------------- what folder_sources finds
def test_ids_are_relative_to_the_argument_they_were_found_under(docs):
    found = folder_sources([str(docs)])
    assert found.ids == ("a.md", "sub/b.txt", "sub/deeper/c.rst", "sub/deeper/d.txt")
    assert found.files == tuple(Path(os.path.abspath(docs / i)) for i in found.ids)
    assert (found.missing, found.skipped, found.scope) == ((), (), None)
    assert folder_sources(docs) == folder_sources([docs]) == found  # one path as it is, Path or str
    assert folder_sources([str(docs / "sub" / "b.txt")]).ids == ("b.txt",)  # a file: relative to its own folder
    assert folder_sources([f"{docs}/sub/**/*.txt"]).ids == ("b.txt", "deeper/d.txt")  # a glob: its fixed folders
    assert folder_sources([str(docs / "*.md")]).ids == ("a.md",)  # hidden entries never match
    # a file reached twice keeps its first id
    assert folder_sources([str(docs), str(docs / "sub")]).ids == found.ids
    assert folder_sources([str(docs / "sub"), str(docs)]).ids == ("b.txt", "deeper/c.rst", "deeper/d.txt", "a.md")
    with pytest.raises(AttributeError):
        found.ids = ()  # frozen: what a sync was planned from stays what it was


def test_an_id_prefix_is_cleaned_and_becomes_the_sync_s_root(docs):
    found = folder_sources([str(docs / "sub")], id_prefix=" /wiki/ ")
    assert found.ids == ("wiki/b.txt", "wiki/deeper/c.rst", "wiki/deeper/d.txt") and found.scope == "wiki/"
    assert folder_sources([str(docs / "sub")], id_prefix="team/wiki").scope == "team/wiki/"
    assert clean_id_prefix("wiki") == clean_id_prefix("/wiki/") == clean_id_prefix("  wiki/\n") == "wiki"
    for empty in ("", "  ", "/", " // "):
        with pytest.raises(ValueError, match="id prefix .* is empty"):
            clean_id_prefix(empty)
        with pytest.raises(ValueError, match="id prefix .* is empty"):
            folder_sources([str(docs)], id_prefix=empty)


def test_missing_paths_and_skipped_entries_are_reported(docs, tmp_path):
    os.mkfifo(docs / "pipe.txt")
    (docs / "linked").symlink_to(docs / "sub", target_is_directory=True)
    (docs / "dangling.md").symlink_to(docs / "nowhere.md")
    (docs / "loop.txt").symlink_to(docs / "loop.txt")
    (tmp_path / "broken.md").symlink_to(tmp_path / "gone.md")
    found = folder_sources([str(docs), str(tmp_path / "typo"), f"{tmp_path}/*.nothing", str(tmp_path / "broken.md")])
    assert found.ids == ("a.md", "sub/b.txt", "sub/deeper/c.rst", "sub/deeper/d.txt")
    assert found.missing == ((str(tmp_path / "typo"), "no such file or folder"),
                             (f"{tmp_path}/*.nothing", "no file or folder matches this pattern"),
                             (str(tmp_path / "broken.md"), f"broken symbolic link (to {tmp_path / 'gone.md'})"))
    reasons = {Path(path).name: why for path, why in found.skipped}
    assert set(reasons) == {"pipe.txt", "linked", "dangling.md", "loop.txt"}
    assert reasons["pipe.txt"] == "a FIFO (named pipe), not a regular file"
    assert reasons["linked"] == "symbolic link to a folder (not followed)"
    assert reasons["dangling.md"].startswith("broken symbolic link") and reasons["loop.txt"] == "symbolic link loop"


def test_empty_arguments_and_system_paths_are_refused_before_anything_is_listed(docs, monkeypatch):
    for paths in ([""], [str(docs), "  "]):
        with pytest.raises(ValueError, match=r"^an empty path argument was given \(an unset shell variable\?\)"):
            folder_sources(paths)
    with pytest.raises(ValueError, match="is the filesystem root"):
        folder_sources(["/"])
    monkeypatch.chdir(docs)
    with pytest.raises(ValueError, match="starts at the filesystem root"):
        folder_sources(["../../../../../../../../*.md"])
    with pytest.raises(ValueError, match="is under /proc, the kernel's view of the running system"):
        folder_sources(["/proc/self"])


def test_the_metadata_is_the_indexed_file_metadata_and_the_path(docs, monkeypatch):
    assert file_metadata(docs / "Guide.MD", 12) == {"file_name": "Guide.MD", "suffix": ".md", "bytes": 12,
                                                   "path": str(docs / "Guide.MD")}
    assert set(file_metadata(docs / "a.md", 0)) == set(FILE_METADATA_INDEXES) | {"path"}  # the path: read, not filtered
    monkeypatch.chdir(docs)
    assert file_metadata(Path("sub/b.txt"), 0)["path"] == str(docs / "sub" / "b.txt")  # absolute, as the sync reads it


def test_sources_read_lazily_and_are_built_anew_on_each_access(docs):
    pytest.importorskip("qdrant_client")
    from recemb_integrations.qdrant import DocumentSource, content_hash

    found = folder_sources([str(docs / "sub")], id_prefix="wiki")
    sources = found.sources
    assert all(isinstance(s, DocumentSource) for s in sources) and [s.id for s in sources] == list(found.ids)
    first = sources[0]
    text = (docs / "sub" / "b.txt").read_text()
    assert first.metadata == {"file_name": "b.txt", "suffix": ".txt", "bytes": len(text),
                              "path": str(docs / "sub" / "b.txt")} and first.size == len(text)
    assert first.read() == text and first.fingerprint() == (content_hash(text), False)
    write(docs / "sub" / "b.txt", "changed since")  # nothing was read when the sources were built: read now
    assert first.read() == "changed since"
    assert found.sources[0].metadata["bytes"] == len("changed since")


def test_reading_refuses_what_is_not_utf8_text(tmp_path):
    cases = {"latin1.txt": ("café".encode("latin-1"), "not valid UTF-8 (byte 0xe9 at offset 3); convert it to UTF-8"),
             "bom.txt": ("\ufeffhi".encode("utf-16"), "it starts with a UTF-16 byte-order mark"),
             "utf16.txt": ("plain text".encode("utf-16-le"), "it looks like UTF-16 text without a byte-order mark"),
             "binary.txt": (b"abc\x00\xff\xfe\x01\x02" * 8, "not valid UTF-8")}
    for name, (raw, message) in cases.items():
        (tmp_path / name).write_bytes(raw)
        for read in (read_text, text_fingerprint):
            with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
                read(tmp_path / name)


def test_the_streamed_hash_is_the_hash_of_the_text(tmp_path):
    pytest.importorskip("qdrant_client")
    from recemb_integrations.qdrant import content_hash

    text = "naïve façade — état 状態 " * 50  # multi-byte characters cut by every piece size
    write(tmp_path / "t.md", text)
    for piece in (1, 2, 3, 7, 1 << 20):
        assert text_fingerprint(tmp_path / "t.md", piece=piece) == (content_hash(text), False)
    write(tmp_path / "blank.md", " \n\t ")
    assert text_fingerprint(tmp_path / "blank.md")[1] is True


def test_listing_and_hashing_load_no_model(docs):
    code = ("import sys\nfrom recemb_integrations.sources import folder_sources, text_fingerprint\n"
            f"found = folder_sources([{str(docs)!r}], id_prefix='x')\n"
            "[text_fingerprint(f) for f in found.files]\n"
            "print(sorted(m for m in ('torch', 'recemb.core', 'recemb.core.embedder', 'qdrant_client',\n"
            "                          'recemb_integrations.qdrant.sync') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


# ---------------------------------------------------------------------- the Python sync is `recemb sync`
def snapshot(store_path: Path, collection: str) -> dict:
    """Every point of the collection: id -> (payload, dense vector, BM25 vector as index -> value)."""
    from recemb_integrations.stores import open_store
    from tests.utils import stored_points

    with open_store(path=store_path) as store:
        return stored_points(store, collection)


def assert_same_collection(store_path: Path, got: str, want: str) -> None:
    from recemb_integrations.qdrant import collection_settings
    from recemb_integrations.stores import open_store

    got_points, want_points = snapshot(store_path, got), snapshot(store_path, want)
    assert sorted(got_points) == sorted(want_points) and want_points
    for point_id, (payload, dense, sparse) in want_points.items():
        assert got_points[point_id][0] == payload
        np.testing.assert_allclose(got_points[point_id][1], dense, rtol=1e-5, atol=1e-6)
        assert got_points[point_id][2] == sparse
    with open_store(path=store_path) as store:
        assert collection_settings(store, got) == collection_settings(store, want)


def counts(report: dict) -> dict:
    """A report's outcome, as JSON carries it (lists for tuples), without its timing."""
    keys = ("added", "updated", "metadata_updated", "unchanged", "deleted", "failed", "warnings", "skipped",
            "embedded_tokens")
    return json.loads(json.dumps({key: report[key] for key in keys}))


def python_sync(store_path: Path, store_kind: str, tiny_folder, paths: list[str], id_prefix: str | None,
                **settings) -> dict:
    """What ``recemb sync PATHS [--id-prefix P]`` does, in Python, into the collection "py"."""
    from recemb.core import Embedder
    from recemb_integrations.qdrant import QdrantSync
    from recemb_integrations.stores import open_store

    found = folder_sources(paths, id_prefix=id_prefix)
    assert not found.missing  # as the command, which refuses to delete what a mistyped path would hide
    # The command records a local model folder by its absolute path.
    embedder = Embedder.from_pretrained(str(Path(tiny_folder).resolve()), device="cpu")
    with open_store(path=store_path, kind=store_kind) as store:
        sync = QdrantSync(store, "py", embedder, index_metadata=FILE_METADATA_INDEXES, **settings)
        report = sync.sync(found.sources, scope=found.scope, show_progress_bar=False)
    report.skipped = list(found.skipped) + report.skipped  # as the command reports them
    return report.as_dict()


CASES = {  # name -> (paths under tmp_path, id prefix, the command's flags, QdrantSync's settings for them)
    "folder": (["docs"], None, [], {}),
    "prefix and passages": (["docs"], "wiki", ["--passage-tokens", "8", "--passage-overlap", "2", "--store-text"],
                            {"passage_tokens": 8, "passage_overlap": 2, "store_text": True}),
    "nested glob and a file": (["docs/sub/**/*.txt", "docs/a.md"], "notes", ["--dense-only"], {"sparse": False}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_python_folder_sync_builds_the_collection_recemb_sync_builds(case, docs, tmp_path, tiny_folder,
                                                                      store_kind, capsys, monkeypatch):
    pytest.importorskip("qdrant_client")
    from tests.integrations.cli_cases import run, stored_ids

    paths, prefix, flags, settings = CASES[case]
    monkeypatch.chdir(tmp_path)  # relative arguments, as typed
    (docs / "linked").symlink_to(docs / "sub", target_is_directory=True)  # skipped by both walks of docs/
    store = tmp_path / "store"
    argv = ["sync", *paths, *(["--id-prefix", prefix] if prefix else []), *flags, "--model", str(tiny_folder),
            "--qdrant-path", str(store), "--store", store_kind, "--collection", "cli"]
    reports = []
    for round_ in range(2):
        if round_:  # one file changed, one added, one deleted: both collections follow alike
            write(docs / "sub" / "b.txt", "vertical chunking, rewritten")
            write(docs / "sub" / "deeper" / "e.txt", "a new document")
            (docs / "sub" / "deeper" / "d.txt").unlink()
        code, command, err = run(capsys, argv)
        assert code == 0, err
        python = python_sync(store, store_kind, tiny_folder, paths, prefix, **settings)
        assert counts(python) == counts(command)
        assert_same_collection(store, "py", "cli")
        reports.append(command)
    assert reports[0]["added"] >= 3 and len(reports[0]["skipped"]) == (1 if paths == ["docs"] else 0)
    assert (reports[1]["added"], reports[1]["updated"], reports[1]["deleted"]) == (1, 1, 1)
    ids = stored_ids(store, "py")
    assert ids == sorted(folder_sources(paths, id_prefix=prefix).ids)
    assert all(doc_id.startswith(f"{prefix}/") for doc_id in ids) or prefix is None


def test_folder_sources_is_what_the_command_syncs(docs, tmp_path, tiny_folder, store_kind, capsys):
    """The ids, content hashes and metadata the command stores are those of ``folder_sources``."""
    pytest.importorskip("qdrant_client")
    from recemb_integrations.qdrant import content_hash
    from tests.integrations.cli_cases import run, stored_payloads

    found = folder_sources([str(docs)], id_prefix="wiki")
    code, _, err = run(capsys, ["sync", str(docs), "--id-prefix", "wiki", "--model", str(tiny_folder),
                                "--qdrant-path", str(tmp_path / "store"), "--store", store_kind])
    assert code == 0, err
    payloads = stored_payloads(tmp_path / "store", "recemb")
    assert sorted(payloads) == sorted(found.ids)
    for source, path in zip(found.sources, found.files):
        assert payloads[source.id]["content_hash"] == content_hash(source.read())
        assert payloads[source.id]["metadata"] == source.metadata == file_metadata(path, path.stat().st_size)


def test_nothing_found_is_an_empty_record():
    pytest.importorskip("qdrant_client")
    assert FolderSources() == FolderSources((), (), (), (), None) and FolderSources().sources == []
