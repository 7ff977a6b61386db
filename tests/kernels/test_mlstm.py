"""The chunkwise mLSTM against its definition, the fp64 token loop (``mlstm_recurrent_ref``), and the loop against
transformers' native recurrent kernel (the conventions: gates, stabiliser, normaliser, eps)."""

from __future__ import annotations

import pytest
import torch

from recemb.kernels.mlstm import mlstm_chunkwise, mlstm_recurrent_ref, mlstm_zero_state

B, H, DK, DV = 2, 3, 8, 16


def mlstm_inputs(l: int, seed: int = 0, dtype: torch.dtype = torch.float64, b: int = B):
    """q, k, v and gate pre-activations in the range a soft-capped xLSTM layer produces: input gates within
    +-15 (so the stabiliser m moves both ways), forget gates from almost-keep to strong forgetting."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift).to(dtype)

    q, k, v = rnd(b, l, H, DK), rnd(b, l, H, DK), rnd(b, l, H, DV)
    i = 15 * torch.tanh(rnd(b, l, H, scale=6.0) / 15)
    f = 15 * torch.tanh(rnd(b, l, H, scale=4.0, shift=2.0) / 15)
    return q, k, v, i, f


def random_state(seed: int = 1, dtype: torch.dtype = torch.float64, b: int = B):
    g = torch.Generator().manual_seed(seed)
    C = torch.randn(b, H, DK, DV, generator=g, dtype=torch.float64)
    n = torch.randn(b, H, DK, generator=g, dtype=torch.float64)
    m = torch.randn(b, H, generator=g, dtype=torch.float64) * 3
    return tuple(t.to(dtype) for t in (C, n, m))


def check_state(assert_close, name, ref, got, tol):
    for part, r, x in zip("Cnm", ref, got):
        assert_close(f"{name} {part}", r, x, tol)


@pytest.mark.parametrize("l", [1, 5, 16, 37])
@pytest.mark.parametrize("chunk_size", [1, 4, 16, 64])
def test_chunkwise_equals_token_loop_fp64(assert_close, l, chunk_size):
    q, k, v, i, f = mlstm_inputs(l, seed=l)
    y_ref, s_ref = mlstm_recurrent_ref(q, k, v, i, f)
    y, s = mlstm_chunkwise(q, k, v, i, f, chunk_size=chunk_size)
    assert y.dtype == torch.float64 and y.shape == (B, l, H, DV)
    assert_close("h", y_ref, y, 1e-10)
    check_state(assert_close, "state", s_ref, s, 1e-10)


@pytest.mark.parametrize("l,chunk_size", [(1, 64), (29, 8), (64, 16), (70, 64)])
def test_chunkwise_fp32(assert_close, l, chunk_size):
    q, k, v, i, f = mlstm_inputs(l, seed=3)
    y_ref, s_ref = mlstm_recurrent_ref(q, k, v, i, f)
    y, s = mlstm_chunkwise(*(t.float() for t in (q, k, v, i, f)), chunk_size=chunk_size)
    assert y.dtype == torch.float32 and all(t.dtype == torch.float32 for t in s)
    assert_close("h", y_ref, y, 1e-5)
    check_state(assert_close, "state", s_ref, s, 1e-5)


def test_low_precision_inputs_compute_in_fp32(assert_close):
    q, k, v, i, f = mlstm_inputs(21, seed=4, dtype=torch.bfloat16)
    y_ref, _ = mlstm_recurrent_ref(q, k, v, i, f)  # the same rounded inputs, in fp64
    y, s = mlstm_chunkwise(q, k, v, i, f, chunk_size=8)
    assert y.dtype == torch.float32 and s[0].dtype == torch.float32
    assert_close("h", y_ref, y, 1e-5)


@pytest.mark.parametrize("l,chunk_size", [(1, 4), (13, 4), (24, 8)])
def test_initial_state(assert_close, l, chunk_size):
    q, k, v, i, f = mlstm_inputs(l, seed=5)
    state = random_state()
    y_ref, s_ref = mlstm_recurrent_ref(q, k, v, i, f, initial_state=state)
    y, s = mlstm_chunkwise(q, k, v, i, f, chunk_size=chunk_size, initial_state=state)
    assert_close("h", y_ref, y, 1e-10)
    check_state(assert_close, "state", s_ref, s, 1e-10)
    zero = mlstm_zero_state(B, H, DK, DV, dtype=torch.float64)
    y0, _ = mlstm_chunkwise(q, k, v, i, f, chunk_size=chunk_size, initial_state=zero)
    assert_close("zero state = no state", mlstm_chunkwise(q, k, v, i, f, chunk_size=chunk_size)[0], y0, 0.0)


@pytest.mark.parametrize("split", [1, 7, 8, 20])
def test_two_calls_joined_by_the_state_equal_one_call(assert_close, split):
    q, k, v, i, f = mlstm_inputs(29, seed=6)
    y_all, s_all = mlstm_chunkwise(q, k, v, i, f, chunk_size=8)
    y1, s1 = mlstm_chunkwise(*(t[:, :split] for t in (q, k, v, i, f)), chunk_size=8)
    y2, s2 = mlstm_chunkwise(*(t[:, split:] for t in (q, k, v, i, f)), chunk_size=8, initial_state=s1)
    assert_close("h", y_all, torch.cat([y1, y2], dim=1), 1e-12)
    check_state(assert_close, "state", s_all, s2, 1e-12)


def test_extreme_gates_stay_finite(assert_close):
    """Gates at the soft cap: total forgetting, saturated input, and a long stretch of tiny input gates that
    drives m down to the cap (exp(-m) then dominates the normaliser).

    In fp32 the reference is the loop on the same fp32-rounded inputs, and the bound is looser: here the normaliser
    q·n nearly cancels at some tokens (|h| reaches 100x its typical size), which amplifies any fp32 rounding
    (measured 1.3e-5; the fp32 token loop 2.4e-6, transformers' fp32 chunkwise kernel similar to ours)."""
    l = 40
    q, k, v, i, f = mlstm_inputs(l, seed=7)
    i[:, :10] = 15.0
    i[:, 10:] = -15.0
    f[:, ::3] = -15.0
    f[:, 1::3] = 15.0
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 3e-5)):
        inputs = [t.to(dtype) for t in (q, k, v, i, f)]
        y_ref, s_ref = mlstm_recurrent_ref(*inputs)
        y, s = mlstm_chunkwise(*inputs, chunk_size=16)
        assert_close(f"h {dtype}", y_ref, y, tol)
        check_state(assert_close, f"state {dtype}", s_ref, s, tol)


