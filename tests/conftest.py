import os
import time

import pytest
import torch

# The Triton interpreter must be chosen before triton is first imported; it only matters for backend="triton".
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub
torch.set_num_threads(min(2, torch.get_num_threads()))


PROGRESS_TIMES = len(" 9:59:59 ~9:59:59 left")  # the widest times a line of dots makes room for


def clock(seconds: float) -> str:
    minutes, s = divmod(int(seconds), 60)
    h, m = divmod(minutes, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """Where pytest prints a percentage at the end of each line of dots (-q, the README's test command, or the
    default), the time since the tests began and a rough estimate of what is left follow it: `[ 40%] 4:12 ~6:18
    left`. Uses two private parts of pytest's terminal reporter; where they are not there, its output is as it was.
    `-o console_output_style=classic` turns both off."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = getattr(reporter, "_get_progress_information_message", None)
    if (message is None or not isinstance(getattr(reporter, "_screen_width", None), int)
            or getattr(reporter, "_show_progress_info", None) != "progress" or session.config.get_verbosity() > 0):
        return
    start = time.monotonic()
    reporter._screen_width -= PROGRESS_TIMES  # each line of dots ends earlier, so the times fit in the width

    def with_times() -> str:
        done, total, elapsed = reporter.reported_progress, session.testscollected, time.monotonic() - start
        left = f" ~{clock(elapsed * (total - done) / done)} left" if 0 < done < total else ""
        return f"{message()} {clock(elapsed)}{left}"

    reporter._get_progress_information_message = with_times


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
