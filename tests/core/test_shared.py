"""One loaded model, many callers: each Embedder's settings stay its own, from any thread; the options are
defined once for every entry point."""

import inspect
import shutil
import threading

import pytest
import torch

from recemb.core import Embedder, clear_shared, load_pretrained, shared_embedder
from recemb.core.context_extension import ContextExtension
from recemb.core.options import CALLER_OPTIONS, ENCODE_OPTIONS, LOAD_OPTIONS, MODEL_OPTIONS, split_options
from tests.utils import SAMPLE_TEXT

TEXTS = [SAMPLE_TEXT * 2, "short", SAMPLE_TEXT[:90], ""]


@pytest.fixture()
def calibrated_folder(tiny_folder, tmp_path):
    """The tiny model with both context-extension methods calibrated (by hand), active from 20 tokens."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_folder, folder)
    torch.manual_seed(1)
    ContextExtension(delta_scale=[0.6, 1.7], global_heads=[[True, False, True, True], [False, True, True, False]],
                     thresholds={32: (torch.rand(2, 4) * 0.3).tolist(), 256: (torch.rand(2, 4) * 0.6).tolist()},
                     train_length=16, min_length=20).save(folder)
    yield folder
    clear_shared()


SETTINGS = {
    "a": dict(chunk_size=3, context_extension="off", vertical_chunk_size=5),
    "b": dict(chunk_size=16, context_extension="both", vertical_chunk_size=16),
}


def test_two_embedders_on_one_model_keep_their_settings_across_threads(calibrated_folder):
    shared = {k: shared_embedder(calibrated_folder, device="cpu", backend="torch", **v) for k, v in SETTINGS.items()}
    assert shared["a"].model is shared["b"].model
    assert (shared["a"].chunk_size, shared["a"].context_extension) == (3, "off")
    assert (shared["b"].chunk_size, shared["b"].context_extension) == (16, "both")
    # Each one's reference: its settings on a model of its own.
    alone = {k: Embedder.from_pretrained(calibrated_folder, device="cpu", backend="torch", **v).encode(TEXTS)
             for k, v in SETTINGS.items()}
    assert not (alone["a"] == alone["b"]).all()  # the settings do matter for these texts

    rounds = 4
    barrier = threading.Barrier(2)
    results: dict[str, list] = {"a": [], "b": []}
    errors: list[BaseException] = []

    def work(key: str) -> None:
        try:
            for _ in range(rounds):
                barrier.wait(timeout=60)  # both threads inside encode at once, round after round
                results[key].append(shared[key].encode(TEXTS))
        except BaseException as e:  # reported by the main thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(k,)) for k in SETTINGS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    for key in SETTINGS:
        assert len(results[key]) == rounds
        for got in results[key]:
            assert (got == alone[key]).all(), key  # bit for bit its own single-model result


def test_setting_one_embedder_leaves_the_other_alone(calibrated_folder):
    a = shared_embedder(calibrated_folder, device="cpu", backend="torch")
    b = shared_embedder(calibrated_folder, device="cpu", backend="torch")
    before = b.encode(TEXTS)
    a.set_context_extension("off")
    a.chunk_size = 5
    assert (a.context_extension, b.context_extension) == ("off", "both")
    assert (b.encode(TEXTS) == before).all()
    assert not (a.encode(TEXTS) == before).all()


def test_shared_loads_once_and_checks_its_options(calibrated_folder, tiny_folder):
    first = shared_embedder(calibrated_folder, device="cpu", max_length=8)
    second = shared_embedder(calibrated_folder, device="cpu", dtype="float32", context_extension="longmamba")
    assert first.model is second.model and first.tokenizer is second.tokenizer
    assert (first.max_length, second.max_length) == (8, None)
    assert shared_embedder(calibrated_folder, device="cpu", dtype="bfloat16").model is not first.model
    with pytest.raises(ValueError, match="unknown model options: \\['chunksize'\\]"):
        shared_embedder(calibrated_folder, device="cpu", chunksize=3)
    with pytest.raises(ValueError, match="MambaExtend is not calibrated"):
        shared_embedder(tiny_folder, device="cpu", context_extension="mambaextend")


def parameters(fn) -> set[str]:
    return set(inspect.signature(fn).parameters) - {"self", "cls"}


def test_the_option_lists_match_the_signatures():
    assert parameters(Embedder.from_pretrained) == {"name_or_path", *MODEL_OPTIONS}
    assert parameters(load_pretrained) == {"name_or_path", *LOAD_OPTIONS}
    assert parameters(Embedder.__init__) == {"model", "tokenizer", "name", *CALLER_OPTIONS}
    assert set(ENCODE_OPTIONS) <= parameters(Embedder.encode)
    assert set(LOAD_OPTIONS).isdisjoint(CALLER_OPTIONS)
    load, caller = split_options({"device": "cpu", "chunk_size": 3, "context_extension": "off"})
    assert load == {"device": "cpu"} and caller == {"chunk_size": 3, "context_extension": "off"}
