"""The torch paths of the causal conv (with carried state) and the gated RMSNorm, against their references
(``recemb.kernels.conv1d.reference``, ``recemb.kernels.gated_norm.reference``), and the references against
independent formulations."""

import pytest
import torch
import torch.nn.functional as F

from recemb.kernels import (
    causal_conv1d,
    causal_conv1d_ref,
    causal_conv1d_torch,
    gated_rms_norm,
    gated_rms_norm_ref,
    gated_rms_norm_torch,
)
from recemb.kernels.workspace import Workspace
from tests.utils import assert_close

CONVS = [pytest.param(causal_conv1d_ref, id="ref"), pytest.param(causal_conv1d_torch, id="torch")]


@pytest.mark.parametrize("conv", CONVS)
def test_conv_without_state_is_causal_zero_padded_conv(conv):
    torch.manual_seed(0)
    b, l, d, k = 2, 11, 6, 4
    x, w, bias = torch.randn(b, l, d), torch.randn(d, k), torch.randn(d)
    y, state = conv(x, w, bias)
    ref = F.conv1d(x.transpose(1, 2), w[:, None], bias, padding=k - 1, groups=d)[..., :l]  # (b, d, l)
    ref = F.silu(ref).transpose(1, 2)
    assert_close("y", ref, y, 1e-6)
    assert torch.equal(state, x[:, -k:].transpose(1, 2))


@pytest.mark.parametrize("conv", CONVS)
@pytest.mark.parametrize("split", [1, 2, 3, 4, 9], ids=lambda s: f"split{s}")
def test_conv_carried_state_equals_one_pass(conv, split):
    torch.manual_seed(1)
    b, l, d, k = 2, 12, 5, 4
    x, w, bias = torch.randn(b, l, d), torch.randn(d, k), torch.randn(d)
    y, state = conv(x, w, bias)
    y1, s1 = conv(x[:, :split], w, bias)
    y2, s2 = conv(x[:, split:], w, bias, conv_state=s1)
    assert_close("y", y, torch.cat([y1, y2], dim=1), 1e-6)
    assert torch.equal(s2, state)


@pytest.mark.parametrize("conv", CONVS)
def test_conv_state_shorter_input_than_kernel_keeps_history(conv):
    torch.manual_seed(2)
    d, k = 3, 4
    w = torch.randn(d, k)
    state0 = torch.randn(1, d, k)
    x = torch.randn(1, 2, d)
    _, state = conv(x, w, None, conv_state=state0, activation=None)
    assert torch.equal(state, torch.cat([state0[..., 2:], x.transpose(1, 2)], dim=-1))


CONV_TOLS = {torch.float64: 1e-12, torch.float32: 1e-6, torch.bfloat16: 1e-2}


@pytest.mark.parametrize("dtype", list(CONV_TOLS), ids=["fp64", "fp32", "bf16"])
@pytest.mark.parametrize("l", [1, 3, 4, 37], ids=lambda v: f"L{v}")  # width 4: l < k, l == k, l > k
@pytest.mark.parametrize("has_state", [False, True], ids=["no-state", "state"])
@pytest.mark.parametrize("variant", [("silu", True), (None, False)], ids=["silu-bias", "linear-nobias"])
def test_conv_torch_equals_reference(dtype, l, has_state, variant):
    """The production shift-and-add against the cat-then-sum definition, fresh and with a workspace; bf16 x
    with fp32 weights and state is the mixer's layout under bf16."""
    activation, has_bias = variant
    gen = torch.Generator().manual_seed(l)
    b, d, k = 2, 24, 4
    weight_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    x = torch.randn(b, l, d, generator=gen).to(dtype)
    w = torch.randn(d, k, generator=gen).to(weight_dtype)
    bias = torch.randn(d, generator=gen).to(weight_dtype) if has_bias else None
    conv_state = torch.randn(b, d, k, generator=gen).to(weight_dtype) if has_state else None
    ref_y, ref_state = causal_conv1d_ref(x, w, bias, conv_state, activation)
    y, state = causal_conv1d_torch(x, w, bias, conv_state, activation)
    assert y.dtype == ref_y.dtype == dtype and state.dtype == ref_state.dtype
    assert_close("y", ref_y, y, CONV_TOLS[dtype])
    assert torch.equal(state, ref_state), "the new state holds raw inputs and must match exactly"
    y_ws, state_ws = causal_conv1d_torch(x, w, bias, conv_state, activation, workspace=Workspace())
    assert torch.equal(y_ws, y) and torch.equal(state_ws, state)
    y_dispatch, _ = causal_conv1d(x, w, bias, conv_state, activation, backend="torch")
    assert torch.equal(y_dispatch, y)


@pytest.mark.parametrize("l", [1, 3, 37], ids=lambda v: f"L{v}")
@pytest.mark.parametrize("has_state", [False, True], ids=["no-state", "state"])
def test_conv_bf16_input_with_fp32_output_is_the_fp32_conv_of_its_values(l, has_state):
    """A mixed-precision mixer's layout: bf16 x (in_proj's output) with out_dtype fp32 is the fp32 conv of the
    same (exactly representable) values, and the carried state is fp32 holding x exactly."""
    gen = torch.Generator().manual_seed(l)
    b, d, k = 2, 24, 4
    x = torch.randn(b, l, d, generator=gen).bfloat16()
    w, bias = torch.randn(d, k, generator=gen), torch.randn(d, generator=gen)
    conv_state = torch.randn(b, d, k, generator=gen).bfloat16().float() if has_state else None
    ref_y, ref_state = causal_conv1d_ref(x.float(), w, bias, conv_state)
    for workspace in (None, Workspace()):
        y, state = causal_conv1d(x, w, bias, conv_state, backend="torch", workspace=workspace,
                                 out_dtype=torch.float32)
        assert y.dtype == state.dtype == torch.float32
        assert_close("y", ref_y, y, CONV_TOLS[torch.float32])
        assert torch.equal(state, ref_state)


