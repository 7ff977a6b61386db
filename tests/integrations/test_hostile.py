"""The second hostile pass over the main job: one test per finding, through the real `recemb` command on both
embedded stores, and the store compared with the source after every case.

1. an --id-prefix root never deletes (nor overwrites) another root's documents, in either order;
2. the filesystem root and /proc, /sys, /dev are refused however they are named;
3. text without whitespace is tokenized in bounded pieces, and a document that yields almost no tokens is warned of;
4. a symbolic link to a file is a document under its own path;
5. the small crashes: a huge --limit, migrate into its own store or from a missing collection, unreadable links;
6. names with escape sequences or newlines are printed escaped, --json exact;
7. --skip-empty keeps an emptied document's stored version, UTF-16 and NUL bytes are reported, a query's missing BM25
   terms are explained, a lone fused hit is scored by its dense similarity.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

pytest.importorskip("qdrant_client")
from qdrant_client import models as qm  # noqa: E402

import recemb.core.embedder as embedder_module  # noqa: E402
import recemb.core.tokenizer as tokenizer_module  # noqa: E402
from recemb.core import DEFAULT_MODEL, Embedder  # noqa: E402
from recemb_integrations import qdrant as q  # noqa: E402
from recemb_integrations.cli import main  # noqa: E402
from recemb_integrations.qdrant import Document, QdrantSync  # noqa: E402
from recemb_integrations.stores import open_store  # noqa: E402
from tests.integrations.cli_cases import (  # noqa: E402
    assert_store_is,
    one_line_error,
    run,
    spy_on_tokenizer,
    stored_payloads,
    texts_under,
    write,
)
from tests.utils import assert_stored_dense, expected_document_vectors  # noqa: E402


# ---------------------------------------------------------------------- 1. roots
@pytest.mark.parametrize("prefixed_first", [False, True], ids=["unprefixed-first", "prefixed-first"])
def test_an_id_prefix_never_deletes_another_roots_documents(tmp_path, opts, capsys, prefixed_first):
    """The issue's case: g/a/same.md (id a/same.md, unprefixed) and m/doc00.md under --id-prefix a."""
    store = tmp_path / "store"
    g, m = tmp_path / "g", tmp_path / "m"
    write(g / "a" / "same.md", "the same text about owls")
    write(g / "b" / "same.md", "the same text about owls")
    write(g / "c" / "third.md", "a third text, so one deletion is not half of the root")
    write(m / "doc00.md", "a note about tides and the moon")
    unprefixed = ["sync", str(g), *opts]
    prefixed = ["sync", str(m / "doc00.md"), "--id-prefix", "a", *opts]
    expected = {**texts_under(g), "a/doc00.md": (m / "doc00.md").read_text()}
    for argv in (prefixed, unprefixed) if prefixed_first else (unprefixed, prefixed):
        code, report, err = run(capsys, argv)
        assert code == 0 and report["deleted"] == 0 and report["added"] >= 1, err
    assert_store_is(store, expected)
    for argv in (unprefixed, prefixed):  # again, each: nothing of the other root is "missing"
        code, report, err = run(capsys, argv)
        assert code == 0 and report["deleted"] == 0 and report["added"] == 0, err
        assert_store_is(store, expected)

    (g / "b" / "same.md").unlink()  # a file gone from one root is deleted from that root only
    code, report, _ = run(capsys, unprefixed)
    assert code == 0 and report["deleted"] == 1
    del expected["b/same.md"]
    assert_store_is(store, expected)
    (m / "doc00.md").unlink()
    write(m / "doc01.md", "another note")
    code, _, err = run(capsys, ["sync", str(m), "--id-prefix", "a", *opts])
    assert code == 2 and "would delete 1 of the 1 documents" in err  # the root's only document: guarded
    code, report, _ = run(capsys, ["sync", str(m), "--id-prefix", "a", "--allow-mass-delete", *opts])
    assert code == 0 and report["deleted"] == 1 and report["added"] == 1
    del expected["a/doc00.md"]
    expected["a/doc01.md"] = "another note"
    assert_store_is(store, expected)


