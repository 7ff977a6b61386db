"""MambaExtend Δ scaling and LongMamba filtering: exact semantics, identity when off, V/backend independence,
artifacts that round-trip, and calibration that does what it says."""

import numpy as np
import pytest
import torch

from recemb.core import Embedder
from recemb.core.architectures.mamba2.calibration import (
    _window_statistics,
    calibrate_longmamba,
    calibrate_mambaextend,
    record_delta,
)
from recemb.core.context_extension import (
    ARTIFACT_FILE,
    MODES,
    ContextExtension,
    DeltaControl,
    apply_delta_control,
    resolve_mode,
)
from recemb.core.encoder import ChunkRun
from recemb.core.loading import load_encoder
from recemb.core.vertical import encode_vertical, pool_last_token
from recemb.kernels import ssd_chunk_scan
from tests.utils import assert_close

H = 4  # heads of the tiny "g1" config
LAYERS = 2


def skip_loop(x, dt, A, B, C, D, skip):
    """Independent reference: the recurrence where head hd ignores token t when skip[t, hd] (b = 1, g = 1), fp64."""
    l, h, p = x.shape[1:]
    state = torch.zeros(h, p, B.shape[-1], dtype=torch.float64)
    ys = []
    for t in range(l):
        y_t = torch.empty(h, p, dtype=torch.float64)
        for hd in range(h):
            if not skip[t, hd]:
                decay = torch.exp(dt[0, t, hd] * A[hd])
                state[hd] = decay * state[hd] + dt[0, t, hd] * x[0, t, hd][:, None] * B[0, t, 0][None, :]
            y_t[hd] = state[hd] @ C[0, t, 0] + D[hd] * x[0, t, hd]
        ys.append(y_t)
    return torch.stack(ys)[None], state[None]


def test_zero_delta_removes_the_token_from_that_heads_recurrence_only():
    torch.manual_seed(0)
    l, h, p, n = 37, 3, 4, 5
    x = torch.randn(1, l, h, p, dtype=torch.float64)
    dt = torch.rand(1, l, h, dtype=torch.float64) * 0.5 + 0.05
    A = -torch.rand(h, dtype=torch.float64) - 0.5
    B, C = torch.randn(1, l, 1, n, dtype=torch.float64), torch.randn(1, l, 1, n, dtype=torch.float64)
    D = torch.randn(h, dtype=torch.float64)
    skip = torch.rand(l, h) < 0.3
    skip[:, 0] = False  # a head that keeps everything
    dt_zeroed = dt.masked_fill(skip[None], 0.0)
    for q in (8, 64):
        y, final = ssd_chunk_scan(x, dt_zeroed, A, B, C, q, D=D, backend="torch")
        y_ref, final_ref = skip_loop(x, dt, A, B, C, D, skip)
        assert_close(f"outputs q={q}", y_ref, y, 1e-10)
        assert_close(f"final state q={q}", final_ref, final, 1e-10)
    # Skipping no token is the plain scan.
    y_plain, _ = ssd_chunk_scan(x, dt, A, B, C, 8, D=D, backend="torch")
    assert_close("no skip", skip_loop(x, dt, A, B, C, D, torch.zeros(l, h, dtype=torch.bool))[0], y_plain, 1e-10)


def test_delta_control_scales_then_filters_global_heads_strictly():
    dt = torch.tensor([[[0.2, 0.2, 0.005], [0.5, 0.1, 0.3]]])  # (b=1, l=2, h=3)
    thr = torch.tensor([[0.3, 0.3, 0.3]])  # compared with the *scaled* Δ
    out = apply_delta_control(dt, DeltaControl(scale=1.5, threshold=thr,
                                               global_heads=torch.tensor([True, False, True])))
    # scaled: [[0.3, 0.3, 0.0075], [0.75, 0.15, 0.45]]; head 0 drops 0.3 (<= is dropped), head 1 is local.
    expected = torch.tensor([[[0.0, 0.3, 0.0], [0.75, 0.15, 0.45]]])
    assert torch.allclose(out, expected)
    floored = apply_delta_control(dt, DeltaControl(scale=0.0))
    assert torch.allclose(floored, dt * 0.01)  # MambaExtend's floor


