"""The RWKV-7 time-mix recurrence token by token in fp64: the definition the chunked form is tested against.

Shape glossary: b batch, l tokens, h heads, n key size (= head size), p value size (= n in RWKV-7).
Inputs per token and head: r (receptance, the readout), w (log decay, <= 0), k, v, and the two vectors of the
in-context-learning term, a and b (RWKV-7 passes a = -kk, b = kk * a_gate: kk the L2-normalised key, a_gate
the sigmoid "in-context learning rate").

The state S is (p, n) per head: rows index the value, columns the key, exactly the layout of the ``rwkv``
package's state (``state[i*3+1]``, (h, n, n)). With the decay factor exp(w_t) scaling the key columns:

    S_t = S_{t-1} · diag(exp(w_t)) + (S_{t-1} a_t) b_t^T + v_t k_t^T
    o_t = S_t r_t

This is ``RWKV_x070_TMix_one`` of the ``rwkv`` package (rwkv/model.py, RWKV_V7_ON) line by line: there
``state = state * w.view(H,1,N) + state @ ab + vk`` with ab = (-kk) ⊗ (kk*a), i.e. the in-context term reads
the state *before* the decay, and the readout ``state @ r`` reads the state *after* the update.
"""

from __future__ import annotations

import torch

__all__ = ["rwkv7_recurrent_ref"]


def rwkv7_recurrent_ref(
    r: torch.Tensor,
    w: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-by-token loop over the recurrence above; computes in ``dtype`` (fp64 by default).

    Arguments:
        r, w, k, a, b: (b, l, h, n); w is the log decay (the factor is exp(w), in (0, 1])
        v: (b, l, h, p)
        initial_state: (b, h, p, n) or None (zeros)
    Return:
        o: (b, l, h, p) in ``dtype``
        final_state: (b, h, p, n) in ``dtype``
    """
    bsz, l, h, n = k.shape
    p = v.shape[-1]
    r, w, k, v, a, b = (t.to(dtype) for t in (r, w, k, v, a, b))
    state = (initial_state.to(dtype).clone() if initial_state is not None
             else k.new_zeros(bsz, h, p, n))  # (b, h, p, n)
    outs = []
    for t in range(l):
        decay = torch.exp(w[:, t])  # (b, h, n)
        vk = v[:, t, :, :, None] * k[:, t, :, None, :]  # (b, h, p, n): v ⊗ k
        sa = (state * a[:, t, :, None, :]).sum(-1)  # (b, h, p): S_{t-1} a_t, before the decay
        state = state * decay[:, :, None, :] + sa[..., None] * b[:, t, :, None, :] + vk
        outs.append((state * r[:, t, :, None, :]).sum(-1))  # (b, h, p): S_t r_t
    o = torch.stack(outs, dim=1) if outs else v.new_zeros(bsz, 0, h, p)
    return o, state
