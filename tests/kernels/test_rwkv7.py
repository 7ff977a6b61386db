"""RWKV-7's chunked time mix against its fp64 token loop (``recemb.kernels.rwkv7``)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from recemb.kernels.rwkv7 import rwkv7_chunked, rwkv7_recurrent_ref

DECAY_SCALE = math.exp(-0.5)


def rwkv7_inputs(b: int, l: int, h: int, n: int, dtype=torch.float32, seed: int = 0,
                 strongest_decay: bool = False):
    """r, w, k, v, a, b as RWKV-7 makes them: log decays in [-e^{-0.5}, 0), a = -kk and b = kk * gate with kk
    unit per head, k scaled by the in-context rate (as ``k * (1 + (a - 1) k_a)``)."""
    g = torch.Generator().manual_seed(seed)
    randn = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    shape = (b, l, h, n)
    pre = torch.full(shape, 30.0, dtype=torch.float64) if strongest_decay else 2 * randn(*shape)
    w = -DECAY_SCALE * torch.sigmoid(pre)
    gate = torch.sigmoid(randn(*shape))
    kk = F.normalize(randn(*shape), dim=-1)
    k = randn(*shape) * (1 + (gate - 1) * 0.8)
    out = (randn(*shape), w, k, randn(*shape), -kk, kk * gate)
    return tuple(t.to(dtype) for t in out)


def initial_state(b, h, n, dtype=torch.float32, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, h, n, n, generator=g, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("l, q", [(1, 64), (5, 64), (64, 16), (64, 64), (100, 16), (100, 32), (77, 128)])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_chunked_equals_the_token_loop(assert_close, nan_filled_empty, l, q, dtype, tol):
    """Any length (partial last chunks, l = 1, l < q), with an initial state; outputs and final state."""
    x = rwkv7_inputs(2, l, 3, 16, dtype)
    s0 = initial_state(2, 3, 16, dtype)
    o_ref, s_ref = rwkv7_recurrent_ref(*x, initial_state=s0)
    o, s = rwkv7_chunked(*x, initial_state=s0, chunk_size=q)
    assert o.dtype == s.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert_close("o", o_ref, o, tol)
    assert_close("state", s_ref, s, tol)


def test_no_initial_state_means_zeros(assert_close):
    x = rwkv7_inputs(1, 40, 2, 8)
    o_ref, s_ref = rwkv7_recurrent_ref(*x)
    o, s = rwkv7_chunked(*x, chunk_size=16)
    assert_close("o", o_ref, o, 1e-5)
    assert_close("state", s_ref, s, 1e-5)
    o0, s0 = rwkv7_chunked(*x, initial_state=torch.zeros(1, 2, 8, 8), chunk_size=16)
    assert torch.equal(o0, o) and torch.equal(s0, s)


@pytest.mark.parametrize("split", [1, 13, 32, 50])
def test_two_calls_joined_by_the_state_equal_one_call(assert_close, split):
    x = rwkv7_inputs(2, 64, 2, 16, torch.float64, seed=3)
    s0 = initial_state(2, 2, 16, torch.float64)
    o_all, s_all = rwkv7_chunked(*x, initial_state=s0, chunk_size=16)
    o1, s1 = rwkv7_chunked(*(t[:, :split] for t in x), initial_state=s0, chunk_size=16)
    o2, s2 = rwkv7_chunked(*(t[:, split:] for t in x), initial_state=s1, chunk_size=16)
    assert_close("o", o_all, torch.cat([o1, o2], dim=1), 1e-12)
    assert_close("state", s_all, s2, 1e-12)


def test_token_by_token_equals_one_call(assert_close):
    x = rwkv7_inputs(1, 20, 2, 8, seed=4)
    o_all, s_all = rwkv7_chunked(*x)
    state, outs = None, []
    for t in range(20):
        o, state = rwkv7_chunked(*(z[:, t : t + 1] for z in x), initial_state=state)
        outs.append(o)
    assert_close("o", o_all, torch.cat(outs, dim=1), 1e-5)
    assert_close("state", s_all, state, 1e-5)


@pytest.mark.parametrize("q", [64, 128])
def test_strongest_decay_in_fp32(assert_close, q):
    """Every decay at RWKV-7's strongest (log factor -e^{-0.5}): a chunk of 128 spans 77.6 nats, which the
    centred factorisation keeps within e^{+-38.8}."""
    x = rwkv7_inputs(1, 256, 2, 16, seed=5, strongest_decay=True)
    s0 = initial_state(1, 2, 16)
    o_ref, s_ref = rwkv7_recurrent_ref(*x, initial_state=s0)
    o, s = rwkv7_chunked(*x, initial_state=s0, chunk_size=q)
    assert_close("o", o_ref, o, 1e-5)
    assert_close("state", s_ref, s, 1e-5)


def test_decays_beyond_rwkv7_split_the_chunk(assert_close):
    """Log decays of -5 per token (outside RWKV-7's range): a chunk of 64 would span 320 nats, so the chunk is
    halved until it fits fp32; the result is still exact."""
    r, _, k, v, a, b = rwkv7_inputs(1, 96, 2, 8, seed=6)
    w = torch.full_like(r, -5.0)
    o_ref, s_ref = rwkv7_recurrent_ref(r, w, k, v, a, b)
    o, s = rwkv7_chunked(r, w, k, v, a, b, chunk_size=64)
    assert_close("o", o_ref, o, 1e-5)
    assert_close("state", s_ref, s, 1e-5)


def test_empty_input_returns_the_initial_state():
    x = rwkv7_inputs(2, 0, 2, 8)
    s0 = initial_state(2, 2, 8)
    o, s = rwkv7_chunked(*x, initial_state=s0)
    assert o.shape == (2, 0, 2, 8) and torch.equal(s, s0)
    with pytest.raises(ValueError, match="chunk_size"):
        rwkv7_chunked(*x, chunk_size=0)


def test_the_loop_matches_fla_naive_dplr_recurrence(assert_close):
    """An independent statement of the same recurrence: flash-linear-attention's naive DPLR loop (state
    (k, v), the transpose of ours; its readout scaled by d_k^-0.5, undone here)."""
    naive = pytest.importorskip("fla.ops.generalized_delta_rule.dplr.naive")
    r, w, k, v, a, b = rwkv7_inputs(2, 30, 2, 16)
    s0 = initial_state(2, 2, 16)
    t = lambda z: z.transpose(1, 2)  # noqa: E731
    o_fla, s_fla = naive.dplr_recurrence(t(r) * 16 ** 0.5, t(k), t(v), t(a), t(b), t(w),
                                         initial_state=s0.transpose(-1, -2).clone())
    o_ref, s_ref = rwkv7_recurrent_ref(r, w, k, v, a, b, initial_state=s0)
    assert_close("o", o_ref, t(o_fla), 1e-5)
    assert_close("state", s_ref, s_fla.transpose(-1, -2), 1e-5)


def test_gradients_equal_the_token_loops(assert_close):
    """The chunked form is differentiable (training pools through it): its gradients equal the loop's."""
    x = [t.requires_grad_() for t in rwkv7_inputs(1, 19, 2, 4, torch.float64, seed=7)]
    s0 = initial_state(1, 2, 4, torch.float64).requires_grad_()
    weights = torch.randn(1, 19, 2, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    grads = []
    for fn in (rwkv7_recurrent_ref, lambda *a, **k: rwkv7_chunked(*a, chunk_size=8, **k)):
        o, s = fn(*x, initial_state=s0)
        grads.append(torch.autograd.grad((o * weights).sum() + s.square().sum(), [*x, s0]))
    for name, ref, got in zip(("r", "w", "k", "v", "a", "b", "state"), *grads):
        assert_close(f"d{name}", ref, got, 1e-10)
