"""The Triton SSD scan against the token-by-token fp64 loop, under the Triton interpreter on CPU."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton")

from recemb.kernels.ssd.combined import ssd_chunk_scan  # noqa: E402
from recemb.kernels.ssd.reference import ssd_recurrent_ref  # noqa: E402
from recemb.kernels.ssd.triton_combined import ssd_chunk_scan_triton  # noqa: E402

pytestmark = pytest.mark.usefixtures("nan_filled_empty")

FP32_TOL = 1e-4
# bf16/fp16: the reference sees the same rounded inputs; on a GPU the dot operands (decay-weighted B,
# CB·decay·dt, and the fp32 states in C·state) are rounded to the input dtype before the fp32 accumulation.
LOW_PRECISION_TOLS = {torch.bfloat16: 1e-2, torch.float16: 2e-3}

# (b, l, h, p, g, n, chunk_size)
SHAPES = [
    pytest.param((2, 37, 4, 8, 2, 16, 16), id="B2-L37-H4-P8-G2-N16-Q16"),
    pytest.param((1, 1, 2, 8, 1, 16, 16), id="B1-L1-H2-P8-G1-N16-Q16"),
    pytest.param((1, 48, 4, 16, 1, 8, 16), id="B1-L48-H4-P16-G1-N8-Q16"),
    pytest.param((2, 21, 4, 8, 4, 16, 8), id="B2-L21-H4-P8-G4-N16-Q8"),
]
FEATURES = [
    pytest.param(dict(), id="plain"),
    pytest.param(dict(D=True, z=True, dt_bias=True, dt_softplus=True), id="D-z-softplus"),
    pytest.param(dict(D=True, dt_bias=True, dt_softplus=True, dt_limit=(0.05, 0.8)), id="D-softplus-limit"),
]


def _kwargs(inp, features: dict, has_initial_states: bool) -> dict:
    return dict(
        D=inp.D if features.get("D") else None,
        z=inp.z if features.get("z") else None,
        dt_bias=inp.dt_bias if features.get("dt_bias") else None,
        dt_softplus=features.get("dt_softplus", False),
        dt_limit=features.get("dt_limit", (0.0, float("inf"))),
        initial_states=inp.initial_states if has_initial_states else None,
    )


def _raw_dt(inp, features: dict) -> torch.Tensor:
    # Without softplus the raw step is the step: keep it positive and Mamba2-sized.
    return inp.dt if features.get("dt_softplus") else torch.nn.functional.softplus(inp.dt)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("features", FEATURES)
@pytest.mark.parametrize("has_initial_states", [False, True], ids=["zero-init", "init"])
def test_matches_recurrent_ref_fp32(make_ssd_inputs, assert_close, shape, features, has_initial_states):
    b, l, h, p, g, n, q = shape
    inp = make_ssd_inputs(b, l, h, p, g, n)
    dt = _raw_dt(inp, features)
    kw = _kwargs(inp, features, has_initial_states)
    tri_y, tri_final = ssd_chunk_scan_triton(inp.x, dt, inp.A, inp.B, inp.C, q, **kw)
    ref_y, ref_final = ssd_recurrent_ref(inp.x, dt, inp.A, inp.B, inp.C, **kw)  # fp64 loop
    assert tri_y.dtype == tri_final.dtype == torch.float32
    assert_close("y", ref_y, tri_y, FP32_TOL)
    assert_close("final_states", ref_final, tri_final, FP32_TOL)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[3]])
def test_matches_recurrent_ref_low_precision(make_ssd_inputs, assert_close, dtype, shape):
    b, l, h, p, g, n, q = shape
    inp = make_ssd_inputs(b, l, h, p, g, n)
    features = dict(D=True, z=True, dt_bias=True, dt_softplus=True)
    kw = _kwargs(inp, features, has_initial_states=True)
    x, B, C, z = (t.to(dtype) for t in (inp.x, inp.B, inp.C, inp.z))
    kw["z"] = z
    tri_y, tri_final = ssd_chunk_scan_triton(x, inp.dt.to(dtype), inp.A, B, C, q, **kw)
    # The reference sees the same rounded inputs, so the tolerance measures the kernels' own rounding.
    ref_y, ref_final = ssd_recurrent_ref(x, inp.dt.to(dtype), inp.A, B, C, **kw)
    assert tri_final.dtype == torch.float32
    assert_close("y", ref_y, tri_y, LOW_PRECISION_TOLS[dtype])
    assert_close("final_states", ref_final, tri_final, LOW_PRECISION_TOLS[dtype])


@pytest.mark.parametrize("split", [1, 16, 23], ids=lambda s: f"split{s}")
def test_carried_state_equals_one_pass(make_ssd_inputs, assert_close, split):
    """Two calls joined by final_states -> initial_states equal one call (the vertical-chunk carry)."""
    inp = make_ssd_inputs(1, 37, 4, 8, 2, 16)
    kw = dict(D=inp.D, z=inp.z, dt_bias=inp.dt_bias, dt_softplus=True)
    y_full, final_full = ssd_chunk_scan_triton(inp.x, inp.dt, inp.A, inp.B, inp.C, 16, **kw)
    parts, state = [], None
    for sl in (slice(0, split), slice(split, None)):
        kw_part = dict(kw, z=inp.z[:, sl])
        y, state = ssd_chunk_scan_triton(
            inp.x[:, sl], inp.dt[:, sl], inp.A, inp.B[:, sl], inp.C[:, sl], 16,
            initial_states=state, **kw_part,
        )  # fmt: skip
        parts.append(y)
    assert_close("y", y_full, torch.cat(parts, dim=1), 1e-5)
    assert_close("final_states", final_full, state, 1e-5)


@pytest.mark.parametrize("out_dtype", [None, torch.float32], ids=["out-default", "out-fp32"])
def test_dispatcher_triton_backend(make_ssd_inputs, assert_close, out_dtype):
    """ssd_chunk_scan(backend="triton") agrees with backend="torch" and honours out_dtype / fp32 states."""
    inp = make_ssd_inputs(2, 37, 4, 8, 2, 16)
    args = (inp.x.bfloat16(), inp.dt, inp.A, inp.B.bfloat16(), inp.C.bfloat16(), 16)
    kw = dict(D=inp.D, z=inp.z, dt_bias=inp.dt_bias, dt_softplus=True, initial_states=inp.initial_states,
              out_dtype=out_dtype)  # fmt: skip
    tri_y, tri_final = ssd_chunk_scan(*args, backend="triton", **kw)
    ref_y, ref_final = ssd_chunk_scan(*args, backend="torch", **kw)
    assert tri_y.dtype == ref_y.dtype == (out_dtype or torch.bfloat16)
    assert tri_final.dtype == torch.float32
    assert_close("y", ref_y, tri_y, 1e-2 if out_dtype is None else 1e-4)
    assert_close("final_states", ref_final, tri_final, 1e-4)


def test_non_contiguous_inputs(make_ssd_inputs, assert_close):
    """x, B, C, z, dt as views into one projection (as the mixer splits in_proj's output)."""
    b, l, h, p, g, n = 1, 20, 4, 8, 2, 16
    inp = make_ssd_inputs(b, l, h, p, g, n)
    proj = torch.cat(
        [inp.z.flatten(2), inp.x.flatten(2), inp.B.flatten(2), inp.C.flatten(2), inp.dt], dim=-1
    )  # (b, l, h*p + h*p + g*n + g*n + h)
    z, x, B, C, dt = torch.split(proj, [h * p, h * p, g * n, g * n, h], dim=-1)
    x, z = x.unflatten(-1, (h, p)), z.unflatten(-1, (h, p))
    B, C = B.unflatten(-1, (g, n)), C.unflatten(-1, (g, n))
    assert not x.is_contiguous() and not dt.is_contiguous()
    kw = dict(D=inp.D, z=z, dt_bias=inp.dt_bias, dt_softplus=True)
    tri_y, tri_final = ssd_chunk_scan_triton(x, dt, inp.A, B, C, 8, **kw)
    ref_y, ref_final = ssd_recurrent_ref(x, dt, inp.A, B, C, **kw)
    assert_close("y", ref_y, tri_y, FP32_TOL)
    assert_close("final_states", ref_final, tri_final, FP32_TOL)
