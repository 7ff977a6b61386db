import functools
import tempfile
from pathlib import Path

import pytest


@functools.lru_cache(maxsize=None)
def tiny_model_dir() -> str:
    """A tiny model folder for tests that need a path outside fixtures (LangChain's standard-suite properties)."""
    from tests.utils import save_transformers_checkpoint, transformers_model

    folder = Path(tempfile.mkdtemp(prefix="recemb-tiny-")) / "model"
    save_transformers_checkpoint(transformers_model("g1"), folder)
    return str(folder)


@pytest.fixture(params=["edge", "local"])
def store_kind(request):
    if request.param == "edge":
        pytest.importorskip("qdrant_edge")
    return request.param


@pytest.fixture
def opts(tiny_folder, tmp_path, store_kind):
    """Every CLI case runs on both embedded stores."""
    return ["--model", str(tiny_folder), "--qdrant-path", str(tmp_path / "store"), "--collection", "c",
            "--store", store_kind]


@pytest.fixture
def no_model(monkeypatch):
    """Fails the test if the model is loaded: the check under test must come first."""
    pytest.importorskip("qdrant_client")
    from recemb_integrations.cli import resources

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before a check that needs no model")

    monkeypatch.setattr(resources, "load_embedder", refuse)