@pytest.fixture()
def model(tiny_folder):
    encoder = load_encoder(tiny_folder, device="cpu", dtype=torch.float32)
    encoder.folder = tiny_folder  # for tests that need its tokenizer
    return encoder


def model_folder(encoder):
    return encoder.folder


def extension(scale=True, filter=True, train_length=8, global_heads=None):
    torch.manual_seed(1)
    return ContextExtension(
        delta_scale=[0.7, 1.6] if scale else None,
        global_heads=global_heads or [[True, False, True, True], [False, True, True, False]] if filter else None,
        thresholds={16: (torch.rand(LAYERS, H) * 0.3).tolist(), 64: (torch.rand(LAYERS, H) * 0.6).tolist()}
        if filter else {},
        train_length=train_length,
        min_length=12,
    )


@pytest.fixture()
def batch():
    torch.manual_seed(0)
    lengths = torch.tensor([70, 33, 9, 20])
    return torch.randint(3, 300, (4, 70)), lengths


def test_off_and_unit_scale_are_the_identity(model, batch):
    ids, lengths = batch
    plain = encode_vertical(model, ids, lengths, 16, backend="torch")
    model.context_extension = extension()
    assert torch.equal(encode_vertical(model, ids, lengths, 16, backend="torch", context_extension="off"), plain)
    model.context_extension = ContextExtension(delta_scale=[1.0, 1.0], min_length=1)
    assert resolve_mode(model.context_extension, "auto") == "mambaextend"
    assert model.delta_controls(lengths) is not None  # the hooked path runs, and multiplies by 1 exactly
    assert torch.equal(encode_vertical(model, ids, lengths, 16, backend="torch"), plain)


