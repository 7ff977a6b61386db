"""The ``recemb`` command line."""

import json
import subprocess
import sys

import pytest

from recemb_integrations.cli import main


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