def test_conv_workspace_output_equals_fresh_and_the_state_is_its_own_copy():
    torch.manual_seed(0)
    ws = Workspace()
    w, bias = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    state = torch.randn(2, 6, 4, dtype=torch.float64)
    for l in (9, 9, 3):  # repeated shapes reuse the buffer; a short chunk reads the carried history
        x = torch.randn(2, l, 6, dtype=torch.float64)
        y_ref, s_ref = causal_conv1d_ref(x, w, bias, state)
        y_fresh, s_fresh = causal_conv1d_torch(x, w, bias, state)
        y_ws, s_ws = causal_conv1d_torch(x, w, bias, state, workspace=ws)
        assert torch.equal(y_fresh, y_ws) and torch.equal(s_fresh, s_ws)
        assert_close("y", y_ref, y_ws, 1e-12)
        assert torch.equal(s_ref, s_ws)
        before = s_ws.clone()
        x.add_(1.0)  # the caller's input (a workspace buffer in the mixer) is reused: the state must not
        # follow
        causal_conv1d_torch(torch.randn(2, l, 6, dtype=torch.float64), w, bias, state, workspace=ws)
        assert torch.equal(s_ws, before)
        state = s_ws


def test_gated_norm_ref_is_per_group():
    torch.manual_seed(3)
    y, z, w = torch.randn(2, 5, 12), torch.randn(2, 5, 12), torch.randn(12)
    out = gated_rms_norm_ref(y, z, w, group_size=4, eps=1e-5)
    h = (y * F.silu(z)).view(2, 5, 3, 4)
    ref = (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).view(2, 5, 12) * w
    assert_close("out", ref, out, 1e-6)
    whole = gated_rms_norm_ref(y, z, w, group_size=12)
    assert (whole - out).abs().max() > 1e-3  # grouping matters


def test_gated_norm_rejects_bad_group_size():
    for norm in (gated_rms_norm_torch, gated_rms_norm):
        with pytest.raises(ValueError, match="multiple of group_size"):
            norm(torch.randn(2, 10), None, torch.ones(10), group_size=4)


@pytest.mark.parametrize("with_gate", [True, False], ids=["gated", "ungated"])
def test_gated_norm_torch_fp32_inference_equals_reference(with_gate):
    """The in-place path the torch backend takes without autograd (fp32) agrees with the reference, copying
    and with inplace=True (the mixer's y and z are workspace scratch: the same numbers, in y's memory)."""
    torch.manual_seed(0)
    y = torch.randn(2, 7, 24) * 3
    z = torch.randn(2, 7, 24) if with_gate else None
    w = torch.rand(24) + 0.5
    expected = gated_rms_norm_ref(y, z, w, group_size=8)
    y_before = y.clone()
    with torch.no_grad():
        got = gated_rms_norm_torch(y, z, w, group_size=8)
        assert got.dtype == expected.dtype == torch.float32
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
        assert torch.equal(y, y_before)  # copying: the input is not modified
        y_scratch = y.clone()
        in_place = gated_rms_norm_torch(y_scratch, None if z is None else z.clone(), w, 8, inplace=True)
        assert torch.equal(in_place, got) and in_place.data_ptr() == y_scratch.data_ptr()
        strided = y.transpose(0, 1)  # not contiguous: falls back to a new buffer and leaves y alone
        got_strided = gated_rms_norm_torch(strided, None if z is None else z.transpose(0, 1).clone(), w, 8,
                                           inplace=True)
        assert torch.equal(got_strided, got.transpose(0, 1)) and torch.equal(y, y_before)
        assert torch.equal(gated_rms_norm(y, z, w, 8, backend="torch"), got)


@pytest.mark.parametrize(
    "dtype", [torch.float64, torch.bfloat16, torch.float32], ids=["fp64", "bf16", "fp32-grad"]
)
@pytest.mark.parametrize("with_gate", [True, False], ids=["gated", "ungated"])
@pytest.mark.parametrize("inplace", [False, True], ids=["copy", "inplace"])
def test_gated_norm_torch_casts_path_equals_reference(dtype, with_gate, inplace):
    """Under autograd or for inputs other than fp32 the torch path is the reference's sequence of casts (its
    formula computes in fp32 whatever the input), so the results are equal to the bit; ``inplace`` changes
    nothing there and leaves the inputs alone."""
    torch.manual_seed(1)
    y = (torch.randn(3, 5, 16) * 2).to(dtype)
    z = torch.randn(3, 5, 16).to(dtype) if with_gate else None
    w = (torch.rand(16) + 0.5).to(dtype)
    expected = gated_rms_norm_ref(y, z, w, group_size=4)
    y_before, z_before = y.clone(), None if z is None else z.clone()
    w_in = w.clone().requires_grad_() if dtype == torch.float32 else w
    got = gated_rms_norm_torch(y, z, w_in, 4, inplace=inplace)
    assert got.dtype == expected.dtype and torch.equal(got.detach(), expected)
    assert torch.equal(y, y_before) and (z is None or torch.equal(z, z_before))
    if w_in.requires_grad:
        got.sum().backward()
        assert w_in.grad is not None