def test_an_id_that_another_root_stored_is_refused_not_overwritten(tmp_path, opts, capsys):
    store = tmp_path / "store"
    g, m = tmp_path / "g", tmp_path / "m"
    write(g / "a" / "same.md", "the unprefixed root's text")
    write(m / "same.md", "the prefixed root's text")
    write(m / "other.md", "more of the prefixed root")
    assert run(capsys, ["sync", str(g), *opts])[0] == 0
    code, report, err = run(capsys, ["sync", str(m), "--id-prefix", "a", *opts])
    assert code == 1 and report["added"] == 1 and [f[0] for f in report["failed"]] == ["a/same.md"], err
    assert "stored by the folder sync without an id prefix" in report["failed"][0][1]
    assert_store_is(store, {"a/same.md": "the unprefixed root's text", "a/other.md": "more of the prefixed root"})
    # and the other way round: the unprefixed root cannot take the prefixed root's id
    write(g / "a" / "other.md", "the unprefixed root claims it")
    code, report, _ = run(capsys, ["sync", str(g), *opts])
    assert code == 1 and [f[0] for f in report["failed"]] == ["a/other.md"]
    assert "stored by the sync with id prefix 'a'" in report["failed"][0][1]
    assert_store_is(store, {"a/same.md": "the unprefixed root's text", "a/other.md": "more of the prefixed root"})


def test_a_prefix_is_a_whole_path_component(tmp_path, opts, capsys):
    """--id-prefix wiki manages wiki/..., never wikipedia/... of the unprefixed root."""
    store = tmp_path / "store"
    g = tmp_path / "g"
    write(g / "wikipedia" / "x.md", "an encyclopedia page")
    write(tmp_path / "w" / "y.md", "a wiki page")
    assert run(capsys, ["sync", str(g), *opts])[0] == 0
    code, report, _ = run(capsys, ["sync", str(tmp_path / "w"), "--id-prefix", "wiki", *opts])
    assert code == 0 and report["deleted"] == 0
    assert_store_is(store, {"wikipedia/x.md": "an encyclopedia page", "wiki/y.md": "a wiki page"})


def test_scopes_in_the_api(tiny_embedder, tmp_path, store_kind):
    with open_store(path=tmp_path / "s", kind=store_kind) as store:
        sync = QdrantSync(store, "c", tiny_embedder)
        assert sync.sync([Document("wiki/a", "alpha"), Document("wikipedia/b", "beta")]).added == 2
        report = sync.sync([Document("wiki/c", "gamma"), Document("elsewhere", "delta")], scope="wiki")
        assert report.added == 1 and report.deleted == 0  # "wiki" means "wiki/": wiki/a is the unprefixed root's
        assert [f[0] for f in report.failed] == ["elsewhere"] and "outside this sync's scope" in report.failed[0][1]
        assert sorted(h.document_id for h in sync.search("alpha", limit=10, mode="dense")) == \
            ["wiki/a", "wiki/c", "wikipedia/b"]
        report = sync.sync([Document("wiki/d", "epsilon")], scope="wiki/", allow_mass_delete=True)  # 1 of 1
        assert report.deleted == 1 and report.added == 1  # its own wiki/c, nothing else
        for blank in ("/", "", "  ", " / "):  # an unset variable must not mean "every id"
            with pytest.raises(ValueError, match="scope"):
                sync.sync([Document("x", "y")], scope=blank)
        assert sorted(h.document_id for h in sync.search("alpha", limit=10, mode="dense")) == \
            ["wiki/a", "wiki/d", "wikipedia/b"]


