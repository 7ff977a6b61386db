"""The references (each op's ``reference.py``) among themselves, ``prepare_dt`` against its reference, and the
promise that they and every torch production path work without Triton."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from recemb.kernels import prepare_dt, prepare_dt_ref, ssd_chunk_scan_ref, ssd_recurrent_ref
from recemb.kernels.ssd.reference import (
    bmm_chunk_ref,
    chunk_cumsum_ref,
    chunk_scan_ref,
    chunk_state_ref,
    state_passing_ref,
)

DT_MODES = [
    pytest.param(dict(), id="raw"),
    pytest.param(dict(dt_bias=True, dt_softplus=True), id="bias-softplus"),
    pytest.param(dict(dt_bias=True, dt_softplus=True, dt_limit=(0.05, 0.6)), id="bias-softplus-limit"),
    pytest.param(dict(dt_limit=(0.0, 0.5)), id="raw-upper-limit"),
]


def _dt_kwargs(inp, mode: dict, dtype: torch.dtype) -> dict:
    return dict(
        dt_bias=inp.dt_bias.to(dtype) if mode.get("dt_bias") else None,
        dt_softplus=mode.get("dt_softplus", False),
        dt_limit=mode.get("dt_limit", (0.0, float("inf"))),
    )


@pytest.mark.parametrize("mode", DT_MODES)
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.bfloat16], ids=["fp32", "fp64", "bf16"]
)
def test_prepare_dt_is_the_effective_step(make_ssd_inputs, mode, dtype):
    """``prepare_dt`` equals its reference to the bit, and both the formula, computed independently."""
    inp = make_ssd_inputs(2, 9, 4, 8, 2, 16)
    dt = inp.dt.to(dtype)
    dt[:, ::3] = 0.0  # LongMamba's zeroed steps: stay zero without a limit
    kw = _dt_kwargs(inp, mode, dtype)
    got = prepare_dt(dt, **kw)
    assert got.dtype == torch.promote_types(dtype, torch.float32)
    assert torch.equal(got, prepare_dt_ref(dt, **kw))
    # Independently, elementwise in fp64: bias, then log(1 + e^x), then the clamp.
    expected = dt.double() + (0.0 if kw["dt_bias"] is None else kw["dt_bias"].double())
    if kw["dt_softplus"]:
        expected = torch.log1p(torch.exp(expected))
    lo, hi = kw["dt_limit"]
    if (lo, hi) != (0.0, float("inf")):
        expected = expected.clamp(min=lo, max=hi)
    tol = {torch.float64: 1e-14, torch.float32: 1e-6, torch.bfloat16: 1e-6}[dtype]  # bf16 input computes in fp32
    assert torch.allclose(got.double(), expected, rtol=tol, atol=tol)
    if not mode:
        assert torch.equal(got, dt.to(got.dtype)), "the default limit must not clamp raw (negative) steps"


# (b, l, h, p, g, n, chunk_size): a partial last chunk, one token, an exact multiple, one group per head.
SHAPES = [
    pytest.param((2, 37, 4, 8, 2, 16, 16), id="B2-L37-H4-P8-G2-N16-Q16"),
    pytest.param((1, 1, 2, 8, 1, 16, 16), id="B1-L1-H2-P8-G1-N16-Q16"),
    pytest.param((1, 32, 2, 16, 1, 8, 16), id="B1-L32-H2-P16-G1-N8-Q16"),
    pytest.param((1, 29, 4, 8, 4, 16, 12), id="B1-L29-H4-P8-G4-N16-Q12"),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mode", DT_MODES[:3])
@pytest.mark.parametrize("has_initial_states", [False, True], ids=["zero-init", "init"])
def test_stage_refs_chained_equal_the_token_loop(make_ssd_inputs, assert_close, shape, mode,
                                                 has_initial_states):
    """The five stage references chained as ``triton_combined`` chains the kernels give the fp64 token loop:
    so each stage kernel, tested against its reference, is tested against the ground truth."""
    b, l, h, p, g, n, q = shape
    inp = make_ssd_inputs(b, l, h, p, g, n)
    x, dt, A, B, C, D, z = (t.double() for t in (inp.x, inp.dt, inp.A, inp.B, inp.C, inp.D, inp.z))
    kw = _dt_kwargs(inp, mode, torch.float64)
    init = inp.initial_states.double() if has_initial_states else None

    dA_cumsum, dt_out = chunk_cumsum_ref(dt, A, q, **kw)  # (b, h, c, q)
    states = chunk_state_ref(B, x, dt_out, dA_cumsum)  # (b, c, h, p, n)
    states, final_states = state_passing_ref(states, dA_cumsum[..., -1], init)
    CB = bmm_chunk_ref(C, B, q, causal=True)  # (b, c, g, q, q)
    y = chunk_scan_ref(CB, x, dt_out, dA_cumsum, C, states, D=D, z=z)  # (b, l, h, p)

    y_loop, final_loop = ssd_recurrent_ref(x, dt, A, B, C, D=D, z=z, initial_states=init, **kw)
    assert y.dtype == final_states.dtype == torch.float64
    assert_close("y", y_loop, y, 1e-10)
    assert_close("final_states", final_loop, final_states, 1e-10)
    y_ref, final_ref = ssd_chunk_scan_ref(x, dt, A, B, C, q, D=D, z=z, initial_states=init, **kw)
    assert torch.equal(y_ref, y_loop) and torch.equal(final_ref, final_loop)


_NO_TRITON_SCRIPT = r"""
import sys

