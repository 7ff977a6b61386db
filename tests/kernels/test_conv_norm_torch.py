"""Torch references of the causal conv (with carried state) and the gated RMSNorm."""

import pytest
import torch
import torch.nn.functional as F

from recemb.kernels import causal_conv1d_ref, gated_rms_norm_ref
from tests.utils import assert_close


def test_conv_without_state_is_causal_zero_padded_conv():
    torch.manual_seed(0)
    b, l, d, k = 2, 11, 6, 4
    x, w, bias = torch.randn(b, l, d), torch.randn(d, k), torch.randn(d)
    y, state = causal_conv1d_ref(x, w, bias)
    ref = F.silu(F.conv1d(x.transpose(1, 2), w[:, None], bias, padding=k - 1, groups=d)[..., :l]).transpose(1, 2)
    assert_close("y", ref, y, 1e-6)
    assert torch.equal(state, x[:, -k:].transpose(1, 2))


@pytest.mark.parametrize("split", [1, 2, 3, 4, 9], ids=lambda s: f"split{s}")
def test_conv_carried_state_equals_one_pass(split):
    torch.manual_seed(1)
    b, l, d, k = 2, 12, 5, 4
    x, w, bias = torch.randn(b, l, d), torch.randn(d, k), torch.randn(d)
    y, state = causal_conv1d_ref(x, w, bias)
    y1, s1 = causal_conv1d_ref(x[:, :split], w, bias)
    y2, s2 = causal_conv1d_ref(x[:, split:], w, bias, conv_state=s1)
    assert_close("y", y, torch.cat([y1, y2], dim=1), 1e-6)
    assert torch.equal(s2, state)


def test_conv_state_shorter_input_than_kernel_keeps_history():
    torch.manual_seed(2)
    d, k = 3, 4
    w = torch.randn(d, k)
    state0 = torch.randn(1, d, k)
    x = torch.randn(1, 2, d)
    _, state = causal_conv1d_ref(x, w, None, conv_state=state0, activation=None)
    assert torch.equal(state, torch.cat([state0[..., 2:], x.transpose(1, 2)], dim=-1))


def test_gated_norm_is_per_group():
    torch.manual_seed(3)
    y, z, w = torch.randn(2, 5, 12), torch.randn(2, 5, 12), torch.randn(12)
    out = gated_rms_norm_ref(y, z, w, group_size=4, eps=1e-5)
    h = (y * F.silu(z)).view(2, 5, 3, 4)
    ref = (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).view(2, 5, 12) * w
    assert_close("out", ref, out, 1e-6)
    whole = gated_rms_norm_ref(y, z, w, group_size=12)
    assert (whole - out).abs().max() > 1e-3  # grouping matters


def test_gated_norm_rejects_bad_group_size():
    with pytest.raises(ValueError, match="multiple of group_size"):
        gated_rms_norm_ref(torch.randn(2, 10), None, torch.ones(10), group_size=4)


@pytest.mark.parametrize("with_gate", [True, False])
def test_gated_norm_inference_path_equals_reference(with_gate):
    """The in-place path the torch backend takes without autograd (fp32) agrees with the reference, and its
    inplace=True form gives the same numbers in y's memory."""
    from recemb.kernels.gated_norm import gated_rms_norm, gated_rms_norm_inference

    torch.manual_seed(0)
    y = torch.randn(2, 7, 24) * 3
    z = torch.randn(2, 7, 24) if with_gate else None
    w = torch.rand(24) + 0.5
    expected = gated_rms_norm_ref(y, z, w, group_size=8)
    y_before = y.clone()
    got = gated_rms_norm_inference(y, z, w, group_size=8)
    assert got.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    assert torch.equal(y, y_before)  # the input is not modified
    # inplace=True (the mixer's y and z are workspace scratch): the same numbers, written into y's memory
    y_scratch = y.clone()
    in_place = gated_rms_norm_inference(y_scratch, None if z is None else z.clone(), w, 8, inplace=True)
    assert torch.equal(in_place, got) and in_place.data_ptr() == y_scratch.data_ptr()
    strided = y.transpose(0, 1)  # not contiguous: falls back to a new buffer and leaves y alone
    got_strided = gated_rms_norm_inference(strided, None if z is None else z.transpose(0, 1).clone(), w, 8,
                                           inplace=True)
    assert torch.equal(got_strided, got.transpose(0, 1)) and torch.equal(y, y_before)
    with torch.no_grad():
        torch.testing.assert_close(gated_rms_norm(y, z, w, 8, backend="torch"), expected, rtol=1e-6, atol=1e-6)
    wg = w.clone().requires_grad_()
    gated_rms_norm(y, z, wg, 8, backend="torch").sum().backward()  # autograd takes the reference path
    assert wg.grad is not None


def test_conv_workspace_output_equals_fresh_and_the_state_is_its_own_copy():
    from recemb.kernels.workspace import Workspace

    torch.manual_seed(0)
    ws = Workspace()
    w, bias = torch.randn(6, 4), torch.randn(6)
    state = torch.randn(2, 6, 4)
    for l in (9, 9, 3):  # repeated shapes reuse the buffer; a short chunk reads the carried history
        x = torch.randn(2, l, 6)
        y_fresh, s_fresh = causal_conv1d_ref(x, w, bias, state)
        y_ws, s_ws = causal_conv1d_ref(x, w, bias, state, workspace=ws)
        assert torch.equal(y_fresh, y_ws) and torch.equal(s_fresh, s_ws)
        before = s_ws.clone()
        x.add_(1.0)  # the caller's input (a workspace buffer in the mixer) is reused: the state must not follow
        causal_conv1d_ref(torch.randn(2, l, 6), w, bias, state, workspace=ws)
        assert torch.equal(s_ws, before)
        state = s_ws