@pytest.mark.parametrize("mode", ["mambaextend", "longmamba", "both"])
def test_each_method_changes_results_and_does_not_depend_on_V(model, batch, mode):
    ids, lengths = batch
    model.context_extension = extension()
    plain = encode_vertical(model, ids, lengths, 1000, backend="torch", context_extension="off")
    horizontal = encode_vertical(model, ids, lengths, 1000, backend="torch", context_extension=mode)
    changed = (horizontal - plain).norm(dim=-1) > 1e-4
    assert changed.tolist() == [True, True, False, True]  # the row shorter than min_length = 12 is untouched...
    assert torch.equal(horizontal[2], plain[2])  # ...to the bit, though its batch runs the hooked path
    for V in (1, 5, 16, 64):
        got = encode_vertical(model, ids, lengths, V, backend="torch", context_extension=mode)
        assert_close(f"{mode} V={V}", horizontal, got, 1e-5)
    # Each row alone gives the same result: scales and thresholds follow the row's own whole length.
    for i in range(4):
        n = int(lengths[i])
        alone = encode_vertical(model, ids[i:i + 1, :n], lengths[i:i + 1], 7, backend="torch", context_extension=mode)
        assert_close(f"{mode} row {i}", horizontal[i:i + 1], alone, 1e-5)
    differentiable = pool_last_token(model, ids, lengths, "torch", context_extension=mode)
    assert_close(f"{mode} differentiable path", horizontal, differentiable, 1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_inputs_below_min_length_are_the_plain_model_in_every_mode(model, mode):
    """MambaExtend and LongMamba act from min_length on (the whole input's length); shorter inputs, alone or
    batched with long ones, at any V, are embedded exactly as without context extension."""
    model.context_extension = extension()  # min_length 12
    torch.manual_seed(5)
    lengths = torch.tensor([11, 3, 12, 1, 40, 7])
    ids = torch.randint(3, 300, (6, 40))
    short = lengths < 12
    for V in (1, 4, 11, 1000):
        plain = encode_vertical(model, ids, lengths, V, backend="torch", context_extension="off")
        got = encode_vertical(model, ids, lengths, V, backend="torch", context_extension=mode)
        assert torch.equal(got[short], plain[short]), (mode, V)
        if resolve_mode(model.context_extension, mode) != "off":
            assert ((got[~short] - plain[~short]).norm(dim=-1) > 1e-4).all(), (mode, V)  # 12 and 40 do change
        # A batch of short rows only (other shapes round differently, so it has its own plain result).
        only_short = [encode_vertical(model, ids[short][:, :11], lengths[short], V, backend="torch",
                                      context_extension=m) for m in ("off", mode)]
        assert torch.equal(only_short[1], only_short[0]), (mode, V)
        assert model.delta_controls(lengths[short], mode) is None  # not even the hooked path
    # The same through the Embedder's text API: a short text's embedding does not depend on the mode.
    from recemb.core import TextTokenizer

    tok = TextTokenizer.from_folder(model_folder(model))
    texts = ["state", "x", ""]
    assert all(len(t) < 12 for t in tok.encode(texts))
    off = Embedder(model, tok, context_extension="off").encode(texts)
    assert np.array_equal(Embedder(model, tok, context_extension=mode).encode(texts), off)


def test_filter_equals_the_skip_loop_inside_the_model(model):
    """Through the whole mixer: the filtered scan equals removing dropped tokens from global heads' recurrence."""
    torch.manual_seed(3)
    ids = torch.randint(3, 300, (1, 40))
    ext = extension(scale=False)
    model.context_extension = ext
    recorded = record_delta(model, ids, "torch")  # post-softplus Δ per layer, before filtering
    mixer = model.layers[0].mixer
    thr = torch.tensor(ext.thresholds[ext.threshold_key(40)])[0]
    skip = (recorded[0] <= thr) & torch.tensor(ext.global_heads[0])
    assert skip.any() and not skip.all()
    captured = {}

    def grab(_m, inputs, output):
        captured["x"] = inputs[0]
        captured["y"] = output[0]

    handle = mixer.register_forward_hook(grab)
    try:
        h, _ = model.forward_chunk(ids, None,
                                   ChunkRun(backend="torch", deltas=model.delta_controls(torch.tensor([40]))))
    finally:
        handle.remove()
    # Recompute layer 0's scan by the skip loop from the same projections.
    with torch.no_grad():
        u = captured["x"]
        zxbcdt = mixer.in_proj(u)
        z, xBC, dt_raw = torch.split(zxbcdt, [mixer.d_inner, mixer.conv_dim, mixer.nheads], dim=-1)
        from recemb.kernels import causal_conv1d

        xBC, _ = causal_conv1d(xBC, mixer.conv1d.weight[:, 0], mixer.conv1d.bias, activation="silu", backend="torch")
        x, B, C = torch.split(xBC, [mixer.d_inner, mixer.d_state, mixer.d_state], dim=-1)
        A = -torch.exp(mixer.A_log.double())
        y_ref, _ = skip_loop(x.double().reshape(1, 40, H, -1), recorded[0].double()[None], A,
                             B.double()[:, :, None], C.double()[:, :, None], mixer.D.double(), skip)
        y_ref = mixer.norm(y_ref.float().reshape(1, 40, -1), z, backend="torch")
        out_ref = mixer.out_proj(y_ref)
    assert_close("mixer with filter", out_ref, captured["y"], 1e-4)


def test_triton_backend_agrees_with_extension(model, batch):
    pytest.importorskip("triton")
    ids, lengths = batch
    model.context_extension = extension()
    ref = encode_vertical(model, ids[:2, :33], torch.tensor([33, 20]), 16, backend="torch")
    got = encode_vertical(model, ids[:2, :33], torch.tensor([33, 20]), 16, backend="triton")
    assert_close("triton with extension", ref, got, 1e-4)


def test_artifacts_round_trip_and_switch(tiny_folder, tmp_path, batch):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_folder, folder)
    ids, lengths = batch
    ext = extension()
    ext.save(folder)
    emb = Embedder.from_pretrained(folder, device="cpu", backend="torch")
    assert emb.context_extension == "both"
    loaded = emb.model.context_extension
    assert loaded.delta_scale == ext.delta_scale and loaded.global_heads == ext.global_heads
    assert loaded.thresholds == ext.thresholds
    with_ext = emb.embed_padded(ids, lengths, 16)
    emb.set_context_extension("off")
    assert emb.context_extension == "off"
    plain = Embedder.from_pretrained(tiny_folder, device="cpu", backend="torch")
    assert torch.equal(emb.embed_padded(ids, lengths, 16), plain.embed_padded(ids, lengths, 16))
    emb.set_context_extension("both")
    assert torch.equal(emb.embed_padded(ids, lengths, 16), with_ext)
    off = Embedder.from_pretrained(folder, device="cpu", backend="torch", context_extension="off")
    assert off.context_extension == "off"
    with pytest.raises(ValueError, match="not calibrated"):
        Embedder.from_pretrained(tiny_folder, device="cpu", context_extension="longmamba")
    with pytest.raises(ValueError, match="mode must be one of"):
        emb.set_context_extension("sometimes")
    # Artifacts for another model are refused at load.
    bad = extension()
    bad.delta_scale = [1.0, 1.0, 1.0]
    bad.save(folder)
    with pytest.raises(ValueError, match="3 delta scales for 2 layers"):
        Embedder.from_pretrained(folder, device="cpu")
    (folder / ARTIFACT_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="not a valid context-extension file"):
        Embedder.from_pretrained(folder, device="cpu")


