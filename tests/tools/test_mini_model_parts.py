"""A model folder as the bounded files a lent GPU hands back, and the folder again (tools.mini_model.parts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tools.mini_model import parts

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from tests.utils import save_transformers_checkpoint, transformers_model

    folder = tmp_path_factory.mktemp("model") / "model"
    save_transformers_checkpoint(transformers_model("g1"), folder)
    (folder / "1_Normalize").mkdir()
    (folder / "1_Normalize" / "config.json").write_text("{}")
    return folder


def embed(folder: Path) -> np.ndarray:
    from recemb.core import Embedder

    return Embedder.from_pretrained(str(folder), device="cpu").encode_documents(
        ["the tide follows the moon", "owls hunt at night"])


def test_parts_keep_the_limits_and_assemble_into_the_same_model(model_dir, tmp_path):
    weights = (model_dir / parts.WEIGHTS).stat().st_size
    part_bytes = weights // 2  # small parts: several of them, the token embeddings cut in rows
    manifest = parts.write_parts(model_dir, tmp_path / "out", extra={"log": ["step 1"], "validation": [0.5]},
                                 part_bytes=part_bytes)
    out = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert parts.MANIFEST in out and parts.FILES_PART in out and 3 <= len(out) <= parts.MAX_FILES
    assert all((tmp_path / "out" / name).stat().st_size <= part_bytes for name in out if name != parts.MANIFEST)
    assert parts.check_returned(tmp_path / "out") == []
    assert manifest["log"] == ["step 1"] and manifest["validation"] == [0.5]
    assert any(p["rows"] is not None for e in manifest["tensors"].values() for p in e["pieces"])  # cut in rows
    folder = parts.assemble(tmp_path / "out", tmp_path / "assembled")
    assert (folder / "1_Normalize" / "config.json").read_text() == "{}"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == \
        sorted(p.relative_to(model_dir).as_posix() for p in model_dir.rglob("*") if p.is_file())
    np.testing.assert_array_equal(embed(folder), embed(model_dir))


def test_a_changed_or_missing_part_is_refused_and_nothing_is_written(model_dir, tmp_path):
    parts.write_parts(model_dir, tmp_path / "out")
    weights = tmp_path / "out" / "weights-00.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(parts.PartsError, match="weights-00.safetensors is not the one"):
        parts.assemble(tmp_path / "out", tmp_path / "assembled")
    assert not (tmp_path / "assembled").exists()
    weights.unlink()
    with pytest.raises(parts.PartsError, match="missing"):
        parts.assemble(tmp_path / "out", tmp_path / "assembled")
    with pytest.raises(parts.PartsError, match="no manifest.json"):
        parts.assemble(tmp_path, tmp_path / "assembled")


def test_nothing_of_a_users_is_overwritten(model_dir, tmp_path):
    """Parts are not written over parts, and a model is assembled only into a new or empty folder: a folder of the
    user's files (a mistyped --out) is refused and keeps them."""
    parts.write_parts(model_dir, tmp_path / "out")
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    with pytest.raises(parts.PartsError, match="holds parts already"):
        parts.write_parts(model_dir, tmp_path / "out")
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("my own")
    with pytest.raises(parts.PartsError, match="not an empty folder"):
        parts.assemble(tmp_path / "out", mine)
    assert [p.name for p in mine.iterdir()] == ["config.json"] and (mine / "config.json").read_text() == "my own"
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(parts.PartsError, match="not an empty folder"):
        parts.assemble(tmp_path / "out", tmp_path / "a-file")
    assert parts.assemble(tmp_path / "out", tmp_path / "empty-or-new") == tmp_path / "empty-or-new"


def test_a_model_too_large_for_the_limits_is_refused_before_any_part_is_written(model_dir, tmp_path):
    weights = (model_dir / parts.WEIGHTS).stat().st_size
    with pytest.raises(parts.PartsError, match="more than 8 files"):
        parts.write_parts(model_dir, tmp_path / "out", part_bytes=max(parts.MIN_PART_BYTES, weights // 20))
    assert not (tmp_path / "out").exists()


def test_check_returned_names_what_breaks_the_limits(tmp_path):
    for i in range(parts.MAX_FILES + 1):
        (tmp_path / f"f{i}").write_bytes(b"x")
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c" / "deep").write_bytes(b"x")
    problems = parts.check_returned(tmp_path)
    assert any("more than 8" in p for p in problems) and any("folders deep" in p for p in problems)


def test_the_command_assembles_parts(model_dir, tmp_path):
    parts.write_parts(model_dir, tmp_path / "out")
    done = subprocess.run([sys.executable, "-m", "tools.mini_model", "--assemble", str(tmp_path / "out"), "--out",
                           str(tmp_path / "model")], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "model" / parts.WEIGHTS).is_file() and "assembled" in done.stdout
    (tmp_path / "out" / "weights-00.safetensors").unlink()
    again = subprocess.run([sys.executable, "-m", "tools.mini_model", "--assemble", str(tmp_path / "out"), "--out",
                            str(tmp_path / "other")], capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 2 and "missing" in again.stderr and not (tmp_path / "other").exists()


def test_the_bundled_model_fits_what_a_lent_device_hands_back(tmp_path):
    """The bundled model (29 MB: token embeddings of 23 MB cut in rows) comes back in at most 8 files of 16 MiB and
    assembles into a folder that embeds as it does."""
    from recemb.core import DEFAULT_MODEL
    from recemb.core.loading import bundled_model_path

    bundled = bundled_model_path(DEFAULT_MODEL)
    manifest = parts.write_parts(bundled, tmp_path / "out")
    assert parts.check_returned(tmp_path / "out") == [] and len(manifest["parts"]) + 1 <= parts.MAX_FILES
    np.testing.assert_array_equal(embed(parts.assemble(tmp_path / "out", tmp_path / "model")), embed(bundled))
