"""``dtype="auto"`` (``recemb.core.autodtype``): the choice from injected probe results, the per-machine cache, and
the wiring through loading. No timing is asserted: the probe's numbers are this machine's."""

import json

import pytest
import torch

from recemb.core import Embedder
from recemb.core.autodtype import (
    CACHE_ENV,
    MIN_SPEEDUP,
    AutoChoice,
    auto_choice,
    cache_file,
    choose_dtype,
    machine_key,
    probe_projections,
    read_probe,
    shapes_key,
    write_probe,
)
from recemb.core.loading import load_encoder
from recemb.core.precision import projection_shapes

SHAPES = ((32, 148, True), (64, 32, False))  # the tiny g1 model's in_proj and out_proj


def seconds(fp32=1.0, bf16=None, int8=None):
    return {"float32": fp32, "bfloat16": bf16, "int8": int8}


# ---------------------------------------------------------------------- the choice
@pytest.mark.parametrize("probe, supports_mixed, expected", [
    (seconds(1.0, 0.3, 0.5), True, torch.bfloat16),  # bf16 clearly faster
    (seconds(1.0, 1 / (MIN_SPEEDUP - 0.01), 0.5), True, torch.float32),  # a gain below the margin is not taken
    (seconds(1.0, 1 / MIN_SPEEDUP, None), True, torch.bfloat16),  # at the margin
    (seconds(1.0, 1.8, 0.5), True, torch.float32),  # bf16 slower (AVX-512 BF16 without AMX)
    (seconds(1.0, None, 0.5), True, torch.float32),  # bf16 cannot run here
    (seconds(1.0, 0.3, 0.5), False, torch.float32),  # no mixed-precision path
    (seconds(1.0, 0.9, 0.1), True, torch.float32),  # int8 10x faster: still never chosen by "auto"
])
def test_choose_dtype(probe, supports_mixed, expected):
    assert choose_dtype(probe, supports_mixed) == expected


def test_the_choice_describes_itself(tmp_path):
    choice = AutoChoice(torch.bfloat16, seconds(0.027, 0.01, 0.0117), 1024, "2026-12-03", tmp_path / "x.json")
    assert choice.describe() == (f"bfloat16 (bf16 2.7x fp32, int8 2.3x; probed 2026-12-03, cached at "
                                 f"{tmp_path / 'x.json'})")
    assert "bf16 cannot run here" in AutoChoice(torch.float32, seconds(1.0, None, 0.5), probed="d").describe()
    busy = AutoChoice(torch.float32, seconds(1.0, 2.0, 0.5), probed="d", not_cached="the machine was busy")
    assert busy.describe().endswith("not cached: the machine was busy)")
    assert AutoChoice(torch.float32).describe() == "float32 (no mixed-precision CPU path)"
    data = choice.to_dict()
    assert data["dtype"] == "bfloat16" and data["bf16_speedup"] == pytest.approx(2.7)
    json.dumps(data)  # what recemb info --json prints


# ---------------------------------------------------------------------- the cache
def test_cache_folder_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert cache_file() == tmp_path / "mine" / "dtype_probe.json"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_file() == tmp_path / "xdg" / "recemb" / "dtype_probe.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_file() == tmp_path / "home" / ".cache" / "recemb" / "dtype_probe.json"


def test_cache_write_and_read_back(tmp_path):
    path, key, skey = tmp_path / "sub" / "probe.json", machine_key(), shapes_key(SHAPES)
    result = {"tokens": 64, "seconds": seconds(1.0, 0.5, 0.7), "probed": "2026-12-03"}
    assert read_probe(path, key, skey) is None  # nothing yet
    assert write_probe(path, key, skey, result)
    assert read_probe(path, key, skey) == result
    other = shapes_key(((8, 8, False),))
    assert write_probe(path, key, other, result)  # a second model's shapes are kept beside the first
    assert read_probe(path, key, skey) == result and read_probe(path, key, other) == result
    assert read_probe(path, {**key, "threads": key["threads"] + 1}, skey) is None  # another machine's key
    assert read_probe(path, {**key, "torch": "0.0"}, skey) is None
    assert not [p for p in path.parent.iterdir() if p.name != path.name]  # no temporary files left


@pytest.mark.parametrize("content", ["{not json", "[]", '{"version": 1, "machine": {}, "probes": []}',
                                     '{"version": 1, "probes": {"k": {"seconds": {"float32": -1}}}}', ""])
def test_a_corrupt_cache_is_ignored_and_replaced(tmp_path, content):
    path = tmp_path / "probe.json"
    path.write_text(content)
    assert read_probe(path, machine_key(), "k") is None
    calls = []
    choice = auto_choice(SHAPES, path=path, probe=lambda s: calls.append(s) or {"tokens": 64,
                                                                                "seconds": seconds(1.0, 0.2, 0.5)})
    assert calls and choice.dtype == torch.bfloat16 and choice.cache == path and not choice.from_cache
    assert read_probe(path, machine_key(), shapes_key(SHAPES))["seconds"] == seconds(1.0, 0.2, 0.5)