def test_bad_arguments_are_rejected():
    q, k, v, i, f = mlstm_inputs(4)
    with pytest.raises(ValueError, match="chunk_size"):
        mlstm_chunkwise(q, k, v, i, f, chunk_size=0)
    with pytest.raises(ValueError, match="at least one token"):
        mlstm_chunkwise(*(t[:, :0] for t in (q, k, v, i, f)))
    with pytest.raises(ValueError, match="shapes do not fit"):
        mlstm_chunkwise(q, k[:, :3], v, i, f)
    with pytest.raises(ValueError, match="initial_state"):
        mlstm_chunkwise(q, k, v, i, f, initial_state=random_state(b=1))


def test_token_loop_equals_transformers_native_kernel(assert_close):
    """The definition is transformers' own recurrence (``mlstm_recurrent_sequence_native``), state and all:
    m starts at 0, the forget gate is logsigmoid, the normaliser max(|q·n|, exp(-m)) + eps."""
    mx = pytest.importorskip("transformers.models.xlstm.modeling_xlstm")
    native = getattr(mx, "mlstm_recurrent_sequence_native", None)
    if native is None:  # transformers uses the xlstm package's kernels when that is installed
        pytest.skip("transformers' native xLSTM kernels are not defined (the xlstm package is installed)")
    q, k, v, i, f = mlstm_inputs(23, seed=8)
    C0, n0, m0 = random_state()
    y_ref, (C, n, m) = mlstm_recurrent_ref(q, k, v, i, f, initial_state=(C0, n0, m0))
    heads_first = (t.transpose(1, 2).contiguous() for t in (q, k, v, i, f))
    y_tf, (C_tf, n_tf, m_tf) = native(*heads_first, c_initial=C0, n_initial=n0, m_initial=m0[..., None],
                                      return_last_states=True, eps=1e-6, dtype_state=torch.float64)
    assert_close("h", y_ref, y_tf.transpose(1, 2), 1e-12)
    check_state(assert_close, "state", (C, n, m), (C_tf, n_tf, m_tf[..., 0]), 1e-12)
