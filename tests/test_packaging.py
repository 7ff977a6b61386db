"""What a built wheel carries, and that it works installed on its own: the wheel is built from a copy of the clone's
files (as `bash scripts/install.sh --wheel` builds it), compared with the files git holds, installed into a fresh
virtual environment and made to embed a sentence outside the repository, offline. About 20 s on 2 cores (the wheel
build and two model loads), so it runs with the rest of the suite."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("recemb", "recemb_integrations")
TEXT = "Recurrent state space models embed a whole book in constant memory."


def git_files(*args: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", *args], cwd=ROOT, check=True, capture_output=True).stdout
    return sorted(name for name in out.decode().split("\0") if name)


@pytest.fixture(scope="module")
def clone_files() -> list[str]:
    """The clone's files as a fresh clone plus the work in progress has them: tracked and new, none git ignores."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the wheel is checked against the files git holds")
    return [name for name in git_files("--cached", "--others", "--exclude-standard") if (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def wheel(clone_files, tmp_path_factory) -> Path:
    """recemb's wheel, built from a copy of the clone (an in-tree build would also ship what an earlier build left
    in build/lib)."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    for name in clone_files:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(work / "dist"), str(src)], check=True, capture_output=True)
    (built,) = (work / "dist").glob("recemb-*.whl")
    return built


def test_the_wheel_carries_the_bundled_model_the_stopword_lists_and_every_module(wheel, clone_files):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    files = sorted(n for n in names if ".dist-info/" not in n)
    model = git_files("recemb/models")
    assert "recemb/models/recemb-mamba2-mini/model.safetensors" in model  # the weights are a git file, not LFS
    assert [n for n in files if n.startswith("recemb/models/")] == model  # nested folders (1_Normalize/) included
    stopwords = git_files("recemb_integrations/stopwords")
    assert "recemb_integrations/stopwords/english.txt" in stopwords
    assert [n for n in files if n.startswith("recemb_integrations/stopwords/")] == stopwords
    # nothing else is data, and nothing is missing or left over: each module of the clone, no other
    modules = [n for n in clone_files if n.split("/")[0] in PACKAGES and n.endswith(".py")]
    assert files == sorted(modules + model + stopwords)
    assert {line for line in metadata.splitlines() if line.startswith("Requires-Dist: torch")} == \
        {"Requires-Dist: torch>=2.1"}  # users keep their own torch
    assert "recemb = recemb_integrations.cli:main" in entry_points


def test_the_installed_wheel_embeds_offline_as_the_clone_does(wheel, tmp_path):
    """Installed with --no-deps into a fresh venv that sees this environment's torch and other dependencies (and
    its editable recemb, which must not be the one imported), the bundled model loads by name and embeds."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    # pip comes from the system site-packages and installs into the venv (sys.prefix); --force-reinstall because
    # the editable recemb of the same version counts as installed there
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                   check=True, capture_output=True)
    assert (venv / "bin" / "recemb").is_file()  # the console script
    script = textwrap.dedent("""
        import json, sys
        import numpy as np
        import recemb, recemb_integrations.sparse as sparse
        from recemb.core import Embedder

        vector = Embedder.from_pretrained("recemb-mamba2-mini", device="cpu").encode(sys.argv[1])
        print(json.dumps({"recemb": recemb.__file__, "stopwords": str(sparse.stopwords_path("english")),
                          "english": len(sparse.load_stopwords("english")), "dtype": str(vector.dtype),
                          "vector": np.asarray(vector, dtype=np.float64).tolist()}))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    run = subprocess.run([str(python), "-c", script, TEXT], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    site = str(venv.resolve())
    assert Path(got["recemb"]).resolve().is_relative_to(site), got["recemb"]  # the wheel, not the clone
    assert Path(got["stopwords"]).resolve().is_relative_to(site), got["stopwords"]

    from recemb.core import Embedder
    from recemb_integrations.sparse import load_stopwords

    clone = Embedder.from_pretrained("recemb-mamba2-mini", device="cpu")
    assert Path(sys.modules["recemb"].__file__).resolve().is_relative_to(ROOT)  # the repo's own install
    expected = clone.encode(TEXT)
    vector = np.asarray(got["vector"])
    assert got["english"] == len(load_stopwords("english")) > 100
    assert got["dtype"] == "float32"
    assert vector.shape == (clone.dim,) == (384,)
    assert abs(np.linalg.norm(vector) - 1.0) < 1e-5
    np.testing.assert_allclose(vector, expected.astype(np.float64), rtol=0, atol=1e-6)
