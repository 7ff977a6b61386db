"""The ``recemb`` command line."""

import json
import subprocess
import sys

import pytest

from recemb_integrations.cli import main
from tests.utils import FLOAT16_ROUNDOFF


def test_export_command(tiny_folder, tmp_path, capsys):
    pytest.importorskip("sentence_transformers")
    assert main(["export", str(tiny_folder), str(tmp_path / "out"), "--max-seq-length", "128"]) == 0
    assert "wrote a sentence-transformers model" in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "recemb_config.json").read_text())["max_seq_length"] == 128


def test_export_of_missing_folder_is_a_clear_error(tmp_path, capsys):
    assert main(["export", str(tmp_path / "nothing-here"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "recemb export: error:" in err and "no model folder" in err
    assert not (tmp_path / "out").exists()


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "recemb_integrations.cli", "export", "--help"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "sentence-transformers folder" in out.stdout


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("# A\nstate space models keep a fixed-size state")
    (folder / "sub" / "b.txt").write_text("vertical chunking carries the state")
    (folder / "empty.txt").write_text("")
    (folder / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (folder / "ignored.bin").write_bytes(b"\x00\x01")
    return folder


def run_json(capsys, argv):
    code = main(argv + ["--json"])
    out = capsys.readouterr()
    return code, json.loads(out.out.strip().splitlines()[-1]) if out.out.strip() else None, out.err


def test_sync_search_embed_info(tiny_folder, corpus, tmp_path, capsys):
    pytest.importorskip("qdrant_client")
    common = ["--model", str(tiny_folder), "--qdrant-path", str(tmp_path / "store"), "--collection", "c"]
    code, report, _ = run_json(capsys, ["sync", str(corpus), *common])
    assert code == 1  # partial: the latin-1 file failed, the rest synced
    assert report["added"] == 3 and len(report["failed"]) == 1
    assert "latin1.txt" in report["failed"][0][0] and "not valid UTF-8" in report["failed"][0][1]

    (corpus / "latin1.txt").write_text("café crème")  # fixed
    (corpus / "sub" / "b.txt").unlink()
    code, report, _ = run_json(capsys, ["sync", str(corpus), *common])
    assert code == 0 and (report["added"], report["unchanged"], report["deleted"]) == (1, 2, 1)

    code, hits, _ = run_json(capsys, ["search", "fixed-size state", "--limit", "2", *common])
    # ids are paths relative to the folder given: the same wherever the folder lies
    assert code == 0 and len(hits) == 2 and all(not h["document_id"].startswith("/") for h in hits)
    code, hits, _ = run_json(capsys, ["search", "x", "--limit", "10", *common])
    assert sorted(h["document_id"] for h in hits) == ["a.md", "empty.txt", "latin1.txt"]
    code, hits, _ = run_json(capsys, ["search", "x", "--filter", "suffix=.md", *common])
    assert [h["metadata"]["file_name"] for h in hits] == ["a.md"]

    code, info, _ = run_json(capsys, ["info", str(tiny_folder)])
    assert code == 0 and info["dim"] == 32 and info["format"] == "transformers"


def test_info_shows_what_dtype_auto_measured_and_chose(tiny_folder, tmp_path, monkeypatch, capsys):
    """The probe is injected through its cache (``recemb.core.autodtype``): no timing is asserted."""
    from recemb.core.autodtype import CACHE_ENV, cache_file, machine_key, shapes_key, write_probe

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    seconds = {"float32": 0.027, "bfloat16": 0.01, "int8": 0.0117}
    write_probe(cache_file(), machine_key(), shapes_key(((32, 148, True), (64, 32, False))),
                {"tokens": 1024, "seconds": seconds, "probed": "2026-12-03"})
    assert main(["info", str(tiny_folder)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "dtype auto" in x)
    assert line.split(": ", 1)[1] == (f"bfloat16 (bf16 2.7x fp32, int8 2.3x; probed 2026-12-03, cached at "
                                      f"{cache_file()})")
    code, info, _ = run_json(capsys, ["info", str(tiny_folder)])
    assert info["dtype_auto"]["dtype"] == "bfloat16" and info["dtype_auto"]["seconds"] == seconds


def test_embed_from_stdin(tiny_folder, monkeypatch, capsys):
    import io

    from recemb.core import Embedder

    monkeypatch.setattr(sys, "stdin", io.StringIO("first line\nsecond line\n"))
    assert main(["embed", "--query", "--model", str(tiny_folder)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = Embedder.from_pretrained(tiny_folder, device="cpu").encode_queries(["first line", "second line"])
    assert [r["id"] for r in rows] == ["0", "1"]
    assert max(abs(a - b) for r, e in zip(rows, expected) for a, b in zip(r["vector"], e)) < 1e-5


def test_locked_store_and_missing_model_are_clear(tiny_folder, corpus, tmp_path, capsys):
    pytest.importorskip("qdrant_client")
    from qdrant_client import QdrantClient

    holder = QdrantClient(path=str(tmp_path / "store"))
    try:
        code = main(["sync", str(corpus), "--model", str(tiny_folder), "--qdrant-path", str(tmp_path / "store")])
        err = capsys.readouterr().err
        assert code == 2 and "in use by another process" in err and "--qdrant-url" in err
    finally:
        holder.close()
    code = main(["sync", str(corpus), "--model", str(tmp_path / "no-such-model"), "--qdrant-path",
                 str(tmp_path / "store")])
    assert code == 2 and "no-such-model" in capsys.readouterr().err
    code = main(["sync", str(tmp_path / "typo"), "--model", str(tiny_folder), "--qdrant-path", str(tmp_path / "s")])
    assert code == 2 and "nothing synced" in capsys.readouterr().err


def test_search_of_missing_collection(tiny_folder, tmp_path, capsys):
    pytest.importorskip("qdrant_client")
    from qdrant_client import QdrantClient

    QdrantClient(path=str(tmp_path / "s")).close()  # a store without that collection
    code = main(["search", "q", "--model", str(tiny_folder), "--qdrant-path", str(tmp_path / "s"), "--collection", "x"])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_calibrate_writes_artifacts_that_load_and_switch(tiny_folder, tmp_path, capsys):
    from recemb.core import Embedder

    book = tmp_path / "book.txt"
    book.write_text(" ".join(f"word{i % 97} and the sea, chapter {i}." for i in range(400)))
    out = tmp_path / "calibrated"
    code, data, err = run_json(capsys, ["calibrate", str(tiny_folder), str(book), "--train-length", "32",
                                        "--windows", "4", "--documents", "2", "--iterations", "2",
                                        "--out", str(out)])
    assert code == 0, err
    assert data["mode"] == "both" and len(data["delta_scale"]) == 2 and 64 in data["target_lengths"]
    assert (out / "context_extension.json").is_file() and not (tiny_folder / "context_extension.json").exists()
    assert Embedder.from_pretrained(out, device="cpu").context_extension == "both"
    text = [book.read_text()[:3000]]
    on = Embedder.from_pretrained(out, device="cpu").encode_documents(text)
    off = Embedder.from_pretrained(out, device="cpu", context_extension="off").encode_documents(text)
    plain = Embedder.from_pretrained(tiny_folder, device="cpu").encode_documents(text)
    assert abs(off - plain).max() == 0 and abs(on - plain).max() > 1e-4
    code, info, _ = run_json(capsys, ["embed", str(book), "--model", str(out), "--context-extension", "off"])
    assert code == 0
    code = main(["calibrate", str(tiny_folder), str(tmp_path / "missing.txt"), "--train-length", "32"])
    assert code == 2 and "missing.txt" in capsys.readouterr().err


def test_train_command_trains_and_reports(tiny_folder, tmp_path, capsys):
    pytest.importorskip("peft")
    rows = [{"anchor": f"topic {w}", "positive": f"a note on {w}"} for w in ("sea", "bread", "chess", "snow")] * 2
    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "trained"
    code, report, err = run_json(capsys, ["train", str(tiny_folder), str(data), "--out", str(out), "--max-steps",
                                          "3", "--batch-size", "4", "--warmup-steps", "1", "--instruction", ""])
    assert code == 0, err
    assert report["steps"] == 3 and report["rows"] == 8 and report["lora"] is False
    assert json.loads((out / "training.json").read_text())["config"]["batch_size"] == 4
    data.write_text('{"anchor": "only an anchor"}\n')
    assert main(["train", str(tiny_folder), str(data), "--out", str(tmp_path / "x")]) == 2
    assert "pairs.jsonl:1: 'positive'" in capsys.readouterr().err


def test_migrate_copies_a_collection_to_another_store_and_it_searches_the_same(tiny_folder, corpus, tmp_path,
                                                                               capsys):
    pytest.importorskip("qdrant_edge")
    source = ["--qdrant-path", str(tmp_path / "local"), "--collection", "c"]
    common = ["--model", str(tiny_folder)]
    code, _, _ = run_json(capsys, ["sync", str(corpus), "--store", "local", "--passage-tokens", "8", *source,
                                   *common])
    assert code == 1  # the latin-1 file
    before = run_json(capsys, ["search", "fixed-size state", *source, *common])[1]
    for argv, message in [(["--to", str(tmp_path / "x")], "not a URL"),
                          (["--to", "http://localhost:1", "--to-path", str(tmp_path / "x")], "give the target"),
                          ([], "give the target"), (["--to-path", " "], "is empty")]:
        code, _, err = run_json(capsys, ["migrate", *source, *argv])
        assert code == 2 and message in err, (argv, err)
    code, report, err = run_json(capsys, ["migrate", *source, "--to-path", str(tmp_path / "edge")])
    assert code == 0 and report["to_kind"] == "edge" and report["points"] == report["copied"] > 3, err
    # the new collection is compact: its dense vectors are kept as float16, every one rounded (and verified so); a
    # search rounds the query too, so a cosine moves by up to twice fp16's unit roundoff
    assert report["source_digest"] != report["target_digest"] and report["rounded"] == report["points"]
    target = ["--qdrant-path", str(tmp_path / "edge"), "--collection", "c"]
    after = run_json(capsys, ["search", "fixed-size state", *target, *common])[1]
    assert [h["document_id"] for h in after] == [h["document_id"] for h in before]
    assert [h["score"] for h in after] == pytest.approx([h["score"] for h in before], rel=1e-5,
                                                        abs=2 * FLOAT16_ROUNDOFF)
    code, report, err = run_json(capsys, ["sync", str(corpus), *target, *common])  # syncs on, nothing re-embedded
    assert code == 1 and report["embedded_tokens"] == 0 and report["unchanged"] == 3, err
    code, _, err = run_json(capsys, ["migrate", *source, "--to-path", str(tmp_path / "edge")])
    assert code == 2 and "exists" in err  # a complete collection is never overwritten


def test_export_never_writes_over_a_folder_that_holds_no_model(tiny_folder, tmp_path, capsys):
    """An export writes README.md and config.json: a project folder given by mistake is refused, untouched."""
    pytest.importorskip("sentence_transformers")
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("my own readme")
    assert main(["export", str(tiny_folder), str(project)]) == 2
    assert "non-empty folder that holds no model" in capsys.readouterr().err
    assert sorted(p.name for p in project.iterdir()) == ["README.md"]
    assert (project / "README.md").read_text() == "my own readme"
    assert main(["export", str(tiny_folder), str(tmp_path / "new")]) == 0  # a new folder
    capsys.readouterr()
    (tmp_path / "file").write_text("x")
    assert main(["export", str(tiny_folder), str(tmp_path / "file")]) == 2
    assert "is a file" in capsys.readouterr().err and (tmp_path / "file").read_text() == "x"
    # A previous export (a model folder) is replaced.
    first = tmp_path / "out"
    assert main(["export", str(tiny_folder), str(first)]) == 0
    assert main(["export", str(tiny_folder), str(first), "--max-seq-length", "64"]) == 0
    assert json.loads((first / "recemb_config.json").read_text())["max_seq_length"] == 64


def test_export_to_an_empty_name_is_refused(tiny_folder, tmp_path, monkeypatch, capsys):
    pytest.importorskip("sentence_transformers")
    from recemb_integrations.sentence_transformers import export_sentence_transformers

    monkeypatch.chdir(tmp_path)  # an empty name would be this folder
    with pytest.raises(ValueError, match="destination folder is empty"):
        export_sentence_transformers(tiny_folder, "")
    assert main(["export", str(tiny_folder), " "]) == 2
    capsys.readouterr()
    assert list(tmp_path.iterdir()) == []


def test_calibrate_and_train_refuse_a_folder_of_someone_elses_files(tiny_folder, tmp_path, capsys):
    """--out of calibrate (a calibrated copy) and train: never merged into a non-model folder, never empty."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "config.json.bak").write_text("mine")
    book = tmp_path / "book.txt"
    book.write_text("a long text " * 50)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"anchor": "a", "positive": "b"}) + "\n")
    for argv in (["calibrate", str(tiny_folder), str(book), "--train-length", "8", "--out", str(project)],
                 ["train", str(tiny_folder), str(pairs), "--out", str(project)]):
        assert main(argv) == 2
        assert "non-empty folder that holds no model" in capsys.readouterr().err
        assert sorted(p.name for p in project.iterdir()) == ["config.json.bak"]
    before = sorted(p.name for p in tiny_folder.iterdir())
    for argv in (["calibrate", str(tiny_folder), str(book), "--train-length", "8", "--out", ""],
                 ["train", str(tiny_folder), str(pairs), "--out", " "]):
        assert main(argv) == 2  # an empty --out must not mean "into the model folder" or "here"
        assert "--out is empty" in capsys.readouterr().err
    assert sorted(p.name for p in tiny_folder.iterdir()) == before


@pytest.mark.parametrize("flags, options", [(["--dtype", "bfloat16"], {"dtype": "bfloat16"}),
                                            (["--quantize", "int8"], {"quantize": "int8"})])
def test_embed_in_low_precision(tiny_folder, monkeypatch, capsys, flags, options):
    import io

    from recemb.core import Embedder

    monkeypatch.setattr(sys, "stdin", io.StringIO("first line\nsecond line\n"))
    assert main(["embed", "--model", str(tiny_folder), *flags]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = Embedder.from_pretrained(tiny_folder, device="cpu", **options).encode_documents(
        ["first line", "second line"])
    assert max(abs(a - b) for r, e in zip(rows, expected) for a, b in zip(r["vector"], e)) < 1e-5


def test_an_unknown_dtype_is_a_clear_error(tiny_folder, monkeypatch, capsys):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("x\n"))
    assert main(["embed", "--model", str(tiny_folder), "--dtype", "float7"]) == 2
    assert "unknown dtype 'float7'" in capsys.readouterr().err
