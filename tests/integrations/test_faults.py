"""Fault injection for the main job: a slip of the keyboard, a strange file or a kill never loses data.

One test per case of the robustness issue (empty and mistyped paths, globs, mass deletion, search settings, huge
files, bad flags, Ctrl-C, special files, empty documents), plus the crash and concurrency cases that already held
(SIGKILL mid-sync and mid-delete, two processes on one store), so none of them can come back.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qdrant_client")
from qdrant_client import QdrantClient  # noqa: E402
from qdrant_client import models as qm  # noqa: E402

from recemb.core import Embedder  # noqa: E402
from recemb_integrations import sources  # noqa: E402
from recemb_integrations.cli import main, resources  # noqa: E402
from recemb_integrations.qdrant import (  # noqa: E402
    Document,
    MassDeletionError,
    QdrantSync,
    collection_settings,
    content_hash,
)
from recemb_integrations.qdrant import point_id as sync_point_id  # noqa: E402
from recemb_integrations.stores import open_store  # noqa: E402
from tests.integrations.cli_cases import (  # noqa: E402
    as_an_earlier_recemb_wrote_it,
    earlier_file_metadata,
    make_corpus,
    point_count,
    run,
    spy_on_tokenizer,
    stored_ids,
    stored_payloads,
)
from tests.utils import assert_stored_dense, expected_document_vectors  # noqa: E402


# ---------------------------------------------------------------------- no mass deletion by accident
def test_empty_path_argument_is_refused_and_deletes_nothing(tmp_path, opts, capsys, monkeypatch):
    corpus = make_corpus(tmp_path / "docs", 4)
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    before = stored_ids(tmp_path / "store")
    monkeypatch.chdir(corpus)  # `recemb sync "$DOCS"` with DOCS unset, run from inside another folder
    for argv in (["sync", ""], ["sync", "  "], ["sync", str(corpus), ""]):
        code, _, err = run(capsys, argv + opts)
        assert code == 2 and "empty path argument" in err and len(err.strip().splitlines()) == 1
    assert stored_ids(tmp_path / "store") == before
    for flag in ("--model", "--qdrant-path", "--collection"):  # a flag whose variable is unset
        argv = ["sync", str(corpus), *opts] + [flag, ""]
        code, _, err = run(capsys, argv)
        assert code == 2 and f"{flag} is empty" in err
    assert stored_ids(tmp_path / "store") == before


def test_each_glob_match_is_judged_on_its_own(tmp_path, opts, capsys):
    folder = tmp_path / "g"
    make_corpus(folder, 2)
    (folder / "0-dangling.txt").symlink_to(folder / "gone.txt")  # sorts first
    code, report, _ = run(capsys, ["sync", str(folder / "*.txt"), *opts])
    assert code == 0 and report["added"] == 2
    assert [Path(p).name for p, _ in report["skipped"]] == ["0-dangling.txt"]
    assert "broken symbolic link" in report["skipped"][0][1]
    code, _, err = run(capsys, ["sync", str(folder / "*.nothing"), *opts])
    assert code == 2 and "no file or folder matches" in err and len(stored_ids(tmp_path / "store")) == 2


def _sync_all(capsys, corpus, opts):
    code, report, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0, err
    return report


def test_mass_deletion_needs_its_flag(tmp_path, opts, capsys):
    corpus = make_corpus(tmp_path / "docs", 10)
    _sync_all(capsys, corpus, opts)
    store = tmp_path / "store"
    points_before = point_count(store)
    sub = make_corpus(tmp_path / "docs" / "sub", 0)
    (corpus / "doc000.txt").rename(sub / "doc000.txt")  # the user meant docs/, typed docs/sub
    code, _, err = run(capsys, ["sync", str(sub), *opts])
    # ids are relative to the folder given: sub/doc000.txt is "doc000.txt", as docs/doc000.txt was
    assert code == 2 and "--allow-mass-delete" in err and "would delete 9 of the 10" in err and "--id-prefix" in err
    assert point_count(store) == points_before  # nothing deleted
    assert "doc000.txt" in stored_ids(store) and len(stored_ids(store)) == 10  # and nothing was written either

    # A few removed files need no flag; a deliberate big deletion works with it.
    for name in ("doc001.txt", "doc002.txt", "doc003.txt"):
        (corpus / name).unlink()
    report = _sync_all(capsys, corpus, opts)
    assert report["deleted"] == 4 and report["added"] == 1  # doc000 moved into sub/, 3 removed
    code, report, _ = run(capsys, ["sync", str(sub), "--allow-mass-delete", *opts])
    assert code == 0 and report["deleted"] == 7 and stored_ids(store) == ["doc000.txt"]


def test_mass_deletion_guard_in_the_api(tiny_embedder):
    docs = [Document(f"d{i}", f"text number {i}") for i in range(10)]
    with closing(QdrantClient(":memory:")) as client:
        sync = QdrantSync(client, "c", tiny_embedder)
        sync.sync(docs)
        with pytest.raises(MassDeletionError, match="allow_mass_delete=True"):
            sync.sync([Document("new", "a new text")])  # would delete all 10
        assert sync.count() == 10 and client.count("c", exact=True).count == 10  # not even "new" was written
        with pytest.raises(MassDeletionError):
            sync.sync([])
        with pytest.raises(MassDeletionError, match="delete 5 of the 10"):
            sync.sync(docs[:5])  # half of them: refused at any size
        assert sync.sync(docs[:6]).deleted == 4  # less than half: no flag needed
        with pytest.raises(MassDeletionError, match="delete 3 of the 6"):
            sync.sync(docs[:3])
        assert sync.sync(docs[:4]).deleted == 2
        assert sync.sync([Document("new", "x")], delete_missing=False).added == 1
        report = sync.sync([], allow_mass_delete=True)
        assert report.deleted == 5 and sync.count() == 0


# ---------------------------------------------------------------------- search reads the collection's settings
def test_search_needs_no_sync_flags(tmp_path, opts, capsys, tiny_folder, monkeypatch):
    corpus = make_corpus(tmp_path / "docs", 3, words=12)
    code, _, err = run(capsys, ["sync", str(corpus), "--passage-tokens", "8", "--passage-overlap", "2", *opts])
    assert code == 0, err
    code, hits, err = run(capsys, ["search", "topic 1", "--granularity", "passage", *opts])
    assert code == 0 and hits and all(h["passage"] is not None for h in hits), err
    code, hits, _ = run(capsys, ["search", "topic 1", "--limit", "2", *opts])
    assert code == 0 and len(hits) == 2 and all(h["passage"] is None for h in hits)
    # Without --model either: the collection's own model.
    no_model_opts = [o for o in opts if o not in ("--model", str(tiny_folder))]
    monkeypatch.delenv("RECEMB_MODEL", raising=False)
    code, hits, err = run(capsys, ["search", "topic 1", *no_model_opts])
    assert code == 0 and hits, err
    # A later sync adopts the collection's passages without repeating the flags; a contradiction is refused early.
    (corpus / "doc000.txt").write_text("changed text " * 20)
    code, report, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0 and report["updated"] == 1, err


def test_search_with_another_model_never_suggests_deleting(tmp_path, opts, capsys):
    from tests.utils import save_transformers_checkpoint, transformers_model

    corpus = make_corpus(tmp_path / "docs", 2)
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    other = save_transformers_checkpoint(transformers_model("g1", seed=1), tmp_path / "other")
    argv = ["search", "q", "--model", str(other), "--qdrant-path", str(tmp_path / "store"), "--collection", "c"]
    code, _, err = run(capsys, argv)
    assert code == 2 and "cannot be searched with this model" in err
    assert "delet" not in err.lower() and "written" not in err.lower()


# ---------------------------------------------------------------------- huge files: bounded windows, progress
def test_a_long_single_line_file_streams_in_bounded_windows(tmp_path, tiny_folder, monkeypatch):
    import recemb.core.embedder as embedder_module
    from tests.utils import SAMPLE_TEXT

    text = SAMPLE_TEXT.replace(". ", ", ") * 200  # one line, ~58K characters
    emb = Embedder.from_pretrained(tiny_folder, device="cpu", vertical_chunk_size=256)
    reference = emb.tokenize([text])[0]
    monkeypatch.setattr(embedder_module, "STREAM_MIN_CHARS", 1000)
    window = 2000
    original = emb.tokenizer.encode_stream
    monkeypatch.setattr(emb.tokenizer, "encode_stream",
                        lambda t, window_chars=window, **kwargs: original(t, window_chars=window, **kwargs))
    widest = spy_on_tokenizer(monkeypatch, emb)
    chars: list[int] = []
    with closing(QdrantClient(":memory:")) as client:
        sync = QdrantSync(client, "c", emb, passage_tokens=64, passage_overlap=16)
        assert emb.streams(text)
        stream = emb.tokenize_stream(text, on_chars=chars.append)
        assert sum(list(stream), []) == reference and sum(chars) == len(text)  # progress during tokenization
        widest.clear()
        report = sync.sync([Document("big.txt", text)])
        assert widest and max(widest) <= 2 * window  # the tokenizer never saw the whole text
        point = client.retrieve("c", [sync_point_id("big.txt")], with_vectors=True)[0]
        body, eos = reference[:-1], reference[-1]
        windows = [body[i : i + 64] + [eos] for i in range(0, len(body) - 16, 48)]  # the whole-list rule
        # Embedded as its passages only (the default): the document's vector is their normalised mean.
        mean = emb.embed_token_ids(windows, normalize=True).numpy().astype(np.float64).sum(axis=0)
        assert_stored_dense(point.vector["dense"], mean / np.linalg.norm(mean), rtol=1e-5, atol=1e-6)
        # The report counts every token embedded: the passages' (the document is not embedded whole).
        assert report.added == 1 and report.embedded_tokens == sum(map(len, windows))
        passages, _ = client.scroll("c", scroll_filter=qm.Filter(must=[qm.FieldCondition(
            key="kind", match=qm.MatchValue(value="passage"))]), limit=10_000, with_vectors=True)
        assert sorted(p.payload["passage"] for p in passages) == list(range(len(windows)))
        expected = emb.embed_token_ids(windows, normalize=True).numpy()
        for p in passages:
            assert_stored_dense(p.vector["dense"], expected[p.payload["passage"]], rtol=1e-5, atol=1e-6)


def test_max_tokens_truncates_with_a_warning(tmp_path, opts, capsys, tiny_folder):
    corpus = make_corpus(tmp_path / "docs", 2, words=30)
    code, report, err = run(capsys, ["sync", str(corpus), "--max-tokens", "20", *opts])
    assert code == 0, err
    assert len(report["warnings"]) == 2 and all("truncated to its first 20 tokens" in w for _, w in report["warnings"])
    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    text = (corpus / "doc000.txt").read_text()
    with open_store(path=tmp_path / "store") as store:
        point = store.retrieve("c", [sync_point_id("doc000.txt")], with_vectors=True)[0]
    assert point.payload["tokens"] == 20
    assert_stored_dense(point.vector["dense"], emb.encode_documents([text], max_length=20)[0],
                               rtol=1e-5, atol=1e-6)
    code, _, err = run(capsys, ["sync", str(corpus), "--max-tokens", "30", *opts])
    assert code == 2 and "--max-tokens" in err  # the collection keeps one truncation


# ---------------------------------------------------------------------- clear errors, right exit codes
def test_qdrant_path_naming_a_file(tmp_path, capsys, no_model):
    corpus = make_corpus(tmp_path / "docs", 1)
    not_a_folder = tmp_path / "store.txt"
    not_a_folder.write_text("keep me")
    for command in (["sync", str(corpus)], ["search", "q"]):
        code, _, err = run(capsys, command + ["--qdrant-path", str(not_a_folder)])
        assert code == 2 and "is a file, not a folder" in err and len(err.strip().splitlines()) == 1
    assert not_a_folder.read_text() == "keep me"


def test_search_with_a_mistyped_store_path_creates_nothing(tmp_path, capsys, no_model):
    typo = tmp_path / "stroe"
    code, _, err = run(capsys, ["search", "q", "--qdrant-path", str(typo), "--collection", "c"])
    assert code == 2 and "no embedded Qdrant store" in err and not typo.exists()
    typo.mkdir()  # an existing folder that holds no store is not turned into one by a read
    code, _, err = run(capsys, ["search", "q", "--qdrant-path", str(typo)])
    assert code == 2 and list(typo.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    (["--filter", "n=1.5"], "--filter 'n=1.5'"),
    (["--filter", 'x={"a": 1}'], "a value must be"),
    (["--filter", "x=[]"], "a value must be"),
    (["--filter", "=3"], "expected KEY=VALUE"),
])
def test_bad_filters_are_one_line_errors_before_the_model(tmp_path, opts, capsys, argv, message, no_model):
    code, _, err = run(capsys, ["search", "q", *argv, *opts])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_list_filter_matches_any(tmp_path, opts, capsys):
    corpus = make_corpus(tmp_path / "docs", 3)
    (corpus / "doc000.txt").write_text("short")
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    sizes = sorted(p.stat().st_size for p in corpus.iterdir())
    code, hits, err = run(capsys, ["search", "q", "--filter", f"bytes={json.dumps(sizes[:2])}", *opts])
    assert code == 0 and sorted(h["metadata"]["bytes"] for h in hits) == sizes[:2], err


@pytest.mark.parametrize("flags, message", [
    (["--passage-tokens", "-1"], "argument --passage-tokens: must be 0 or more"),
    (["--passages-above", "-1"], "argument --passages-above: must be 0 or more"),
    (["--passage-tokens", "8", "--no-passages"], "not allowed with argument --passage-tokens"),
    (["--passage-tokens", "x"], "argument --passage-tokens: expected a whole number"),
    (["--passage-overlap", "-1"], "argument --passage-overlap: must be 0 or more"),
    (["--batch-size", "0"], "argument --batch-size: must be at least 1"),
    (["--max-tokens", "0"], "argument --max-tokens: must be at least 1"),
    (["--vertical-chunk-size", "0"], "argument --vertical-chunk-size: must be at least 1"),
    (["--vertical-chunk-size", "big"], "argument --vertical-chunk-size: expected a whole number"),
    (["--max-memory", "2G"], "argument --max-memory: '2G': unknown unit 'G' (write 2GiB for powers of 1024"),
    (["--max-memory", "0"], "argument --max-memory: '0': must be at least 1 byte"),
    (["--threads", "0"], "argument --threads: must be at least 1"),
    (["--threads", "all"], "argument --threads: expected a whole number"),
])
def test_bad_flag_values_are_refused_by_the_parser(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_:
        main(["sync", str(tmp_path), *flags])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_model_free_checks_run_before_the_model_loads(tmp_path, opts, capsys, no_model):
    corpus = make_corpus(tmp_path / "docs", 2)
    store = tmp_path / "store"
    cases = [
        (["sync", str(corpus), "--collection", "a/b"], "contains '/'"),
        (["sync", str(tmp_path / "typo"), *opts], "nothing synced"),
        (["sync", str(corpus), "--passage-tokens", "8", "--passage-overlap", "8", *opts], "must be smaller"),
        (["sync", str(corpus), "--no-passages", "--passage-overlap", "2", *opts], "needs passages"),
        (["sync", str(corpus), "--passage-tokens", "0", "--passages-above", "9", *opts], "needs passages"),
        (["sync", str(corpus), "--passage-overlap", "128", *opts], "must be smaller than --passage-tokens 128"),
        (["search", "q", "--collection", "a:b", "--qdrant-path", str(store)], "contains ':'"),
    ]
    for argv, message in cases:
        code, _, err = run(capsys, argv)
        assert code == 2 and message in err, (argv, err)
    holder = open_store(path=store, kind=opts[opts.index("--store") + 1])  # another process's embedded store
    try:
        code, _, err = run(capsys, ["sync", str(corpus), *opts])
        assert code == 2 and "in use by another process" in err
    finally:
        holder.close()


def test_collection_settings_are_checked_before_the_model_loads(tmp_path, opts, capsys, monkeypatch):
    corpus = make_corpus(tmp_path / "docs", 2)
    assert run(capsys, ["sync", str(corpus), "--passage-tokens", "8", *opts])[0] == 0

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before a check that needs no model")

    monkeypatch.setattr(resources, "load_embedder", refuse)
    code, _, err = run(capsys, ["sync", str(corpus), "--passage-tokens", "16", *opts])
    assert code == 2 and "built with --passage-tokens 8, not 16" in err
    code, _, err = run(capsys, ["search", "q", "--collection", "nope", *opts[2:4]])
    assert code == 2 and "does not exist" in err


def test_special_files_links_and_loops_are_listed(tmp_path, opts, capsys):
    corpus = make_corpus(tmp_path / "docs", 1)
    outside = make_corpus(tmp_path / "outside", 1)
    os.mkfifo(corpus / "pipe.txt")
    (corpus / "linked").symlink_to(outside, target_is_directory=True)
    (corpus / "dangling.md").symlink_to(corpus / "nowhere.md")
    (corpus / "loop.txt").symlink_to(corpus / "loop.txt")
    code, report, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0 and report["added"] == 1, err
    reasons = {Path(p).name: why for p, why in report["skipped"]}
    assert set(reasons) == {"pipe.txt", "linked", "dangling.md", "loop.txt"}
    assert "FIFO" in reasons["pipe.txt"] and "not followed" in reasons["linked"]
    assert "broken symbolic link" in reasons["dangling.md"] and "loop" in reasons["loop.txt"]
    code = main(["sync", str(corpus), *opts])
    out = capsys.readouterr().out
    assert code == 0 and out.count("  skipped: ") == 4 and "pipe.txt: a FIFO (named pipe)" in out


def test_empty_and_whitespace_documents_warn_and_skip_empty_leaves_them_out(tmp_path, opts, capsys):
    corpus = make_corpus(tmp_path / "docs", 2)
    (corpus / "empty.txt").write_text("")
    (corpus / "blank.md").write_text(" \n\t \n")
    code, report, _ = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0 and report["added"] == 4
    warned = {Path(p).name: w for p, w in report["warnings"]}
    assert "empty document" in warned["empty.txt"] and "only whitespace" in warned["blank.md"]
    # --skip-empty leaves them out of a new collection; where they are stored already, their versions are kept
    code, report, _ = run(capsys, ["sync", str(corpus), "--skip-empty", *opts, "--collection", "c2"])
    assert code == 0 and report["added"] == 2 and len(report["warnings"]) == 2
    assert all("left out" in w for _, w in report["warnings"])
    assert stored_ids(tmp_path / "store", "c2") == ["doc000.txt", "doc001.txt"]
    code, report, _ = run(capsys, ["sync", str(corpus), "--skip-empty", *opts])
    assert code == 0 and report["deleted"] == 0 and len(report["warnings"]) == 2
    assert all("stored version is kept" in w for _, w in report["warnings"])
    assert len(stored_ids(tmp_path / "store")) == 4


# ---------------------------------------------------------------------- interrupts, kills, two processes
RUNNER = textwrap.dedent("""
    # The real `recemb sync` in its own process, reporting the document points it writes (and each delete) to a
    # progress file and pausing after it, so the test can interrupt or kill it at a known point.
    import sys, time
    import recemb_integrations.qdrant.plan as q_plan
    import recemb_integrations.qdrant.writer as q_writer
    from recemb_integrations.cli import main
    progress, pause, argv = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    q_plan.DELETE_BATCH = 4
    complete = q_writer.DocumentWriter._complete
    def reporting_complete(self, finished, *a, **k):  # the documents' own points, written together
        complete(self, finished, *a, **k)
        with open(progress, "a") as f:
            f.writelines("wrote " + item[0].id + "\\n" for item in finished)
        time.sleep(pause)
    q_writer.DocumentWriter._complete = reporting_complete
    class ReportingClient:
        def __init__(self, inner):
            self.inner = inner
        def __getattr__(self, name):
            return getattr(self.inner, name)
        def delete(self, *a, **k):
            result = self.inner.delete(*a, **k)
            with open(progress, "a") as f:
                f.write("deleted\\n")
            time.sleep(pause)
            return result
    import recemb_integrations.cli.resources as resources
    real_open = resources.open_qdrant
    def reporting_open(*a, **k):
        client, where = real_open(*a, **k)
        return ReportingClient(client), where
    resources.open_qdrant = reporting_open
    sys.exit(main(argv))