def test_points_written_before_roots_were_recorded_are_adopted(tmp_path, opts, capsys, monkeypatch):
    """A collection of an earlier recemb has no root on its points: the old id rule judges them, and a sync stamps
    those it finds among its files."""
    store = tmp_path / "store"
    g = tmp_path / "g"
    for name in ("x.md", "y.md", "z.md"):
        write(g / name, f"the text of {name}")
    with monkeypatch.context() as m:
        m.setattr(q.points, "ROOT_KEY", "unrecorded")  # as if written by a recemb that had no roots
        assert run(capsys, ["sync", str(g), "--passage-tokens", "8", *opts])[0] == 0
    assert all("root" not in p for p in stored_payloads(store).values())
    (g / "z.md").unlink()
    code, report, _ = run(capsys, ["sync", str(g), *opts])
    assert code == 0 and report["deleted"] == 1 and report["unchanged"] == 2
    assert {p["root"] for p in stored_payloads(store).values()} == {""}
    with open_store(path=store) as s:  # passages are stamped too
        unstamped = s.count("c", qm.Filter(must=[qm.IsEmptyCondition(is_empty=qm.PayloadField(key="root"))]))
    assert unstamped == 0
    write(tmp_path / "w" / "v.md", "a prefixed root's text")
    code, report, _ = run(capsys, ["sync", str(tmp_path / "w"), "--id-prefix", "w", *opts])
    assert code == 0 and report["deleted"] == 0
    assert_store_is(store, {**texts_under(g), "w/v.md": "a prefixed root's text"})


# ---------------------------------------------------------------------- 2. the filesystem root and /proc
def test_the_filesystem_root_is_refused_however_it_is_named(tmp_path, opts, capsys, monkeypatch, no_model):
    store = tmp_path / "store"
    deep = tmp_path / "notes" / "drafts"
    deep.mkdir(parents=True)
    (tmp_path / "to-root").symlink_to("/")
    monkeypatch.chdir(deep)
    up = os.path.relpath("/", deep)  # ../../.. as far as the root
    for paths in ([up], [up + "/"], [str(tmp_path / "to-root")], ["/*"], ["/*.md"], [up + "/*"],
                  [str(tmp_path / "to-*")]):
        code, _, err = run(capsys, ["sync", *paths, "--keep-missing", *opts])
        line = one_line_error(err, errno_allowed=False)
        assert code == 2 and "filesystem root" in line and "nothing was done" in line, (paths, err)
    assert not store.exists()


@pytest.mark.parametrize("path", ["/proc/self/status", "/proc", "/sys/kernel", "/dev/null", "/dev/*", "/proc/1/cwd"])
def test_virtual_filesystems_are_never_synced(tmp_path, opts, capsys, path, no_model):
    code, _, err = run(capsys, ["sync", path, "--keep-missing", *opts])
    # /proc/1/cwd: the root itself where we may follow it, /proc where we may not
    line = one_line_error(err, errno_allowed=False)
    assert code == 2 and ("kernel's view of the running system" in line or "filesystem root" in line)
    assert not (tmp_path / "store").exists()


def test_a_link_into_proc_met_in_a_folder_is_skipped(tmp_path, opts, capsys):
    corpus = tmp_path / "docs"
    write(corpus / "real.md", "a real document")
    (corpus / "status.txt").symlink_to("/proc/self/status")
    code, report, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0 and report["added"] == 1, err
    assert [(Path(p).name, "proc" in why) for p, why in report["skipped"]] == [("status.txt", True)]
    assert_store_is(tmp_path / "store", {"real.md": "a real document"})


def test_a_permission_error_names_the_path_in_one_line(tmp_path, opts, capsys, monkeypatch, no_model):
    corpus = tmp_path / "locked"
    write(corpus / "a.md", "text")
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if not isinstance(path, int) and os.fsdecode(path) == str(corpus):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    code, _, err = run(capsys, ["sync", str(corpus), *opts])
    line = one_line_error(err, errno_allowed=False)
    assert code == 2 and str(corpus) in line and "permission denied" in line


