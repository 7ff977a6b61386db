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
        ("qdrant.sync", ["qdrant_client", "qdrant_client.models"], "qdrant"),  # the package itself loads lazily
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
    assert f'pip install "recemb[{extra}]"' in out


def test_llama_index_needs_bm25_packages_only_for_bm25():
    out = run("import sys; sys.modules['mmh3'] = None\n"
              "from recemb_integrations.llama_index import RecEmbEmbedding, bm25_sparse_fns\n"
              "try:\n bm25_sparse_fns()\nexcept ImportError as e: print(e)")
    assert 'pip install "recemb[sparse]"' in out


# The main job's rooms that decide without a model (docs/architecture.md): importing one, or the package, or the
# folder sources, loads neither torch and the model's code nor qdrant-client, at run time (not only in the source).
MODEL_FREE_ROOMS = ["recemb_integrations.qdrant", "recemb_integrations.qdrant.record",
                    "recemb_integrations.qdrant.plan", "recemb_integrations.qdrant.points",
                    "recemb_integrations.qdrant.documents", "recemb_integrations.qdrant.writes",
                    "recemb_integrations.qdrant.errors", "recemb_integrations.qdrant.lengths",
                    "recemb_integrations.qdrant.collection", "recemb_integrations.qdrant.calls",
                    "recemb_integrations.qdrant.rebuild", "recemb_integrations.sources"]
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
