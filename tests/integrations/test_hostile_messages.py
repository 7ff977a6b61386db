"""The hostile pass of issue #44, items 4, 6 and 8: what the command and the API say when they are misused, each
through the real `recemb` command (both embedded stores where a store is involved) or the public Python API.

4. every command's --help and usage errors print at any terminal width;
6. an argument that names an existing path is that path, even with glob characters in its name;
8. the messages that misled: an int8 --dtype, a --max-memory below one chunk, truncated weights, --threads above
   the cores, id prefixes spelt several ways, bytes given for text, the long-document example without its book, a
   closed output pipe, a deleted file's hit.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import torch

pytest.importorskip("qdrant_client")

from recemb.core import CheckpointError, DamagedCheckpointError, Embedder  # noqa: E402
from recemb.core import loading as loading_module  # noqa: E402
from recemb.core.threads import THREADS_ENV, ThreadsCappedWarning, thread_policy  # noqa: E402
from recemb_integrations.cli import main  # noqa: E402
from recemb_integrations.cli.parser import build_parser  # noqa: E402
from recemb_integrations.qdrant import Document, QdrantSync  # noqa: E402
from recemb_integrations.qdrant.points import scope_root  # noqa: E402
from recemb_integrations.sources import clean_id_prefix, folder_sources  # noqa: E402
from recemb_integrations.stores import open_store  # noqa: E402
from tests.integrations.cli_cases import assert_store_is, one_line_error, run, texts_under, write  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]




def in_collection(opts: list[str], name: str) -> list[str]:
    """``opts`` with another collection."""
    i = opts.index("--collection")
    return [*opts[:i + 1], name, *opts[i + 2:]]


def model_args(opts: list[str]) -> list[str]:
    """The --model flag and value of ``opts`` (for `recemb embed`, which has no store options)."""
    i = opts.index("--model")
    return opts[i:i + 2]


# ---------------------------------------------------------------------- 4. help and usage errors
def _subparsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser: a command added later is covered without a change here."""
    actions = build_parser()._actions
    return next(a for a in actions if isinstance(a, argparse._SubParsersAction)).choices


