"""Importing recemb_integrations imports no framework; a missing framework names the extra to install."""

import subprocess
import sys

import pytest

import recemb_integrations


def run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout


def test_package_imports_no_framework():
    out = run("import sys, recemb_integrations, recemb.core, recemb.kernels\n"
              "print(sorted(m for m in ('langchain_core', 'llama_index', 'qdrant_client', 'sentence_transformers',"
              " 'triton', 'fastembed', 'mmh3', 'py_rust_stemmers', 'ray') if m in sys.modules))")
    assert out.strip() == "[]"
    assert recemb_integrations.__all__ == []


@pytest.mark.parametrize(
    "module,blocked,extra",
    [
        ("langchain", ["langchain_core", "langchain_core.embeddings"], "langchain"),
        ("llama_index", ["llama_index", "llama_index.core", "llama_index.core.base.embeddings.base"], "llama-index"),
        ("langchain_sparse", ["langchain_qdrant"], "langchain-qdrant"),
        ("sparse", ["mmh3"], "sparse"),
        ("sparse", ["py_rust_stemmers"], "sparse"),
        ("ray", ["ray"], "ray"),
        ("ray", ["ray.data"], "ray"),
    ],
)
def test_missing_framework_names_the_extra(module, blocked, extra):
    block = "".join(f"sys.modules[{name!r}] = None; " for name in blocked)
    out = run(f"import sys; {block}\ntry:\n import recemb_integrations.{module}\nexcept ImportError as e: print(e)")
    assert f"bash scripts/install.sh {extra}" in out and f'pip install -e ".[{extra}]"' in out


def test_a_server_store_without_qdrant_client_names_the_extra():
    out = run("import sys; sys.modules['qdrant_client'] = None\n"
              "from recemb_integrations.stores import open_store\n"
              "try:\n open_store(url='http://127.0.0.1:9')\nexcept ImportError as e: print(e)")
    assert "bash scripts/install.sh qdrant" in out


def test_the_embedded_main_job_never_imports_qdrant_client(tmp_path):
    """A sync, a search (every mode and granularity, a dict filter), a deletion and a re-sync on Qdrant Edge: none
    of them loads qdrant-client (about 125 MiB of a process and a second of start-up, docs/benchmarks.md)."""
    pytest.importorskip("qdrant_edge")
    from tests.integrations.conftest import tiny_model_dir

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"d{i}.txt").write_text(f"document {i} about topic {i % 2} " * 150)
    common = ["--model", tiny_model_dir(), "--qdrant-path", str(tmp_path / "store"), "--collection", "c",
              "--store", "edge"]
    sync = ["sync", str(docs), *common, "--passage-tokens", "64"]
    searches = [["search", "topic 1", *common, "--mode", mode, "--granularity", granularity, "--filter", "k=v"]
                for mode in ("hybrid", "dense", "sparse") for granularity in ("document", "passage", "any")]
    code = f"""
import os, sys
from recemb_integrations.cli import main
assert main({sync!r}) == 0
for argv in {searches!r}:
    assert main(argv) == 0, argv
assert main(["search", "topic 1", *{common!r}]) == 0
os.remove({str(docs / "d2.txt")!r})
assert main({sync!r}) == 0
assert main(["info", "--collection", "c", *{common[2:]!r}]) == 0
print(sorted(m for m in ("qdrant_client", "pydantic") if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_llama_index_needs_bm25_packages_only_for_bm25():
    out = run("import sys; sys.modules['mmh3'] = None\n"
              "from recemb_integrations.llama_index import RecembEmbedding, bm25_sparse_fns\n"
              "try:\n bm25_sparse_fns()\nexcept ImportError as e: print(e)")
    assert "bash scripts/install.sh sparse" in out


# The main job's rooms that decide without a model (docs/architecture.md): importing one, or the package, or the
# folder sources, loads neither torch and the model's code nor qdrant-client, at run time (not only in the source).
MODEL_FREE_ROOMS = ["recemb_integrations.qdrant", "recemb_integrations.qdrant.record",
                    "recemb_integrations.qdrant.plan", "recemb_integrations.qdrant.points",
                    "recemb_integrations.qdrant.documents", "recemb_integrations.qdrant.writes",
                    "recemb_integrations.qdrant.errors", "recemb_integrations.qdrant.lengths",
                    "recemb_integrations.qdrant.collection", "recemb_integrations.qdrant.calls",
                    "recemb_integrations.qdrant.rebuild", "recemb_integrations.qdrant.vectors",
                    "recemb_integrations.qdrant.cutting", "recemb_integrations.qdrant.external",
                    "recemb_integrations.sources"]
HEAVY = ("torch", "recemb.core.embedder", "recemb.core.streaming", "recemb.kernels", "qdrant_client", "transformers")


@pytest.mark.parametrize("module", MODEL_FREE_ROOMS)
def test_model_free_rooms_load_no_model_and_no_qdrant_client(module):
    out = run(f"import sys, time\nstart = time.perf_counter()\nimport {module}\n"
              f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), time.perf_counter() - start)")
    loaded, seconds = out.rsplit(" ", 1)
    assert loaded == "[]", f"{module} loaded {loaded}"
    assert float(seconds) < 1.0  # a fraction of the model's or qdrant-client's import time


def test_the_package_loads_what_is_asked_for_when_it_is_asked_for():
    out = run("import sys\nimport recemb_integrations.qdrant as q\nq.SyncSettings\nprint('torch' in sys.modules)\n"
              "q.QdrantSync\nprint('recemb.core.streaming' in sys.modules)")
    assert out.split() == ["False", "True"]


def test_one_capitalisation_with_the_old_names_kept():
    """Public classes are spelt ``Recemb...``; the ``RecEmb...`` names of 0.x are the same objects, out of
    ``__all__``."""
    out = run("import recemb_integrations.langchain as lc, recemb_integrations.llama_index as li, "
              "recemb_integrations.langchain_sparse as ls\n"
              "pairs = [(lc, 'RecEmbEmbeddings', 'RecembEmbeddings'), (li, 'RecEmbEmbedding', 'RecembEmbedding'),"
              " (ls, 'RecEmbBm25SparseEmbeddings', 'RecembBm25SparseEmbeddings')]\n"
              "print(all(getattr(m, old) is getattr(m, new) and old not in m.__all__ and new in m.__all__"
              " for m, old, new in pairs))\n"
              "print(sorted(n for m in (lc, li, ls) for n in m.__all__ if n.startswith('RecEmb')))")
    assert out.split() == ["True", "[]"]


# What a store over another library's model, or the main job's writing rooms, import: never torch (5-8 s).
TORCH_FREE = ["recemb_integrations.langchain", "recemb_integrations.langchain_store",
              "recemb_integrations.llama_index", "recemb_integrations.llama_index_store",
              "recemb_integrations.framework_collection", "recemb_integrations.qdrant.writer",
              "recemb_integrations.qdrant.sync", "recemb_integrations.stores", "recemb.core", "recemb.core.options",
              "recemb.core.texts"]


@pytest.mark.parametrize("module", TORCH_FREE)
def test_importing_a_store_or_a_room_loads_no_torch(module):
    out = run(f"import sys\nimport {module}\nprint('torch' in sys.modules)")
    assert out.strip() == "False", f"{module} loaded torch"


def test_torch_loads_when_a_recemb_model_is_asked_for():
    out = run("import sys\nfrom recemb_integrations.langchain import RecembVectorStore, RecembEmbeddings\n"
              "print('torch' in sys.modules)\nfrom recemb.core import Embedder\nprint('torch' in sys.modules)")
    assert out.split() == ["False", "True"]
