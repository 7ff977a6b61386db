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
        ("qdrant", ["qdrant_client", "qdrant_client.models"], "qdrant"),
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