def test_a_cached_probe_is_used_and_a_key_mismatch_probes_again(tmp_path):
    path, skey = tmp_path / "probe.json", shapes_key(SHAPES)
    write_probe(path, machine_key(), skey, {"tokens": 64, "seconds": seconds(1.0, 0.4, 0.5), "probed": "then"})
    never = lambda s: pytest.fail("probed although the cache had it")  # noqa: E731
    choice = auto_choice(SHAPES, path=path, probe=never)
    assert choice.from_cache and choice.dtype == torch.bfloat16 and choice.probed == "then"

    moved = tmp_path / "moved.json"  # the same file written on another machine
    data = json.loads(path.read_text())
    data["machine"]["cpu"] = "some other CPU"
    moved.write_text(json.dumps(data))
    calls = []
    choice = auto_choice(SHAPES, path=moved, probe=lambda s: calls.append(s) or {"tokens": 64,
                                                                                 "seconds": seconds(1.0, 2.0, 0.5)})
    assert len(calls) == 1 and choice.dtype == torch.float32 and not choice.from_cache
    assert json.loads(moved.read_text())["machine"] == machine_key()  # rewritten for this machine


def test_an_unwritable_cache_does_not_break_loading(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    path = blocker / "probe.json"  # its parent is a file: mkdir fails
    assert not write_probe(path, machine_key(), "k", {"tokens": 1, "seconds": seconds()})
    choice = auto_choice(SHAPES, path=path, probe=lambda s: {"tokens": 64, "seconds": seconds(1.0, 0.5, 0.5)})
    assert choice.dtype == torch.bfloat16 and choice.cache is None and "could not be written" in choice.describe()


def test_a_probe_of_a_busy_machine_is_used_but_not_cached(tmp_path):
    path = tmp_path / "probe.json"
    busy = {"tokens": 64, "seconds": seconds(1.0, 0.5, 0.5), "steady": False}
    choice = auto_choice(SHAPES, path=path, probe=lambda s: busy)
    assert choice.dtype == torch.bfloat16 and choice.cache is None and not path.exists()
    assert "busy" in choice.describe()


def test_no_probe_without_a_mixed_precision_path(tmp_path):
    never = lambda s: pytest.fail("probed an architecture without a bf16 path")  # noqa: E731
    assert auto_choice(SHAPES, supports_mixed=False, path=tmp_path / "p.json", probe=never).dtype == torch.float32


# ---------------------------------------------------------------------- the probe and the wiring
def test_the_probe_times_every_mode_of_small_shapes():
    result = probe_projections(SHAPES, tokens=64)
    assert result["tokens"] == 64 and isinstance(result["steady"], bool)
    assert set(result["seconds"]) == {"float32", "bfloat16", "int8"}
    assert all(s is None or s > 0 for s in result["seconds"].values()) and result["seconds"]["float32"] > 0


def test_a_probe_under_load_is_not_steady(monkeypatch):
    """Sustained load skews the ratios without spreading the rounds: the load average marks it."""
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (4.0 * (os.cpu_count() or 1), 0.0, 0.0))
    assert probe_projections(SHAPES, tokens=64)["steady"] is False


def test_the_model_s_projection_shapes(tiny_folder):
    assert projection_shapes(load_encoder(tiny_folder, "cpu")) == SHAPES
    assert projection_shapes(load_encoder(tiny_folder, "cpu", quantize="int8")) == SHAPES


def test_loading_auto_uses_the_cached_choice(tiny_folder, tmp_path, monkeypatch):
    """The probe result in the cache decides what "auto" loads; an explicit dtype always wins."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    for bf16, expected in ((0.25, torch.bfloat16), (4.0, torch.float32)):
        folder = tmp_path / str(bf16)
        monkeypatch.setenv(CACHE_ENV, str(folder))
        write_probe(cache_file(), machine_key(), shapes_key(SHAPES),
                    {"tokens": 64, "seconds": seconds(1.0, bf16, 0.5), "probed": "2026-12-03"})
        assert Embedder.from_pretrained(tiny_folder, device="cpu", dtype="auto").dtype == expected
        assert load_encoder(tiny_folder, "cpu", dtype="float32").dtype == torch.float32
        assert load_encoder(tiny_folder, "cpu", dtype="bfloat16").dtype == torch.bfloat16
        int8 = load_encoder(tiny_folder, "cpu", dtype="auto", quantize="int8")
        assert int8.layers[0].mixer.out_proj.weight.dtype == expected  # "auto" decides what int8 leaves