sys.modules["triton"] = None  # any `import triton` now raises ImportError

import torch

import recemb.kernels as K
from recemb.kernels.conv1d import reference as CR
from recemb.kernels.gated_norm import reference as GR
from recemb.kernels.mlstm import reference as MR
from recemb.kernels.rwkv7 import reference as RR
from recemb.kernels.ssd import reference as SR

assert not K.triton_available()
assert set(K.__all__) <= set(dir(K))
try:
    import recemb.kernels.ssd.chunk_scan  # noqa: F401  (a Triton stage: proves the block above works)
except ImportError:
    pass
else:
    raise AssertionError("a Triton stage imported without Triton")

g = torch.Generator().manual_seed(0)
b, l, h, p, gr, n, q, d, k = 1, 10, 2, 4, 1, 8, 4, 12, 4
def randn(*shape):
    return torch.randn(*shape, generator=g)

x, dt, A = randn(b, l, h, p), randn(b, l, h), -torch.rand(h, generator=g) - 0.5
B, C, D, dt_bias, init = randn(b, l, gr, n), randn(b, l, gr, n), randn(h), randn(h), randn(b, h, p, n)

# SSD: production torch paths and every reference
y, s = K.ssd_chunk_scan(x, dt, A, B, C, q, D=D, dt_bias=dt_bias, dt_softplus=True, initial_states=init)
y_ref, s_ref = K.ssd_chunk_scan_ref(x, dt, A, B, C, q, D=D, dt_bias=dt_bias, dt_softplus=True,
                                    initial_states=init)
assert (y - y_ref).abs().max() < 1e-4 and (s - s_ref).abs().max() < 1e-4
dt_eff = K.prepare_dt(dt, dt_bias, True)
assert torch.allclose(dt_eff, torch.nn.functional.softplus(dt + dt_bias))
assert torch.equal(dt_eff, SR.prepare_dt_ref(dt, dt_bias, True))
K.ssd_chunk_scan_torch(x, dt_eff, A, B, C, q, D=D, initial_states=init, workspace=K.Workspace())
K.ssd_recurrent_ref(x, dt_eff, A, B, C, D=D)
K.ssd_chunked_ref(x, dt_eff, A, B, C, q, D=D)
dA_cumsum, dt_out = SR.chunk_cumsum_ref(dt, A, q, dt_bias, True)
states = SR.chunk_state_ref(B, x, dt_out, dA_cumsum)
states, _ = SR.state_passing_ref(states, dA_cumsum[..., -1], init)
CB = SR.bmm_chunk_ref(C, B, q, causal=True)
SR.chunk_scan_ref(CB, x, dt_out, dA_cumsum, C, states, D=D)

# conv and gated norm: dispatchers, torch paths, references
xc, w, bias, conv_state = randn(b, l, d), randn(d, k), randn(d), randn(b, d, k)
yc, sc = K.causal_conv1d(xc, w, bias, conv_state)
yc_torch, _ = K.causal_conv1d_torch(xc, w, bias, conv_state, workspace=K.Workspace())
yc_ref, sc_ref = CR.causal_conv1d_ref(xc, w, bias, conv_state)
assert torch.equal(yc, yc_torch) and (yc - yc_ref).abs().max() < 1e-5 and torch.equal(sc, sc_ref)
yn, zn = randn(b, l, d), randn(b, l, d)
out = K.gated_rms_norm(yn, zn, bias, 4)
out_torch = K.gated_rms_norm_torch(yn.clone(), zn.clone(), bias, 4, inplace=True)
out_ref = GR.gated_rms_norm_ref(yn, zn, bias, 4)
assert torch.equal(out, out_torch) and (out - out_ref).abs().max() < 1e-5
assert K.causal_conv1d_ref is CR.causal_conv1d_ref and K.gated_rms_norm_ref is GR.gated_rms_norm_ref

# mLSTM and RWKV-7: the chunked torch paths and their token loops
q, kq, v, i, f = randn(b, l, h, 4), randn(b, l, h, 4), randn(b, l, h, 4), randn(b, l, h), randn(b, l, h)
hm, _ = K.mlstm_chunkwise(q, kq, v, i, f, chunk_size=4)
assert (hm - MR.mlstm_recurrent_ref(q, kq, v, i, f)[0]).abs().max() < 1e-4
r, kr, vr, wr = randn(b, l, h, 4), randn(b, l, h, 4), randn(b, l, h, 4), -0.6 * torch.rand(b, l, h, 4, generator=g)
kk = torch.nn.functional.normalize(randn(b, l, h, 4), dim=-1)  # a = -kk, b = kk * gate, as RWKV-7 passes them
o, _ = K.rwkv7_chunked(r, wr, kr, vr, -kk, kk * 0.5, chunk_size=4)
assert (o - RR.rwkv7_recurrent_ref(r, wr, kr, vr, -kk, kk * 0.5)[0]).abs().max() < 1e-4
assert K.mlstm_recurrent_ref is MR.mlstm_recurrent_ref and K.rwkv7_recurrent_ref is RR.rwkv7_recurrent_ref
assert "triton" not in {m.split(".")[0] for m, mod in sys.modules.items() if mod is not None}
print("ok")
"""


def test_references_and_torch_paths_run_without_triton():
    """``import recemb.kernels`` and every reference module never import Triton: every reference and every
    torch production path imports and runs in a process where ``import triton`` fails."""
    proc = subprocess.run([sys.executable, "-c", _NO_TRITON_SCRIPT], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-4000:]
