"""Triton causal conv1d and gated RMSNorm against their pure-torch references (``recemb.kernels.conv1d.reference``,
``recemb.kernels.gated_norm.reference``), under the interpreter."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton")

from recemb.kernels.conv1d import causal_conv1d, causal_conv1d_ref  # noqa: E402
from recemb.kernels.conv1d.conv1d_triton import causal_conv1d_triton  # noqa: E402
from recemb.kernels.gated_norm import gated_rms_norm, gated_rms_norm_ref  # noqa: E402
from recemb.kernels.gated_norm.gated_norm_triton import gated_rms_norm_triton  # noqa: E402

pytestmark = pytest.mark.usefixtures("nan_filled_empty")

TOLS = {torch.float32: 1e-6, torch.bfloat16: 1e-2, torch.float16: 2e-3}


@pytest.mark.parametrize("l", [1, 3, 4, 37], ids=lambda v: f"L{v}")  # width 4: l < k, l == k, l > k
@pytest.mark.parametrize("has_state", [False, True], ids=["no-state", "state"])
@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(("silu", True), id="silu-bias"),
        pytest.param((None, False), id="linear-nobias"),
    ],
)
def test_causal_conv1d_fp32(assert_close, l, has_state, variant):
    activation, has_bias = variant
    b, d, k = 2, 24, 4
    gen = torch.Generator().manual_seed(l)
    x = torch.randn(b, l, d, generator=gen)
    weight = torch.randn(d, k, generator=gen)
    bias = torch.randn(d, generator=gen) if has_bias else None
    conv_state = torch.randn(b, d, k, generator=gen) if has_state else None
    tri_y, tri_state = causal_conv1d_triton(x, weight, bias, conv_state, activation)
    ref_y, ref_state = causal_conv1d_ref(x, weight, bias, conv_state, activation)
    assert tri_y.dtype == x.dtype and tri_state.dtype == ref_state.dtype
    assert_close("y", ref_y, tri_y, TOLS[torch.float32])
    assert torch.equal(tri_state, ref_state), "the new state holds raw inputs and must match exactly"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_causal_conv1d_low_precision_strided(assert_close, dtype):
    """bf16/fp16 activations sliced from a wider projection, fp32 weights and state (the mixer's layout)."""
    b, l, d, k = 2, 37, 40, 4
    gen = torch.Generator().manual_seed(0)
    proj = torch.randn(b, l, d + 16, generator=gen).to(dtype)
    x = proj[..., 8 : 8 + d]  # (b, l, d) with row stride d + 16
    weight, bias = torch.randn(d, k, generator=gen), torch.randn(d, generator=gen)
    conv_state = torch.randn(b, d, k, generator=gen)
    tri_y, tri_state = causal_conv1d_triton(x, weight, bias, conv_state, "silu")
    ref_y, ref_state = causal_conv1d_ref(x, weight, bias, conv_state, "silu")
    assert tri_y.dtype == dtype and tri_state.dtype == torch.float32
    assert_close("y", ref_y, tri_y, TOLS[dtype])
    assert torch.equal(tri_state, ref_state)


def test_causal_conv1d_chained_calls_match_one_pass(assert_close):
    """Carrying the state through uneven pieces (shorter and longer than the width) equals one pass."""
    b, l, d, k = 1, 19, 16, 4
    gen = torch.Generator().manual_seed(1)
    x, weight, bias = torch.randn(b, l, d, generator=gen), torch.randn(d, k, generator=gen), torch.randn(d)
    y_full, state_full = causal_conv1d_triton(x, weight, bias, None, "silu")
    ys, state = [], None
    for sl in (slice(0, 2), slice(2, 3), slice(3, 12), slice(12, None)):
        y, state = causal_conv1d_triton(x[:, sl], weight, bias, state, "silu")
        ys.append(y)
    assert_close("y", y_full, torch.cat(ys, dim=1), 1e-6)
    assert torch.equal(state, state_full)


def test_causal_conv1d_dispatcher():
    x, weight = torch.randn(1, 5, 8), torch.randn(8, 4)
    y, state = causal_conv1d(x, weight, backend="triton")
    ref_y, ref_state = causal_conv1d(x, weight, backend="torch")
    torch.testing.assert_close(y, ref_y, rtol=1e-6, atol=1e-6)
    assert torch.equal(state, ref_state)


@pytest.mark.parametrize(
    "dims",
    [
        pytest.param((2, 5, 32, 32), id="B2-L5-D32-G1"),
        pytest.param((2, 5, 32, 8), id="B2-L5-D32-G4"),
        pytest.param((3, 24, 12), id="B3-D24-G2-gs12"),  # group size not a power of two
        pytest.param((1, 1, 16, 16), id="B1-L1-D16-G1"),
    ],
)
@pytest.mark.parametrize("has_z", [True, False], ids=["gated", "ungated"])
def test_gated_rms_norm_fp32(assert_close, dims, has_z):
    *shape, group_size = dims
    gen = torch.Generator().manual_seed(0)
    y = torch.randn(*shape, generator=gen)
    z = torch.randn(*shape, generator=gen) if has_z else None
    weight = torch.randn(shape[-1], generator=gen)
    tri = gated_rms_norm_triton(y, z, weight, group_size, 1e-5)
    ref = gated_rms_norm_ref(y, z, weight, group_size, 1e-5)
    assert tri.dtype == ref.dtype
    assert_close("out", ref, tri, TOLS[torch.float32])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("weight_fp32", [False, True], ids=["weight-same", "weight-fp32"])
def test_gated_rms_norm_low_precision_strided_z(assert_close, dtype, weight_fp32):
    b, l, d, group_size = 2, 7, 64, 16
    gen = torch.Generator().manual_seed(2)
    y = torch.randn(b, l, d, generator=gen).to(dtype)
    zxbc = torch.randn(b, l, d + 40, generator=gen).to(dtype)
    z = zxbc[..., :d]  # (b, l, d), a view with row stride d + 40
    weight = torch.randn(d, generator=gen).to(torch.float32 if weight_fp32 else dtype)
    tri = gated_rms_norm_triton(y, z, weight, group_size, 1e-5)
    ref = gated_rms_norm_ref(y, z, weight, group_size, 1e-5)
    assert tri.dtype == ref.dtype == torch.promote_types(weight.dtype, dtype)
    assert_close("out", ref, tri, TOLS[dtype])


def test_gated_rms_norm_dispatcher():
    y, z, weight = torch.randn(3, 16), torch.randn(3, 16), torch.randn(16)
    out = gated_rms_norm(y, z, weight, 8, backend="triton")
    torch.testing.assert_close(out, gated_rms_norm(y, z, weight, 8, backend="torch"), rtol=1e-6, atol=1e-6)


def test_gated_rms_norm_rejects_bad_group_size():
    with pytest.raises(ValueError, match="multiple of group_size"):
        gated_rms_norm_triton(torch.randn(2, 10), None, torch.randn(10), 4)