""")


def start_runner(tmp_path, argv, pause=0.05):
    script, progress = tmp_path / "runner.py", tmp_path / f"progress-{time.monotonic_ns()}"
    script.write_text(RUNNER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, str(script), str(progress), str(pause), *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, progress


def wait_for(proc, progress, word, count, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if progress.exists() and progress.read_text().count(word) >= count:
            return
        time.sleep(0.02)
    out, err = proc.communicate() if proc.poll() is not None else ("", "")
    raise AssertionError(f"the sync did not reach {count} x {word!r} (rc {proc.poll()}): {err[-2000:]}")


def expected_state(store: Path, corpus: Path, tiny_folder, passage_tokens: int = 8):
    """The collection holds exactly the corpus's files, each once, with its current hash and vector, and exactly
    its passages (no duplicates, no orphans)."""
    files = sorted(corpus.glob("*.txt"))
    assert stored_ids(store) == sorted(f.name for f in files)  # ids relative to the folder synced
    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    texts = [f.read_text() for f in files]
    vectors = expected_document_vectors(emb, texts, passage_tokens)
    with open_store(path=store) as s:
        for f, text, vector in zip(files, texts, vectors):
            point = s.retrieve("c", [sync_point_id(f.name)], with_vectors=True)[0]
            assert point.payload["content_hash"] == content_hash(text)
            assert_stored_dense(point.vector["dense"], vector, rtol=1e-5, atol=1e-6)
        n_passages = s.count("c") - len(files)
    expected = sum(len(range(0, max(len(ids) - 1, 1), passage_tokens)) for ids in emb.tokenize(texts))
    assert n_passages == expected


def test_ctrl_c_ends_with_exit_130_and_a_consistent_collection(tmp_path, opts, tiny_folder, capsys):
    corpus = make_corpus(tmp_path / "docs", 30)
    argv = ["sync", str(corpus), "--passage-tokens", "8", "--batch-size", "1", *opts]
    proc, progress = start_runner(tmp_path, argv)
    wait_for(proc, progress, "wrote", 5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted; the collection is consistent — run the same command again" in err
    assert "Traceback" not in err
    code, report, _ = run(capsys, argv)
    assert code == 0 and report["unchanged"] >= 5 and report["added"] + report["unchanged"] == 30
    expected_state(tmp_path / "store", corpus, tiny_folder)


def test_sigkill_mid_sync_converges_on_rerun(tmp_path, opts, tiny_folder, capsys):
    corpus = make_corpus(tmp_path / "docs", 30)
    argv = ["sync", str(corpus), "--passage-tokens", "8", "--batch-size", "1", *opts]
    proc, progress = start_runner(tmp_path, argv)
    wait_for(proc, progress, "wrote", 5)
    proc.kill()
    proc.communicate()
    code, report, _ = run(capsys, argv)
    assert code == 0 and report["added"] + report["unchanged"] == 30 and report["unchanged"] >= 4
    expected_state(tmp_path / "store", corpus, tiny_folder)


STOP_BEFORE_DOCUMENT_POINT = textwrap.dedent("""
    # The real `recemb sync`, stopped for good once the passages of the document named first are written and before
    # its own point (the one that carries its hash) is: the test kills it there.
    import sys, time
    import recemb_integrations.qdrant.writer as q_writer
    from recemb_integrations.cli import main
    progress, victim, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    complete = q_writer.DocumentWriter._complete
    def stopping_complete(self, finished, *a, **k):
        if any(item[0].id == victim for item in finished):
            with open(progress, "a") as f:
                f.write("passages written\\n")
            time.sleep(600)
        complete(self, finished, *a, **k)
    q_writer.DocumentWriter._complete = stopping_complete
    sys.exit(main(argv))