def _parse_exit(parse, argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    return exited.value.code


@pytest.mark.parametrize("columns", ["80", "40"])
@pytest.mark.parametrize("command", list(_subparsers()))
def test_every_command_prints_its_help_and_its_usage_errors(command, columns, monkeypatch, capsys):
    """search --help used to fail in argparse's usage formatter (an exclusive group of hidden options), and so did
    every usage error of search."""
    monkeypatch.setenv("COLUMNS", columns)
    assert _parse_exit(main, [command, "--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"usage: recemb {command}") and not err
    # through the command (argparse reports an unknown flag in the top parser's words where no argument is missing)
    assert _parse_exit(main, [command, "--no-such-flag"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("usage: recemb") and "Traceback" not in err and not out, err
    assert "unrecognized arguments: --no-such-flag" in err or "the following arguments are required" in err, err
    # and in the command's own words, through its own usage line
    assert _parse_exit(_subparsers()[command].parse_args, ["--no-such-flag"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: recemb {command}") and f"recemb {command}: error: " in err, err


@pytest.mark.parametrize("columns", ["80", "40"])
@pytest.mark.parametrize("argv, says", [
    (["search", "a query", "--limit", "0"], "argument --limit: must be at least 1, got 0"),
    (["search", "a query", "--mode", "foo"], "argument --mode: invalid choice: 'foo'"),
    (["search"], "the following arguments are required: query"),
], ids=["limit-0", "mode-foo", "no-query"])
def test_search_usage_errors_say_what_is_wrong(argv, says, columns, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", columns)
    assert _parse_exit(main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: recemb search") and "Traceback" not in err
    assert says in " ".join(err.split()), err


# ---------------------------------------------------------------------- 6. names with glob characters
def test_a_file_name_with_glob_characters_is_that_file(tmp_path, opts, capsys):
    store = tmp_path / "store"
    br = tmp_path / "br"
    write(br / "a[1].md", "the file whose name has brackets")
    write(br / "a1.md", "the file the brackets would match as a pattern")
    code, report, err = run(capsys, ["sync", str(br / "a[1].md"), *opts])
    assert code == 0 and report["added"] == 1 and not report["failed"], err
    assert_store_is(store, {"a[1].md": "the file whose name has brackets"})
    # where no such path exists, the argument is still a pattern
    code, report, err = run(capsys, ["sync", str(br / "a?.md"), *in_collection(opts, "g")])
    assert code == 0 and report["added"] == 1, err
    assert_store_is(store, {"a1.md": "the file the brackets would match as a pattern"}, collection="g")


def test_a_folder_name_with_glob_characters_is_that_folder(tmp_path, opts, capsys):
    store = tmp_path / "store"
    proj = tmp_path / "proj[v2]"
    write(proj / "intro.md", "the second version of the project")
    write(proj / "notes" / "plan.txt", "a plan for the third version")
    write(proj / "notes" / "done.md", "what the first version did")
    write(tmp_path / "projv" / "other.md", "what the brackets would match as a pattern")
    code, report, err = run(capsys, ["sync", str(proj), *opts])
    assert code == 0 and report["added"] == 3 and not report["failed"], err
    assert_store_is(store, texts_under(proj))
    (proj / "intro.md").unlink()
    write(proj / "new.md", "a new page")  # a folder sync deletes what is gone: the folder is still that folder
    code, report, err = run(capsys, ["sync", str(proj), *opts])
    assert code == 0 and report["added"] == 1 and report["deleted"] == 1, err
    assert_store_is(store, texts_under(proj))


def test_folder_sources_takes_an_existing_path_before_a_pattern(tmp_path):
    write(tmp_path / "x[ab].md", "literal")
    write(tmp_path / "xa.md", "matched")
    assert folder_sources(str(tmp_path / "x[ab].md")).ids == ("x[ab].md",)
    assert folder_sources(str(tmp_path / "x[ac].md")).ids == ("xa.md",)


# ---------------------------------------------------------------------- 8. --dtype int8
@pytest.mark.parametrize("command", ["sync", "search", "embed"])
def test_an_int8_dtype_names_quantize_before_the_model_loads(command, tmp_path, opts, no_model, capsys):
    write(tmp_path / "docs" / "a.md", "a document")
    argv = {"sync": ["sync", str(tmp_path / "docs"), *opts], "search": ["search", "a query", *opts],
            "embed": ["embed", str(tmp_path / "docs" / "a.md"), *model_args(opts)]}[command]
    assert main([*argv, "--dtype", "int8"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith(f"recemb {command}: error: --dtype int8 is not a dtype for the weights")
    assert "expected float32, bfloat16, float16 or auto" in line and "--quantize int8" in line
    assert "state_dict" not in line
    assert not (tmp_path / "store").exists()  # refused before the store was opened, too


def test_an_int8_dtype_in_the_api_names_quantize_before_anything_is_read(tiny_folder, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model folder was resolved before the dtype was checked")

    monkeypatch.setattr(loading_module, "resolve_model_path", refuse)
    for dtype in ("int8", torch.int8):
        with pytest.raises(ValueError, match=r"not a floating-point dtype.*float32, bfloat16, float16 or auto.*"
                                             r"quantize='int8'"):
            Embedder.from_pretrained(tiny_folder, device="cpu", dtype=dtype)
    with pytest.raises(ValueError, match="unknown dtype 'float7': expected float32"):
        Embedder.from_pretrained(tiny_folder, device="cpu", dtype="float7")


# ---------------------------------------------------------------------- 8. --max-memory below one chunk
def _smallest_budget(line: str) -> str:
    found = re.search(r"give --max-memory (\S+) or more", line)
    assert found, line
    return found.group(1)


def test_a_budget_below_one_chunk_names_the_budget_in_search(tmp_path, opts, capsys):
    """A search loads the collection's model: the budget error used to end in "pass --model"."""
    write(tmp_path / "docs" / "a.md", "tides follow the moon")
    assert run(capsys, ["sync", str(tmp_path / "docs"), *opts])[0] == 0
    search = ["search", "the moon", *[o for o in opts if o not in model_args(opts)]]
    assert main([*search, "--max-memory", "1B"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith("recemb search: error: --max-memory 1 B is below the smallest budget this model runs "
                           "in: one chunk of 64 tokens needs "), line
    assert "--model" not in line
    code, hits, err = run(capsys, [*search, "--max-memory", _smallest_budget(line)])
    assert code == 0 and [h["document_id"] for h in hits] == ["a.md"], err


def test_a_budget_below_one_chunk_names_the_budget_in_embed(tmp_path, tiny_folder, capsys):
    doc = write(tmp_path / "a.md", "tides follow the moon")
    assert main(["embed", str(doc), "--model", str(tiny_folder), "--max-memory", "1B"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith("recemb embed: error: --max-memory 1 B is below the smallest budget"), line
    least = _smallest_budget(line)
    assert main(["embed", str(doc), "--model", str(tiny_folder), "--max-memory", least]) == 0
    assert capsys.readouterr().out.count('"vector"') == 1
    # with a fixed V, the flag that picks V from the budget is named too
    assert main(["embed", str(doc), "--model", str(tiny_folder), "--max-memory", "1B",
                 "--vertical-chunk-size", "128"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "one chunk of 128 tokens (--vertical-chunk-size 128)" in line and "--vertical-chunk-size auto" in line


# ---------------------------------------------------------------------- 8. truncated weights
def _cut_copy(tiny_folder: Path, tmp_path: Path, name: str = "model.safetensors") -> Path:
    folder = Path(shutil.copytree(tiny_folder, tmp_path / "cut-model"))
    if name != "model.safetensors":  # the same weights as a torch file
        from safetensors.torch import load_file

        torch.save(load_file(folder / "model.safetensors"), folder / name)
        (folder / "model.safetensors").unlink()
    weights = folder / name
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    return weights


def test_truncated_weights_are_one_line_from_the_command(tiny_folder, tmp_path, capsys):
    weights = _cut_copy(tiny_folder, tmp_path)
    doc = write(tmp_path / "a.md", "a document")
    assert main(["embed", str(doc), "--model", str(weights.parent)]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith(f"recemb embed: error: {weights}: the weight file is truncated or damaged"), line
    assert "download or export the model again" in line and "SafetensorError" not in line
    size = weights.stat().st_size
    assert f"it has {size:,} of the {2 * size:,} bytes its header describes" in line


@pytest.mark.parametrize("name", ["model.safetensors", "pytorch_model.bin"])
def test_truncated_weights_are_a_damaged_checkpoint_error_in_the_api(name, tiny_folder, tmp_path):
    weights = _cut_copy(tiny_folder, tmp_path, name)
    with pytest.raises(DamagedCheckpointError, match=re.escape(f"{weights}: the weight file is truncated or "
                                                               "damaged")) as raised:
        Embedder.from_pretrained(weights.parent, device="cpu")
    assert isinstance(raised.value, CheckpointError)
    with open(weights, "r+b") as f:
        f.truncate(0)
    with pytest.raises(DamagedCheckpointError, match=r"\(it is empty\); download or export the model again"):
        Embedder.from_pretrained(weights.parent, device="cpu")


# ---------------------------------------------------------------------- 8. --threads above the cores
@pytest.fixture
def two_cores(monkeypatch):
    """This process may use 2 cores (as the policy read them), and every torch.set_num_threads is recorded (from
    one thread, so that a call's count is always set)."""
    for name in (THREADS_ENV, "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(thread_policy(), "_cores", 2)
    counts: list[int] = []
    set_threads = torch.set_num_threads
    before = torch.get_num_threads()
    set_threads(1)

    def spy(n: int) -> None:
        counts.append(n)
        set_threads(n)

    monkeypatch.setattr(torch, "set_num_threads", spy)
    yield counts
    set_threads(before)


def test_threads_above_the_cores_are_capped_with_a_warning_in_the_command(two_cores, tiny_folder, tmp_path, capsys):
    doc = write(tmp_path / "a.md", "a long enough document about tides and the moon " * 40)
    assert main(["embed", str(doc), "--model", str(tiny_folder), "--device", "cpu", "--threads", "999"]) == 0
    out, err = capsys.readouterr()
    assert out.count('"vector"') == 1
    assert "recemb embed: warning: --threads 999 is more than the 2 cores this process may use; using 2 threads" \
        in err, err
    assert 2 in two_cores and max(two_cores) == 2, two_cores


def test_threads_above_the_cores_are_capped_with_a_warning_in_the_api(two_cores, tiny_folder, monkeypatch):
    with pytest.warns(ThreadsCappedWarning, match=r"threads=999 is more than the 2 cores this process may use.*"
                                                  r"using 2 threads"):
        emb = Embedder.from_pretrained(tiny_folder, device="cpu", threads=999)
    assert emb.threads == 2
    emb.encode(["a long enough document about tides and the moon " * 40])
    assert 2 in two_cores and max(two_cores) == 2, two_cores
    two_cores.clear()
    monkeypatch.setenv(THREADS_ENV, "64")
    auto = Embedder.from_pretrained(tiny_folder, device="cpu")
    with pytest.warns(ThreadsCappedWarning, match=f"{THREADS_ENV}=64 is more than the 2 cores"):
        auto.encode(["a long enough document about tides and the moon " * 40])
    assert 2 in two_cores and max(two_cores) == 2, two_cores


# ---------------------------------------------------------------------- 8. id prefixes spelt several ways
NFD, NFC = unicodedata.normalize("NFD", "café"), unicodedata.normalize("NFC", "café")


@pytest.mark.parametrize("first, again, root", [("./notes", "notes/", "notes"), ("team//notes", "team/notes",
                                                                                  "team/notes"),
                                                (NFD, NFC, NFC)], ids=["dot", "double-slash", "nfd-nfc"])
def test_spellings_of_one_id_prefix_are_one_root(first, again, root, tmp_path, opts, capsys):
    store = tmp_path / "store"
    m = tmp_path / "m"
    write(m / "a.md", "a note about tides")
    write(m / "b.md", "a note about the moon")
    write(m / "c.md", "a note about the sea")
    code, report, err = run(capsys, ["sync", str(m), "--id-prefix", first, *opts])
    assert code == 0 and report["added"] == 3, err
    expected = texts_under(m, prefix=root + "/")
    assert_store_is(store, expected)
    (m / "c.md").unlink()  # the other spelling manages the same root: it deletes what is gone, nothing else
    code, report, err = run(capsys, ["sync", str(m), "--id-prefix", again, *opts])
    assert code == 0 and (report["added"], report["unchanged"], report["deleted"]) == (0, 2, 1), err
    del expected[root + "/c.md"]
    assert_store_is(store, expected)


@pytest.mark.parametrize("prefix", ["..", "../notes", "notes/../other"])
def test_an_id_prefix_with_dot_dot_is_refused_by_name(prefix, tmp_path, opts, no_model, capsys):
    write(tmp_path / "m" / "a.md", "a note")
    assert main(["sync", str(tmp_path / "m"), "--id-prefix", prefix, *opts]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line == f"recemb sync: error: --id-prefix {prefix!r} has a '..' segment; give a plain name such as " \
                   "'wiki' or 'team/wiki'; nothing was done"
    assert not (tmp_path / "store").exists()


def test_scope_spellings_are_one_root_in_the_api(tiny_embedder, tmp_path, store_kind):
    docs = [Document("wiki/a", "alpha"), Document("wiki/b", "beta"), Document("wiki/c", "gamma")]
    with open_store(path=tmp_path / "s", kind=store_kind) as store:
        sync = QdrantSync(store, "c", tiny_embedder)
        first = sync.sync(docs, scope="./wiki")
        assert first.added == 3 and not first.failed, first.failed
        again = sync.sync(docs[:2], scope=" wiki// ")
        assert (again.added, again.unchanged, again.deleted, again.failed) == (0, 2, 1, [])
        accented = [Document(f"{NFC}/a", "delta")]
        assert sync.sync(accented, scope=NFD + "/").added == 1
        assert sync.sync(accented, scope=NFC).unchanged == 1


@pytest.mark.parametrize("spelling", ["wiki", "wiki/", " /wiki/ ", "./wiki", "wiki/.", "a//b", "./a/./b//",
                                      NFD, f"x/{NFD}/", "..", "a/../b", "./", " "])
def test_the_command_and_the_api_clean_a_prefix_alike(spelling):
    try:
        cleaned = clean_id_prefix(spelling) + "/"
    except ValueError:
        with pytest.raises(ValueError):
            scope_root(spelling)
        return
    assert scope_root(spelling) == cleaned and scope_root(cleaned) == cleaned
    assert unicodedata.is_normalized("NFC", cleaned) and "//" not in cleaned and not cleaned.startswith("./")


def test_file_names_spelt_decomposed_get_composed_ids(tmp_path, opts, capsys):
    """A checkout whose filesystem decomposes names (macOS's HFS+) keeps the ids of one that does not."""
    store = tmp_path / "store"
    folder = tmp_path / "notes"
    decomposed = write(folder / f"{NFD}.md", "a note about coffee")
    found = folder_sources(folder)
    assert found.ids == (f"{NFC}.md",) and found.files == (decomposed,)
    code, report, err = run(capsys, ["sync", str(folder), *opts])
    assert code == 0 and report["added"] == 1, err
    assert_store_is(store, {f"{NFC}.md": "a note about coffee"})


# ---------------------------------------------------------------------- 8. bytes given for text
BYTES = b"caf\xc3\xa9 notes"


def test_bytes_are_refused_with_the_way_to_a_str(tiny_embedder):
    emb = tiny_embedder
    for call, where in [(lambda: emb.encode(BYTES), "texts"), (lambda: emb.encode([BYTES]), r"texts\[0\]"),
                        (lambda: emb.encode(["ok", bytearray(BYTES)]), r"texts\[1\]"),
                        (lambda: emb.encode_documents(BYTES), "texts"),
                        (lambda: emb.encode_queries(BYTES), "texts"),
                        (lambda: emb.encode_queries([BYTES]), r"texts\[0\]"),
                        (lambda: emb.tokenize([BYTES]), r"texts\[0\]"),
                        (lambda: emb.encode_stream(BYTES), "text")]:
        with pytest.raises(TypeError, match=rf"^{where} (must be a str or a sequence of str, got bytes|is "
                                            rf"(bytes|bytearray), expected str); decode it first, e\.g\. "
                                            rf"{where}\.decode\('utf-8'\)$"):
            call()
    with pytest.raises(TypeError, match=r"bytes\(texts\)\.decode\('utf-8'\)"):
        emb.encode(memoryview(BYTES))


def _langchain_calls(folder):
    from recemb_integrations.langchain import RecembEmbeddings

    emb = RecembEmbeddings(model_name=str(folder), model_kwargs={"device": "cpu"})
    return emb, (lambda: emb.embed_documents(BYTES), lambda: emb.embed_documents([BYTES]),
                 lambda: emb.embed_query(BYTES))


def _llama_index_calls(folder):
    from recemb_integrations.llama_index import RecembEmbedding

    emb = RecembEmbedding(model_name=str(folder), model_kwargs={"device": "cpu"})
    return emb, (lambda: emb.get_text_embedding(BYTES), lambda: emb.get_text_embedding_batch([BYTES]),
                 lambda: emb.get_query_embedding(BYTES))


@pytest.mark.parametrize("framework,calls", [("langchain_core", _langchain_calls),
                                             ("llama_index.core", _llama_index_calls)],
                         ids=["langchain", "llama-index"])
def test_the_framework_adapters_refuse_bytes_with_the_way_to_a_str(tiny_folder, framework, calls):
    pytest.importorskip(framework)
    emb, refused = calls(tiny_folder)
    for call in refused:
        with pytest.raises(TypeError, match=r"(str, got bytes|bytes, expected str); decode it first, e\.g\. "
                                            r"\S+\.decode\('utf-8'\)$"):
            call()
    if framework == "langchain_core":
        with pytest.raises(TypeError, match=r"texts must be a list of str, got str \(one text: pass \[text\]\)"):
            emb.embed_documents("one text")  # not embedded character by character


def test_the_sentence_transformers_module_refuses_bytes_with_the_way_to_a_str(tiny_embedder):
    pytest.importorskip("sentence_transformers")
    from recemb_integrations.sentence_transformers import RecembModule

    with pytest.raises(TypeError, match=r"inputs\[0\] is bytes, expected str; decode it first"):
        RecembModule(tiny_embedder).preprocess([BYTES])
    with pytest.raises(TypeError, match=r"inputs must be a list of str, got bytes; decode it first"):
        RecembModule(tiny_embedder).preprocess(BYTES)


# ---------------------------------------------------------------------- 8. the long-document example
@pytest.fixture
def long_document_example():
    spec = importlib.util.spec_from_file_location("encode_long_document",
                                                  ROOT / "examples" / "encode_long_document.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines its functions; runs nothing
    return module


def test_the_long_document_example_says_what_it_embedded(long_document_example, tiny_folder, tmp_path,
                                                         monkeypatch, capsys):
    example = long_document_example
    monkeypatch.setattr(example, "SYNTHETIC", "Call me Ishmael. " * 200)  # short, for the tiny model's sake
    missing = tmp_path / "moby_dick.txt"
    example.main([str(missing), "--model", str(tiny_folder)])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"no book found at {missing}; embedding a synthetic text instead (one sentence "
                            f"repeated): {len('Call me Ishmael. ' * 200):,} characters, "), first
    assert "moby_dick.txt:" not in first
    book = write(tmp_path / "book.txt", "It was a dark and stormy night. " * 50)
    example.main([str(book), "--model", str(tiny_folder)])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"book.txt: {len(book.read_text()):,} characters, "), first
    assert example.read_book(missing)[0] == example.SYNTHETIC


# ---------------------------------------------------------------------- 8. a closed output pipe
def _into_closed_pipe(argv: list[str], stdin: bytes = b"") -> tuple[int, str]:
    """Run `recemb ARGV` with its stdout a pipe whose reader has already gone: (exit code, stderr)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "recemb_integrations.cli", *argv], stdout=write_end,
                              stderr=subprocess.PIPE, input=stdin, timeout=600, cwd=ROOT)
    finally:
        os.close(write_end)
    return done.returncode, done.stderr.decode("utf-8", "replace")


def _quiet(code: int, err: str) -> None:
    assert code in (0, 141), (code, err)
    assert not [line for line in err.splitlines() if line.strip()], err


def test_search_into_a_closed_pipe_ends_quietly(tmp_path, opts, capsys):
    write(tmp_path / "docs" / "a.md", "tides follow the moon")
    write(tmp_path / "docs" / "b.md", "bread rises overnight")
    assert run(capsys, ["sync", str(tmp_path / "docs"), *opts])[0] == 0
    _quiet(*_into_closed_pipe(["search", "the moon", "--json", *opts]))
    _quiet(*_into_closed_pipe(["search", "the moon", *opts]))


def test_embed_into_a_closed_pipe_ends_quietly(tiny_folder, tmp_path):
    lines = "".join(f"line number {i} about tides\n" for i in range(400)).encode()
    _quiet(*_into_closed_pipe(["embed", "--model", str(tiny_folder), "--device", "cpu"], stdin=lines))
    doc = write(tmp_path / "a.md", "a document")
    _quiet(*_into_closed_pipe(["embed", str(doc), "--model", str(tiny_folder), "--device", "cpu"]))


def test_embed_piped_into_head_ends_quietly(tiny_folder, tmp_path):
    lines = write(tmp_path / "lines.txt", "".join(f"line number {i} about tides\n" for i in range(400)))
    pipeline = (f"{sys.executable} -m recemb_integrations.cli embed --model {tiny_folder} --device cpu < {lines} "
                "2> err.txt | head -c 1 > /dev/null; echo ${PIPESTATUS[0]} > code.txt")
    subprocess.run(["bash", "-c", pipeline], cwd=tmp_path, timeout=600, check=True)
    _quiet(int((tmp_path / "code.txt").read_text()), (tmp_path / "err.txt").read_text())


# ---------------------------------------------------------------------- 8. a deleted file's hit
def test_a_hit_whose_file_was_deleted_or_changed_says_which(tmp_path, opts, capsys):
    docs = tmp_path / "docs"
    gone = write(docs / "gone.md", "lighthouses guide ships along the rocky coast")
    changed = write(docs / "changed.md", "sourdough bread rises slowly overnight")
    write(docs / "kept.md", "tides follow the moon and the sun")
    code, report, err = run(capsys, ["sync", str(docs), *opts])  # the texts are not stored
    assert code == 0 and report["added"] == 3, err
    gone.unlink()
    changed.write_text("sourdough bread, now with rye", encoding="utf-8")
    code, hits, err = run(capsys, ["search", "lighthouses sourdough tides", "--limit", "3", *opts])
    assert code == 0, err
    notes = {h["document_id"]: h.get("note") for h in hits}
    assert set(notes) == {"gone.md", "changed.md", "kept.md"}
    assert notes["gone.md"] == ("the text is not stored in the collection (sync with --store-text to keep it) and "
                                f"its file was deleted since the sync (nothing is at {gone}); a sync of its folder "
                                "removes it from the collection")
    assert notes["changed.md"] == ("the text is not stored in the collection (sync with --store-text to keep it) "
                                   "and its file has changed since the sync; a sync re-embeds it")
    assert notes["kept.md"] is None and "tides follow the moon" in next(h["excerpt"] for h in hits
                                                                        if h["document_id"] == "kept.md")
    assert main(["search", "lighthouses", "--limit", "1", *opts]) == 0  # the human-readable form says it too
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("gone.md") and "its file was deleted since the sync" in out, out
