import os

import pytest
import torch

# The Triton interpreter must be chosen before triton is first imported; it only matters for backend="triton".
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub
torch.set_num_threads(min(2, torch.get_num_threads()))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session", autouse=True)
def probe_cache_dir(tmp_path_factory):
    """dtype="auto" caches its probe (``recemb.core.autodtype``): in this run's temporary folder, never in the
    user's cache (subprocesses inherit it)."""
    folder = tmp_path_factory.mktemp("recemb-cache")
    os.environ["RECEMB_CACHE_DIR"] = str(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    """A transformers-format tiny model folder with a tokenizer (config g1)."""
    from tests.utils import save_transformers_checkpoint, transformers_model

    return save_transformers_checkpoint(transformers_model("g1"), tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny_embedder(tiny_folder):
    from recemb.core import Embedder

    return Embedder.from_pretrained(tiny_folder, device="cpu", backend="torch")