# ---------------------------------------------------------------------- 3. text without whitespace
@pytest.fixture
def bundled():
    """The bundled model (WordPiece), for the cases below."""
    return Embedder.from_pretrained(DEFAULT_MODEL, device="cpu")


def glued_text(chars: int) -> str:
    """English with its whitespace removed: punctuation is its only boundary."""
    from tests.utils import SAMPLE_TEXT

    glued = "".join(SAMPLE_TEXT.split())
    return (glued * (chars // len(glued) + 1))[:chars]


def test_text_without_whitespace_streams_in_bounded_pieces(tmp_path, capsys, monkeypatch, store_kind, bundled):
    """The bundled WordPiece pipeline cuts at punctuation: bounded pieces, the very ids of the whole text."""
    text = glued_text(60_000)
    path = write(tmp_path / "glued.txt", text)
    monkeypatch.setattr(embedder_module, "STREAM_MIN_CHARS", 1000)
    original = tokenizer_module.TextTokenizer.encode_stream
    monkeypatch.setattr(tokenizer_module.TextTokenizer, "encode_stream",
                        lambda self, t, window_chars=2000, **kw: original(self, t, window_chars=2000, **kw))
    widest = spy_on_tokenizer(monkeypatch, bundled)
    monkeypatch.setattr(embedder_module.Embedder, "from_pretrained", classmethod(lambda cls, *a, **k: bundled))
    store = tmp_path / "store"
    code, report, err = run(capsys, ["sync", str(path), "--qdrant-path", str(store), "--collection", "c",
                                     "--store", store_kind])
    assert code == 0 and report["added"] == 1 and report["warnings"] == [], err
    assert widest and max(widest) <= 4000  # the tokenizer never saw the whole text
    with open_store(path=store) as s:
        vector = s.retrieve("c", [q.point_id("glued.txt")], with_vectors=True)[0].vector["dense"]
    # Embedded as the default passages only: the document's vector is their mean.
    assert_stored_dense(vector, expected_document_vectors(bundled, [text], q.DEFAULT_PASSAGE_TOKENS,
                                                          q.DEFAULT_PASSAGE_OVERLAP, q.DEFAULT_PASSAGES_ABOVE)[0],
                        rtol=1e-5, atol=1e-6)
    assert_store_is(store, {"glued.txt": text})


def test_one_huge_word_is_one_unknown_token_and_warned_of(tmp_path, capsys, monkeypatch, store_kind, bundled):
    text = "abc" * 1_000_000  # 3 M characters, one "word"
    path = write(tmp_path / "word.txt", text)
    widest = spy_on_tokenizer(monkeypatch, bundled)
    monkeypatch.setattr(embedder_module.Embedder, "from_pretrained", classmethod(lambda cls, *a, **k: bundled))
    store = tmp_path / "store"
    code, report, err = run(capsys, ["sync", str(path), "--qdrant-path", str(store), "--collection", "c",
                                     "--store", store_kind])
    assert code == 0 and report["added"] == 1 and report["embedded_tokens"] == 3, err
    assert max(widest, default=0) < 1000  # the word was never handed to the tokenizer
    warned = [what for _, what in report["warnings"]]
    assert any("1 word of more than 100 characters" in w and "unknown token" in w for w in warned), warned
    assert any("gave only 3 tokens" in w for w in warned), warned
    assert_store_is(store, {"word.txt": text})


def test_a_stretch_no_tokenizer_rule_can_cut_is_read_no_further(tmp_path, opts, capsys, monkeypatch, tiny_folder):
    """The tiny model's byte-level BPE can cut only at spaces: past the bound, the text is read no further, and the
    report says so; the embedding is that of the text cut there."""
    text = "x" * 3000 + "yz" * 2000
    path = write(tmp_path / "docs" / "blob.txt", text)
    monkeypatch.setattr(embedder_module, "STREAM_MIN_CHARS", 1000)
    monkeypatch.setattr(tokenizer_module, "STREAM_MAX_PIECE_CHARS", 2500)
    original = tokenizer_module.TextTokenizer.encode_stream
    monkeypatch.setattr(tokenizer_module.TextTokenizer, "encode_stream",
                        lambda self, t, window_chars=500, **kw: original(self, t, window_chars=500, **kw))
    code, report, err = run(capsys, ["sync", str(path.parent), *opts])
    assert code == 0 and report["added"] == 1, err
    warned = [what for _, what in report["warnings"]]
    assert any("only its first 2,500 of 7,000 characters were read" in w for w in warned), warned
    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    with open_store(path=tmp_path / "store") as s:
        vector = s.retrieve("c", [q.point_id("blob.txt")], with_vectors=True)[0].vector["dense"]
    assert_stored_dense(vector, expected_document_vectors(emb, [text[:2500]], q.DEFAULT_PASSAGE_TOKENS,
                                                          q.DEFAULT_PASSAGE_OVERLAP, q.DEFAULT_PASSAGES_ABOVE)[0],
                        rtol=1e-5, atol=1e-6)
    assert_store_is(tmp_path / "store", {"blob.txt": text})


# ---------------------------------------------------------------------- 4. links to files
def test_a_link_to_a_file_is_a_document_under_its_own_path(tmp_path, opts, capsys):
    corpus = tmp_path / "notes"
    write(corpus / "real" / "owl.md", "owls hunt at night")
    write(corpus / "real" / "tide.md", "tides follow the moon")  # one deletion below is not half of the folder
    (corpus / "ln").mkdir()
    (corpus / "ln" / "filelink.md").symlink_to(corpus / "real" / "owl.md")
    code, report, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0 and report["added"] == 3 and report["skipped"] == [], err
    assert_store_is(tmp_path / "store", {"ln/filelink.md": "owls hunt at night", "real/owl.md": "owls hunt at night",
                                         "real/tide.md": "tides follow the moon"})
    (corpus / "ln" / "filelink.md").unlink()
    code, report, _ = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0 and report["deleted"] == 1
    assert_store_is(tmp_path / "store", {"real/owl.md": "owls hunt at night", "real/tide.md": "tides follow the moon"})
    # the same file named twice by the same path is still one document
    code, report, _ = run(capsys, ["sync", str(corpus), str(corpus / "real" / "owl.md"), *opts])
    assert code == 0 and report["unchanged"] == 2 and report["failed"] == []


# ---------------------------------------------------------------------- 5. small crashes
def test_a_huge_limit_is_refused_in_one_line(tmp_path, opts, capsys):
    corpus = write(tmp_path / "docs" / "a.md", "owls and tides").parent
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    code, _, err = run(capsys, ["search", "owls", "--limit", "9223372036854775807", *opts])
    assert code == 2 and "--limit" in one_line_error(err, errno_allowed=False)
    code, hits, err = run(capsys, ["search", "owls", "--limit", "10000", *opts])
    assert code == 0 and [h["document_id"] for h in hits] == ["a.md"], err
    assert_store_is(tmp_path / "store", {"a.md": "owls and tides"})


def test_migrate_slips(tmp_path, opts, capsys):
    store = tmp_path / "store"
    corpus = write(tmp_path / "docs" / "a.md", "owls and tides").parent
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    source = ["--qdrant-path", str(store), "--store", opts[-1]]
    code, _, err = run(capsys, ["migrate", "--collection", "missing", "--to-path", str(tmp_path / "t"), *source])
    assert code == 2 and "does not exist" in one_line_error(err, errno_allowed=False) and not (tmp_path / "t").exists()
    code, _, err = run(capsys, ["migrate", "--collection", "c", "--to-path", str(store), *source])
    line = one_line_error(err, errno_allowed=False)
    assert code == 2 and "same collection" in line and "another process" not in line
    code, report, err = run(capsys, ["migrate", "--collection", "c", "--to-path", str(store) + "/",
                                     "--to-collection", "c2", *source])
    assert code == 0 and report["copied"] >= 1, err
    assert_store_is(store, {"a.md": "owls and tides"}, collection="c2")
    code, _, err = run(capsys, ["migrate", "--collection", "c", "--to-path", str(store), "--to-collection", "c2",
                                *source])
    line = one_line_error(err, errno_allowed=False)
    assert code == 2 and "already exists" in line and "--to-collection" in line and "(--collection)" not in line
    assert_store_is(store, {"a.md": "owls and tides"})


def test_an_unreadable_link_is_not_called_broken(tmp_path, opts, capsys, monkeypatch):
    corpus = tmp_path / "docs"
    write(corpus / "a.md", "owls")
    link = corpus / "secret.md"
    link.symlink_to(tmp_path / "elsewhere" / "secret.md")
    write(tmp_path / "elsewhere" / "secret.md", "not for us")
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if not isinstance(path, int) and os.fsdecode(path) == str(link) and kwargs.get("follow_symlinks", True):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    code, report, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0 and report["added"] == 1, err
    [(path, why)] = report["skipped"]
    assert Path(path).name == "secret.md" and "permission denied" in why and "broken" not in why
    assert_store_is(tmp_path / "store", {"a.md": "owls"})


# ---------------------------------------------------------------------- 6. names that break output
def test_names_are_printed_escaped_and_json_is_exact(tmp_path, opts, capsys):
    corpus = tmp_path / "docs"
    names = ["\x1b[2Jclear.md", "new\nline.md", "back\\slash.md"]
    for name in names:
        write(corpus / name, "")  # empty: each is named in a warning line
    write(corpus / "owls.md", "owls hunt at night \x1b[31m in red")
    code = main(["sync", str(corpus), "--store-text", "--passage-tokens", "8", *opts])
    text = capsys.readouterr().out
    assert code == 0 and "\x1b" not in text and "\\x1b[2Jclear.md" in text and "back\\\\slash.md" in text
    assert "new\\nline.md" in text and all(not line.startswith("line.md") for line in text.splitlines())
    code, report, _ = run(capsys, ["sync", str(corpus), *opts])
    assert sorted(doc_id for doc_id, _ in report["warnings"]) == sorted(names)  # exact in JSON
    code = main(["search", "owls at night", "--granularity", "passage", *opts])
    text = capsys.readouterr().out
    # the excerpt folds the control character into a space, as it folds whitespace: nothing reaches the terminal
    assert code == 0 and "\x1b" not in text and "owls hunt at night [31m in red" in text
    code, hits, _ = run(capsys, ["search", "red owls", "--granularity", "passage", *opts])
    assert any("\x1b[31m" in (h.get("text") or "") for h in hits)
    assert_store_is(tmp_path / "store", {name: "" for name in names} | {"owls.md": (corpus / "owls.md").read_text()})


# ---------------------------------------------------------------------- 7. surprises
def test_skip_empty_keeps_the_stored_version_of_an_emptied_file(tmp_path, opts, capsys):
    corpus = tmp_path / "docs"
    write(corpus / "a.md", "owls hunt at night")
    write(corpus / "b.md", "tides follow the moon")
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    (corpus / "a.md").write_text("")  # truncated, by an editor's crash or a careless redirect
    code, report, err = run(capsys, ["sync", str(corpus), "--skip-empty", *opts])
    assert code == 0 and report["deleted"] == 0, err
    [(doc_id, what)] = report["warnings"]
    assert doc_id == "a.md" and "stored version is kept" in what
    assert_store_is(tmp_path / "store", {"a.md": "owls hunt at night", "b.md": "tides follow the moon"})
    code, _, err = run(capsys, ["sync", str(corpus), "--skip-empty", "--rebuild", *opts])
    assert code == 2 and "would lose their stored versions" in one_line_error(err, errno_allowed=False)
    assert_store_is(tmp_path / "store", {"a.md": "owls hunt at night", "b.md": "tides follow the moon"})
    write(corpus / "c.md", "")  # a new empty file is still just left out
    code, report, _ = run(capsys, ["sync", str(corpus), "--skip-empty", *opts])
    assert code == 0 and any(d == "c.md" and "left out" in w for d, w in report["warnings"])
    code, report, _ = run(capsys, ["sync", str(corpus), *opts])  # without the flag: stored empty, as asked
    assert code == 0 and report["updated"] == 1 and report["added"] == 1
    assert_store_is(tmp_path / "store", {"a.md": "", "b.md": "tides follow the moon", "c.md": ""})


def test_utf16_without_bom_and_nul_bytes_are_reported(tmp_path, opts, capsys):
    corpus = tmp_path / "docs"
    write(corpus / "notes.txt", "owls hunt at night")
    write(corpus / "b.txt", "tides")
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    (corpus / "notes.txt").write_bytes("owls hunt at night, now in UTF-16".encode("utf-16-le"))
    (corpus / "nul.txt").write_bytes(b"a text\x00with a NUL byte")
    code, report, err = run(capsys, ["sync", str(corpus), *opts])
    failed = dict(report["failed"])
    assert code == 1 and sorted(failed) == ["notes.txt", "nul.txt"], err
    assert "UTF-16" in failed["notes.txt"] and "NUL" in failed["notes.txt"] and "NUL" in failed["nul.txt"]
    assert report["deleted"] == 0
    assert_store_is(tmp_path / "store", {"notes.txt": "owls hunt at night", "b.txt": "tides"})


def test_a_query_without_bm25_terms_says_why(tmp_path, opts, capsys):
    corpus = write(tmp_path / "docs" / "a.md", "混合検索 owls").parent
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    query = "混合検索で長い文書を見つける方法について説明してくださいこれは四十文字を超える日本語のクエリです"
    code, hits, err = run(capsys, ["search", query, *opts])
    assert code == 0 and len(hits) == 1
    assert "longer than 40 characters" in err and "Chinese or Japanese" in err and "stopwords and punct" not in err
    code, _, err = run(capsys, ["search", "the and of", *opts])
    assert code == 0 and "english stopwords" in err
    assert_store_is(tmp_path / "store", {"a.md": "混合検索 owls"})


def test_a_lone_fused_hit_is_scored_by_its_dense_similarity(tmp_path, opts, capsys):
    corpus = tmp_path / "docs"
    for name, text in (("a.md", "owls hunt at night"), ("b.md", "tides follow the moon"), ("c.md", "owls sleep")):
        write(corpus / name, text)
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    code, hybrid, err = run(capsys, ["search", "owls", "--filter", "file_name=c.md", *opts])
    assert code == 0 and [h["document_id"] for h in hybrid] == ["c.md"] and "dense similarity" in err
    code, dense, _ = run(capsys, ["search", "owls", "--filter", "file_name=c.md", "--mode", "dense", *opts])
    assert hybrid[0]["score"] == pytest.approx(dense[0]["score"]) and hybrid[0]["score"] not in (0.5, 1.0)
    code, hits, err = run(capsys, ["search", "owls", *opts])  # several hits: fused as always
    assert len(hits) == 3 and "dense similarity" not in err
    assert_store_is(tmp_path / "store", texts_under(corpus))


def test_a_document_cut_by_max_tokens_is_not_called_token_poor(tmp_path, opts, capsys):
    """The few-tokens warning is about what the text yields, not about a limit the user set."""
    corpus = write(tmp_path / "docs" / "long.md", "owls hunt at night in the forest " * 600).parent
    code, report, err = run(capsys, ["sync", str(corpus), "--max-tokens", "8", *opts])
    assert code == 0 and report["added"] == 1, err
    [(doc_id, what)] = report["warnings"]
    assert doc_id == "long.md" and "truncated to its first 8 tokens" in what
    assert_store_is(tmp_path / "store", {"long.md": (corpus / "long.md").read_text()})