def test_threshold_keeps_the_training_length_budget():
    """The LongMamba rule: at a target length Lk, keeping Δ above the threshold spends about the ΣΔ of one
    training-length window (with Δ drawn from the same distribution)."""
    torch.manual_seed(0)
    L, Lk = 200, 1600
    dt = torch.rand(L, 3) ** 2
    A = -torch.ones(3)
    decay, thr = _window_statistics(dt, A, 0.0, [L, Lk], L)
    assert torch.equal(thr[L], torch.zeros(3))  # at the training length nothing is filtered
    assert torch.allclose(decay, torch.exp(-dt.sum(0)))
    long_dt = torch.rand(Lk, 3) ** 2
    kept = torch.where(long_dt > thr[Lk], long_dt, torch.zeros(())).sum(0)
    assert torch.allclose(kept, dt.sum(0), rtol=0.15), (kept, dt.sum(0))


def test_calibrate_longmamba_fills_artifacts(model):
    torch.manual_seed(0)
    windows = [torch.randint(3, 300, (32,)).tolist() for _ in range(3)]
    ext = calibrate_longmamba(model, windows, train_length=32, target_lengths=[32, 64, 256], theta=0.05,
                              backend="torch")
    assert model.context_extension is ext and ext.has_filter and ext.mode == "longmamba"
    assert sorted(ext.thresholds) == [32, 64, 256]
    assert all(v == 0.0 for row in ext.thresholds[32] for v in row)
    thr64, thr256 = torch.tensor(ext.thresholds[64]), torch.tensor(ext.thresholds[256])
    assert (thr256 >= thr64).all() and (thr256 > 0).all()  # longer targets filter more
    decay = torch.tensor(ext.calibration["longmamba"]["cumulative_decay"])
    assert torch.equal(torch.tensor(ext.global_heads), decay > 0.05)
    assert ext.threshold_key(100) == 64 and ext.threshold_key(1000) == 256


def test_calibrate_mambaextend_lowers_its_objective(model):
    torch.manual_seed(0)
    docs = [torch.randint(3, 300, (96,)).tolist() + [1] for _ in range(2)]
    for method, iterations in (("spsa", 6), ("gradient", 6)):
        model.context_extension = None
        ext = calibrate_mambaextend(model, docs, train_length=24, eos_token_id=1, method=method,
                                    iterations=iterations, backend="torch", vertical_chunk_size=32,
                                    learning_rate=None)
        info = ext.calibration["mambaextend"]
        hist = info["history"]
        assert all(b <= a + 1e-12 for a, b in zip(hist, hist[1:])), hist
        assert info["loss_end"] < info["loss_start"], (method, info["loss_start"], info["loss_end"])
        assert len(ext.delta_scale) == LAYERS and ext.delta_scale != [1.0, 1.0]
    with pytest.raises(ValueError, match="longer than train_length"):
        calibrate_mambaextend(model, [[5, 6, 1]], train_length=24, eos_token_id=1)
