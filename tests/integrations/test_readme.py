"""The README runs as written from a clone: its set-up example (twice: the second run embeds nothing) and the
commands it prints to look into its store, and the vector-store snippets pasted as they are, each in a fresh
process in a folder of its own, with the bundled model and nothing downloaded."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("qdrant_edge")

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def python_block(first_line: str) -> str:
    """The README's ```python block whose first line starts with ``first_line``."""
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    found = [b for b in blocks if b.startswith(first_line)]
    assert len(found) == 1, f"{len(found)} README blocks start with {first_line!r}"
    return found[0]


def run_here(argv, cwd: Path, env_extra=None, timeout=600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), **(env_extra or {})}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_set_up_example_runs_twice_and_says_where_its_store_is(tmp_path):
    demo = tmp_path / "demo"
    first = run_here([sys.executable, str(ROOT / "examples" / "qdrant_sync.py")], tmp_path, {"RECEMB_DEMO_DIR":
                                                                                             str(demo)})
    assert first.returncode == 0, first.stderr[-2000:]
    assert "as the command's collection: True" in first.stdout
    again = run_here([sys.executable, str(ROOT / "examples" / "qdrant_sync.py")], tmp_path, {"RECEMB_DEMO_DIR":
                                                                                             str(demo)})
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count(" 0 added, 0 updated") == 2 and "(0 tokens embedded" in again.stdout, again.stdout
    # the commands it prints to look into its store run as printed, from where it was run
    printed = [line.strip() for line in again.stdout.splitlines() if line.strip().startswith("recemb ")]
    assert [shlex.split(c)[1] for c in printed] == ["info", "search"], again.stdout
    for command in printed:
        done = run_here([sys.executable, "-m", "recemb_integrations.cli", *shlex.split(command)[1:]], tmp_path)
        assert done.returncode == 0 and done.stdout.strip(), (command, done.stderr[-2000:])


@pytest.mark.parametrize("first_line,module,says", [
    ("# LangChain: bash scripts/install.sh langchain,qdrant", "langchain_core", "[tides.md, line"),
    ("# LlamaIndex: bash scripts/install.sh llama-index,qdrant", "llama_index.core", "passages: ["),
])
def test_a_vector_store_snippet_runs_as_pasted(first_line, module, says, tmp_path):
    pytest.importorskip(module)
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # the snippet reads the sample documents from a clone
    (tmp_path / "snippet.py").write_text(python_block(first_line), encoding="utf-8")
    done = run_here([sys.executable, "snippet.py"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tides.md" in done.stdout and says in done.stdout, done.stdout


# ---------------------------------------------------------------------- your own embedding model (issue #62)
OWN_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """A Hugging Face cache holding a tiny random sentence-transformers model under the README's model id (read
    with HF_HUB_OFFLINE=1: nothing is downloaded)."""
    pytest.importorskip("sentence_transformers")
    import shutil

    from tests.integrations.other_models import build_sentence_transformer

    root = tmp_path_factory.mktemp("hub")
    folder = build_sentence_transformer(root / "build" / "tiny", window=48)
    commit = "e" * 40
    repo = root / "cache" / ("models--" + OWN_MODEL.replace("/", "--"))
    shutil.copytree(folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return root / "cache"


def bash_block(first_line: str) -> str:
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    found = [b for b in blocks if b.startswith(first_line)]
    assert len(found) == 1, f"{len(found)} README blocks start with {first_line!r}"
    return found[0]


@pytest.mark.parametrize("first_line,module,says", [
    ("# LangChain with your model:", "langchain_huggingface", "tides.md"),
    ("# LlamaIndex with your model:", "llama_index.embeddings.huggingface", "tides.md"),
    ("# The Python API with your model:", "sentence_transformers", "passages cut by the model's own tokenizer"),
])
def test_an_own_model_snippet_runs_as_pasted(first_line, module, says, tmp_path, hub_cache):
    pytest.importorskip(module)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "snippet.py").write_text(python_block(first_line), encoding="utf-8")
    # (LlamaIndex's HuggingFaceEmbedding keeps its models in a cache of its own)
    done = run_here([sys.executable, "snippet.py"], tmp_path, {"HF_HUB_CACHE": str(hub_cache),
                                                              "LLAMA_INDEX_CACHE_DIR": str(hub_cache)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert says in done.stdout, done.stdout


def test_the_own_model_commands_run_as_pasted(tmp_path, hub_cache):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {"HF_HUB_CACHE": str(hub_cache), "RECEMB_QDRANT_PATH": str(tmp_path / "store")}
    outputs = []
    for line in bash_block("recemb sync examples/documents --model").splitlines():
        command = shlex.split(line.split("#")[0])
        assert command[0] == "recemb"
        done = run_here([sys.executable, "-m", "recemb_integrations.cli", *command[1:]], tmp_path, env)
        assert done.returncode == 0, (line, done.stderr[-3000:])
        outputs.append(done.stdout)
    assert "tides.md" in outputs[1] and "passages_cut: by tokenizer" in outputs[2], outputs