""")


def test_a_sync_killed_between_passages_and_document_point_shows_no_half_document(tmp_path, opts, capsys):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    old = "the harbour keeps its boats in winter. " * 20
    (corpus / "kept.txt").write_text(old)
    (corpus / "changed.txt").write_text(old)
    argv = ["sync", str(corpus), "--passage-tokens", "8", "--passages-above", "0", "--batch-size", "1", *opts]
    assert run(capsys, argv)[0] == 0
    script = tmp_path / "stopper.py"
    script.write_text(STOP_BEFORE_DOCUMENT_POINT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))

    def killed_sync(victim: str) -> None:
        progress = tmp_path / f"progress-{victim}"
        proc = subprocess.Popen([sys.executable, str(script), str(progress), victim, *argv], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(proc, progress, "passages written", 1)
        proc.kill()
        proc.communicate()

    def passage_search(query: str, granularity: str) -> list:
        code, hits, _ = run(capsys, ["search", query, "--granularity", granularity, "--limit", "50", "--mode",
                                     "sparse", *opts])
        assert code == 0
        return hits

    # Added: the new document's passages are in the store, its own point is not.
    (corpus / "new.txt").write_text("tides follow the moon and the sun together. " * 20)
    killed_sync("new.txt")
    with open_store(path=tmp_path / "store") as s:
        points, _ = s.scroll("c", limit=10_000, with_payload=True)
    kinds = [p.payload["kind"] for p in points if p.payload["document_id"] == "new.txt"]
    assert kinds and set(kinds) == {"passage"}
    for granularity in ("passage", "any", "document"):  # only the new document has these words
        assert passage_search("tides follow the moon", granularity) == []
    code, report, _ = run(capsys, argv)  # the rerun completes it
    assert code == 0 and report["added"] == 1
    assert passage_search("tides", "passage")[0]["document_id"] == "new.txt"
    # Updated: the old own point was retracted before the new version's passages overwrote the old ones, so no
    # search shows either version (never the old one with part of its passages gone).
    (corpus / "changed.txt").write_text("eclipses darken the harbour lights. " * 20)
    killed_sync("changed.txt")
    for granularity in ("passage", "any", "document"):
        assert passage_search("eclipses darken", granularity) == []
    code, hits, _ = run(capsys, ["search", "harbour boats winter", "--granularity", "passage", "--limit", "50",
                                 *opts])
    assert hits and "changed.txt" not in {h["document_id"] for h in hits}  # the old text's words find kept.txt
    code, report, _ = run(capsys, argv)  # the rerun completes it: a document without its own point, added again
    assert code == 0 and report["added"] == 1
    assert {h["document_id"] for h in passage_search("eclipses darken", "passage")} == {"changed.txt"}


def test_sigkill_mid_delete_converges_on_rerun(tmp_path, opts, tiny_folder, capsys):
    corpus = make_corpus(tmp_path / "docs", 20)
    argv = ["sync", str(corpus), "--passage-tokens", "8", *opts]
    assert run(capsys, argv)[0] == 0
    for f in sorted(corpus.glob("*.txt"))[4:]:
        f.unlink()
    proc, progress = start_runner(tmp_path, argv + ["--allow-mass-delete"], pause=0.5)
    wait_for(proc, progress, "deleted", 2)  # 16 stale documents, deleted 4 per request
    proc.kill()
    proc.communicate()
    remaining = len(stored_ids(tmp_path / "store"))
    assert 4 < remaining < 20  # killed halfway through the deletion
    code, report, _ = run(capsys, argv + ["--allow-mass-delete"])
    assert code == 0 and report["unchanged"] == 4 and report["deleted"] == remaining - 4
    expected_state(tmp_path / "store", corpus, tiny_folder)


def test_two_processes_on_one_store(tmp_path, opts, tiny_folder, capsys, monkeypatch):
    corpus = make_corpus(tmp_path / "docs", 12)
    argv = ["sync", str(corpus), "--passage-tokens", "8", "--batch-size", "1", *opts]
    proc, progress = start_runner(tmp_path, argv, pause=0.2)
    wait_for(proc, progress, "wrote", 1)

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the store lock was checked")

    with monkeypatch.context() as m:
        m.setattr(resources, "load_embedder", refuse)
        code, _, err = run(capsys, argv)
        assert code == 2 and "in use by another process" in err
        code, _, err = run(capsys, ["search", "q", *opts])
        assert code == 2 and "in use by another process" in err
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    expected_state(tmp_path / "store", corpus, tiny_folder)


# ---------------------------------------------------------------------- found by a careless-user pass
def test_a_folder_that_cannot_be_listed_is_not_an_empty_folder(tmp_path, opts, capsys, monkeypatch):
    corpus = make_corpus(tmp_path / "docs", 2)
    make_corpus(corpus / "sub", 2)
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    before = stored_ids(tmp_path / "store")
    real_walk = os.walk

    def walk_without_permission(top, **kwargs):  # what chmod 000 does to a non-root user
        for root, dirs, names in real_walk(top, **kwargs):
            if "sub" in dirs:
                dirs.remove("sub")
                kwargs["onerror"](PermissionError(13, "Permission denied", os.path.join(root, "sub")))
            yield root, dirs, names

    monkeypatch.setattr(sources.os, "walk", walk_without_permission)
    code, _, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 2 and "cannot list this folder: Permission denied" in err and "nothing synced" in err
    assert stored_ids(tmp_path / "store") == before
    code, report, _ = run(capsys, ["sync", str(corpus), "--keep-missing", *opts])
    assert code == 1 and report["deleted"] == 0 and stored_ids(tmp_path / "store") == before


def test_an_explicit_store_path_beats_the_server_in_the_environment(tmp_path, opts, capsys, monkeypatch):
    corpus = make_corpus(tmp_path / "docs", 1)
    monkeypatch.setenv("QDRANT_URL", "http://127.0.0.1:1")
    code, report, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0 and report["qdrant"] == str(tmp_path / "store"), err
    code, _, err = run(capsys, ["sync", str(corpus), "--qdrant-url", "http://127.0.0.1:1", *opts])
    assert code == 2 and "two different stores" in err


def test_an_unreachable_server_is_one_line(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "docs", 1)
    for argv in (["sync", str(corpus)], ["search", "q"]):
        code, _, err = run(capsys, argv + ["--qdrant-url", "http://127.0.0.1:1", "--collection", "c"])
        assert code == 2 and "error: Qdrant:" in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1


def test_nothing_readable_deletes_nothing(tmp_path, opts, capsys):
    corpus = make_corpus(tmp_path / "docs", 3)
    assert run(capsys, ["sync", str(corpus), *opts])[0] == 0
    bad = tmp_path / "elsewhere" / "latin1.md"
    bad.parent.mkdir()
    bad.write_bytes("caf\xe9".encode("latin-1"))
    code, _, err = run(capsys, ["sync", str(bad.parent), *opts])
    assert code == 2 and "none of the 1 files could be read" in err and len(stored_ids(tmp_path / "store")) == 3
    code, report, _ = run(capsys, ["sync", str(bad), *opts])  # a file named: it fails, nothing is deleted
    assert code == 1 and report["failed"][0][0] == "latin1.md" and len(stored_ids(tmp_path / "store")) == 3


def test_a_file_name_that_is_not_utf8_is_skipped_alone(tmp_path, opts, capsys):
    corpus = make_corpus(tmp_path / "docs", 2)
    (corpus / os.fsdecode(b"bad\xff.md")).write_text("a file with an undecodable name")
    code, report, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 0 and report["added"] == 2, err
    assert len(report["skipped"]) == 1 and "not valid UTF-8" in report["skipped"][0][1]
    code, _, err = run(capsys, ["sync", str(corpus / "*.md"), *opts])  # a glob whose one match is that file
    assert code == 2 and "not valid UTF-8" in err
    (corpus / "good.md").write_text("a good name")
    code, report, err = run(capsys, ["sync", str(corpus / "*.md"), "--keep-missing", *opts])
    assert code == 0 and report["added"] == 1 and len(report["skipped"]) == 1, err
    assert "not valid UTF-8" in report["skipped"][0][1]


def test_a_relative_model_path_is_recorded_so_search_finds_it_anywhere(tmp_path, tiny_folder, capsys,
                                                                       monkeypatch):
    import shutil

    corpus = make_corpus(tmp_path / "docs", 2)
    shutil.copytree(tiny_folder, tmp_path / "my-model")
    store = ["--qdrant-path", str(tmp_path / "store"), "--collection", "c"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RECEMB_MODEL", raising=False)
    assert run(capsys, ["sync", str(corpus), "--model", "my-model", *store])[0] == 0
    monkeypatch.chdir(corpus)
    code, hits, err = run(capsys, ["search", "topic", *store])
    assert code == 0 and len(hits) == 2, err
    (corpus / "doc000.txt").write_text("changed")
    code, report, err = run(capsys, ["sync", str(corpus), *store])  # no --model: the collection's own
    assert code == 0 and report["updated"] == 1, err


def test_store_cli_slips(tmp_path, opts, capsys, no_model, monkeypatch):
    corpus = make_corpus(tmp_path / "docs", 1)
    cases = [
        (["search", "  ", *opts], "the query is empty"),
        (["search", "q", "--filter", "k=", *opts], "the value is empty"),
        (["search", "q", "--filter", "n=99999999999999999999999", *opts], "64-bit integer"),
        (["sync", str(corpus), "--qdrant-path", str(corpus), "--collection", "c"], "holds other files but no Qdrant"),
        (["sync", "/", *opts], "filesystem root"),
        (["info", ""], "MODEL is empty"),
    ]
    for argv, message in cases:
        code, _, err = run(capsys, argv)
        assert code == 2 and message in err, (argv, err)
    assert sorted(p.name for p in corpus.iterdir()) == ["doc000.txt"]  # no store written into the documents


def test_device_and_stdin_slips(tiny_folder, capsys, monkeypatch):
    import io

    import torch

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"fine\ncaf\xe9\n"), errors="surrogateescape"))
    code, _, err = run(capsys, ["embed", "--model", str(tiny_folder)], json_out=False)
    assert code == 2 and "stdin line 2 is not valid UTF-8" in err
    if not torch.cuda.is_available():
        code, _, err = run(capsys, ["embed", "--model", str(tiny_folder), "--device", "cuda"], json_out=False)
        assert code == 2 and "no CUDA device" in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------- hybrid search, dense-only and rebuilds
def test_hybrid_is_the_default_and_search_shows_the_best_passage(tmp_path, opts, capsys):
    from recemb_integrations.qdrant import collection_settings

    corpus = make_corpus(tmp_path / "docs", 4, words=10)
    assert run(capsys, ["sync", str(corpus), "--passage-tokens", "8", "--store-text", *opts])[0] == 0
    with open_store(path=tmp_path / "store") as store:
        assert collection_settings(store, "c")["vectors"] == {"dense": "dense", "sparse": "bm25"}
    for mode in ("hybrid", "dense", "sparse"):
        for fusion in ("rrf", "dbsf"):
            code, hits, err = run(capsys, ["search", "topic 3", "--mode", mode, "--fusion", fusion, *opts])
            assert code == 0 and len(hits) == 4 and all(h["best_passage"] is not None for h in hits), err
    main(["search", "topic 3", "--limit", "1", *opts])
    printed = capsys.readouterr().out.splitlines()
    # the document and the line of its best passage, then its original text around that passage
    assert len(printed) == 2 and printed[0].endswith("(line 1)") and "topic" in printed[1]
    shown = printed[1].strip().strip("\u2026")
    assert any(shown in " ".join(f.read_text().split()) for f in corpus.glob("*.txt"))
    code, hits, err = run(capsys, ["search", "the of and", *opts])
    assert code == 0 and hits and "note: the query has no BM25 terms" in err


def test_dense_only_collections_and_their_flags(tmp_path, opts, capsys, monkeypatch):
    corpus = make_corpus(tmp_path / "docs", 3)
    assert run(capsys, ["sync", str(corpus), "--dense-only", *opts])[0] == 0
    (corpus / "doc000.txt").write_text("changed text " * 5)
    code, report, err = run(capsys, ["sync", str(corpus), *opts])  # adopts dense-only, as it adopts passages
    assert code == 0 and report["updated"] == 1, err
    monkeypatch.setattr(resources, "load_embedder", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded")))
    code, _, err = run(capsys, ["search", "q", "--mode", "hybrid", *opts])
    assert code == 2 and "no BM25 vectors" in err and "--rebuild" in err


def test_a_recemb_0_1_collection_is_refused_hybrid_and_rebuilt_by_the_cli(tmp_path, opts, capsys, tiny_folder,
                                                                           store_kind):
    from recemb_integrations.qdrant import collection_settings
    from recemb_integrations.qdrant.record import REBUILD_SUFFIX

    if store_kind == "edge":
        pytest.skip("recemb 0.1 collections exist only in qdrant-client stores")

    corpus = make_corpus(tmp_path / "docs", 3)
    files = sorted(corpus.iterdir())
    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    docs = [Document(str(f.resolve()), f.read_text(), {"file_name": f.name, "suffix": ".txt",
                                                         "bytes": f.stat().st_size}) for f in files]
    with closing(QdrantClient(path=str(tmp_path / "store"))) as client:  # as recemb 0.1.0 wrote it
        meta = QdrantSync(client, "c", emb).expected_metadata()
        for key in ("layout", "vectors", "sparse"):
            meta.pop(key)
        client.create_collection("c", vectors_config=qm.VectorParams(size=emb.dim, distance=qm.Distance.COSINE),
                                 metadata={"recemb": meta})
        client.upsert("c", points=[qm.PointStruct(id=sync_point_id(d.id), vector=v.tolist(), payload={
            "document_id": d.id, "kind": "document", "content_hash": content_hash(d.text), "metadata": d.metadata,
            "tokens": 0}) for d, v in zip(docs, emb.encode_documents([d.text for d in docs]))])
    code, hits, err = run(capsys, ["search", "topic 1", *opts])
    assert code == 0 and len(hits) == 3 and "note:" in err and "recemb sync --rebuild" in err
    code, _, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 2 and "--rebuild" in err and "--dense-only" in err
    code, _, err = run(capsys, ["sync", str(corpus), "--dense-only", *opts])  # its ids are absolute paths
    assert code == 2 and "absolute paths" in err and "--rebuild" in err
    code, _, err = run(capsys, ["sync", str(corpus), "--rebuild", "--keep-missing", *opts])
    assert code == 2 and "--keep-missing" in err
    code, report, err = run(capsys, ["sync", str(corpus), "--rebuild", "--passage-tokens", "8", *opts])
    assert code == 0 and report["added"] == 3 and report["deleted"] == 3, err  # the old ids go, the files stay
    assert stored_ids(tmp_path / "store") == [f.name for f in files]
    with open_store(path=tmp_path / "store") as store:
        settings = collection_settings(store, "c")
        assert settings["layout"] == 2 and settings["sparse"] and settings["passage_tokens"] == 8
        assert not store.collection_exists("c" + REBUILD_SUFFIX)
    code, hits, err = run(capsys, ["search", "topic 1", "--mode", "hybrid", *opts])
    assert code == 0 and len(hits) == 3 and "note" not in err, err


def test_a_rebuild_given_a_mistyped_empty_or_partial_source_keeps_the_collection(tmp_path, opts, capsys):
    corpus = make_corpus(tmp_path / "docs", 8)
    assert run(capsys, ["sync", str(corpus), "--dense-only", *opts])[0] == 0
    before = stored_ids(tmp_path / "store")
    slips = [[str(tmp_path / "dosc")],  # mistyped
             [""],  # an unset variable
             [str(corpus / "doc000.txt")],  # one file of eight: most of the collection would go
             [str(tmp_path / "nothing-*.txt")]]  # a glob that matches nothing
    for paths in slips:
        code, _, err = run(capsys, ["sync", *paths, "--rebuild", *opts])
        assert code == 2 and err, paths
        assert stored_ids(tmp_path / "store") == before
    with open_store(path=tmp_path / "store") as store:
        assert collection_settings(store, "c")["sparse"] is None  # still the dense-only collection it was
        assert not store.collection_exists("c.recemb-rebuild")


def test_absolute_ids_of_an_earlier_recemb_are_explained_and_rebuilt(tmp_path, opts, capsys, tiny_folder, no_model):
    corpus = make_corpus(tmp_path / "docs", 6)
    files = sorted(corpus.iterdir())
    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    with open_store(path=tmp_path / "store", kind=opts[opts.index("--store") + 1]) as store:  # as recemb 0.2 wrote it
        QdrantSync(store, "c", emb).sync([Document(str(f.resolve()), f.read_text(), earlier_file_metadata(f))
                                          for f in files])
        as_an_earlier_recemb_wrote_it(store)
    code, _, err = run(capsys, ["sync", str(corpus), *opts])
    assert code == 2 and "absolute paths" in err and "--rebuild" in err and "Nothing was written" in err
    assert stored_ids(tmp_path / "store") == sorted(str(f.resolve()) for f in files)  # (and no model was loaded)


def test_rebuild_moves_absolute_ids_to_relative_and_a_moved_folder_keeps_them(tmp_path, opts, capsys, tiny_folder):
    corpus = make_corpus(tmp_path / "docs", 6)
    files = sorted(corpus.iterdir())
    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    with open_store(path=tmp_path / "store", kind=opts[opts.index("--store") + 1]) as store:
        QdrantSync(store, "c", emb).sync([Document(str(f.resolve()), f.read_text(), earlier_file_metadata(f))
                                          for f in files])
        as_an_earlier_recemb_wrote_it(store)
    code, report, err = run(capsys, ["sync", str(corpus), "--rebuild", *opts])
    assert code == 0 and report["added"] == 6 and report["deleted"] == 6, err
    assert stored_ids(tmp_path / "store") == [f.name for f in files]
    moved = corpus.rename(tmp_path / "elsewhere")  # another checkout, or the folder moved
    code, report, err = run(capsys, ["sync", str(moved), *opts])
    # same ids, nothing embedded again: only the path each file is read from is new
    assert code == 0 and report["metadata_updated"] == 6 and report["updated"] == report["added"] == 0, err
    assert report["unchanged"] == report["deleted"] == 0
    paths = {doc_id: payload["metadata"]["path"] for doc_id, payload in stored_payloads(tmp_path / "store").items()}
    assert paths == {f.name: str(moved / f.name) for f in files}


def test_id_prefixes_keep_several_roots_in_one_collection(tmp_path, opts, capsys):
    wiki, docs = make_corpus(tmp_path / "wiki", 6), make_corpus(tmp_path / "docs", 6)
    assert run(capsys, ["sync", str(wiki), "--id-prefix", "wiki", *opts])[0] == 0
    code, report, err = run(capsys, ["sync", str(docs), "--id-prefix", "docs/", *opts])
    assert code == 0 and report["added"] == 6 and report["deleted"] == 0, err  # the other root is not "missing"
    assert stored_ids(tmp_path / "store") == sorted([f"docs/{f.name}" for f in docs.iterdir()]
                                                    + [f"wiki/{f.name}" for f in wiki.iterdir()])
    (wiki / "doc000.txt").unlink()
    code, report, _ = run(capsys, ["sync", str(wiki), "--id-prefix", "wiki", *opts])
    assert code == 0 and report["deleted"] == 1 and len(stored_ids(tmp_path / "store")) == 11
    code, _, err = run(capsys, ["sync", str(wiki), "--id-prefix", " ", *opts])
    assert code == 2 and "--id-prefix is empty" in err
    code, _, err = run(capsys, ["sync", str(wiki), "--id-prefix", "wiki", "--rebuild", *opts])
    assert code == 2 and "--id-prefix" in err and len(stored_ids(tmp_path / "store")) == 11


def test_pdf_html_and_docx_are_synced_and_a_broken_one_keeps_its_stored_version(tmp_path, opts, capsys):
    pytest.importorskip("pypdfium2")
    pytest.importorskip("docx")
    from tests.integrations.test_formats import make_docx, make_pdf

    corpus = make_corpus(tmp_path / "docs", 1)
    (corpus / "paper.pdf").write_bytes(make_pdf([["whales sing in the deep ocean"], ["page two"]]))
    (corpus / "page.html").write_text("<html><head><title>Tides</title><script>x()</script></head>"
                                      "<body><p>the moon pulls the tides</p></body></html>")
    make_docx(corpus / "report.docx")
    code, report, err = run(capsys, ["sync", str(corpus), "--store-text", *opts])
    assert code == 0 and report["added"] == 4, err
    code, hits, _ = run(capsys, ["search", "whales in the ocean", "--limit", "1", *opts])
    assert hits[0]["document_id"] == "paper.pdf" and "page two" in hits[0]["text"]
    code, hits, _ = run(capsys, ["search", "moon tides", "--limit", "1", *opts])
    assert hits[0]["document_id"] == "page.html" and "x()" not in hits[0]["text"]
    (corpus / "paper.pdf").write_bytes(b"%PDF-1.4 broken")  # a file that no longer extracts
    code, report, _ = run(capsys, ["sync", str(corpus), *opts])
    assert code == 1 and [f[0] for f in report["failed"]] == ["paper.pdf"] and report["deleted"] == 0
    assert "paper.pdf" in stored_ids(tmp_path / "store")  # its stored version is kept
