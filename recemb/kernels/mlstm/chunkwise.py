"""The mLSTM cell in chunkwise-parallel form: the production path on every device (pure torch).

Computes the recurrence of ``reference.py`` (``mlstm_recurrent_ref``, the definition) for any length l >= 1:
full chunks of ``chunk_size`` tokens, then one shorter chunk for the rest, each chunk's outputs from the state
before it plus a causal (cs, cs) attention-like product inside it. Only the state (C, n, m) crosses chunk
boundaries, so two calls joined by the returned state equal one call over both inputs (up to rounding).

Shape glossary (``recemb.kernels.mlstm``): b batch, l tokens, h heads, dk query/key head dim, dv value head dim,
c chunks, cs chunk length (tokens t and s inside a chunk: target and source).
    q, k (b, l, h, dk); v (b, l, h, dv); i, f (b, l, h) gate pre-activations; state (C (b, h, dk, dv),
    n (b, h, dk), m (b, h)).

Inside a chunk, with the state (C, n, m) before it, the log forget gates lf = logsigmoid(f) and their running
sum B_t = lf_1 + ... + lf_t (inclusive, from the chunk's start), and sq_t = dk^-1/2 q_t:
    log weight of source s at target t:   D_ts = B_t - B_s + i_s  (s <= t; -inf above the diagonal)
    log weight of the carried state at t: B_t + m
    stabiliser at t:                      M_t = max(B_t + m, max_s D_ts)        (= the recurrent m_t)
    h_t = [exp(B_t + m - M_t) sq_t C + sum_s exp(D_ts - M_t) (sq_t . k_s) v_s]
          / (max(|exp(B_t + m - M_t) sq_t . n + sum_s exp(D_ts - M_t) (sq_t . k_s)|, exp(-M_t)) + eps)
and the state after it, with G = B_cs the whole chunk's log decay and A_s = G - B_s + i_s:
    m' = max(G + m, max_s A_s);  C' = exp(G + m - m') C + sum_s exp(A_s - m') k_s v_s^T;  n' likewise with k_s.
The intra-chunk sums are computed for all chunks at once against their own stabiliser max_s D_ts and rescaled in
the loop over chunks, which holds one state at a time (memory O(b·h·dk·dv + b·h·l·cs), not one state per chunk).
The log-space gate arithmetic (B, D, A, the stabilisers) runs in fp64, the matmuls in fp32: in fp32 the differences
B_t - B_s of long running sums lose digits, and the fp32 result was 10x further from the fp64 loop (about 1e-5,
as transformers' native chunkwise kernel; 1e-6 now) for (b, h, l, cs) element-wise work.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["DEFAULT_CHUNK_SIZE", "GATE_DTYPE", "MLSTMState", "mlstm_chunkwise"]

MLSTMState = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # C (b, h, dk, dv), n (b, h, dk), m (b, h)

# The chunk length when the caller gives none: transformers' and the xlstm package's default.
DEFAULT_CHUNK_SIZE = 64
GATE_DTYPE = torch.float64


def mlstm_chunkwise(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, i: torch.Tensor, f: torch.Tensor,
    chunk_size: int = DEFAULT_CHUNK_SIZE, initial_state: MLSTMState | None = None, eps: float = 1e-6,
    qk_scale: float | None = None,
) -> tuple[torch.Tensor, MLSTMState]:
    """The mLSTM over a sequence, chunk by chunk; computes in fp32 (fp64 for fp64 inputs).

    Arguments:
        q, k: (b, l, h, dk); v: (b, l, h, dv); i, f: (b, l, h) gate pre-activations, l >= 1
        chunk_size: cs >= 1 (numerics only; the last chunk may be shorter)
        initial_state: (C (b, h, dk, dv), n (b, h, dk), m (b, h)), the state before token 0; None: zeros
        eps: added to the normaliser; qk_scale: None for dk^-1/2
    Return:
        h (b, l, h, dv) in the compute dtype, and the state after the last token (fresh tensors, compute dtype)
    """
    b, l, nh, dk = q.shape
    dv = v.shape[-1]
    if l < 1:
        raise ValueError("mlstm_chunkwise needs at least one token")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if k.shape != q.shape or v.shape[:3] != (b, l, nh) or i.shape != (b, l, nh) or f.shape != (b, l, nh):
        raise ValueError(f"shapes do not fit: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, "
                         f"i {tuple(i.shape)}, f {tuple(f.shape)}")
    dtype = torch.promote_types(q.dtype, torch.float32)
    scale = dk ** -0.5 if qk_scale is None else qk_scale
    # (b, h, l, ·) in the compute dtype: the matmuls run over the last two dims.
    qh = (q.to(dtype) * scale).transpose(1, 2)
    kh = k.to(dtype).transpose(1, 2)
    vh = v.to(dtype).transpose(1, 2)
    # The gates' log-space arithmetic (running sums of log forget gates and their differences) runs in fp64: the
    # sums grow with the chunk length and their differences would lose fp32 digits, at the cost of (b, h, l, cs)
    # element-wise work next to the (b, h, l, cs, dk + dv) of the matmuls.
    ih = i.to(GATE_DTYPE).transpose(1, 2)
    lfh = F.logsigmoid(f.to(GATE_DTYPE)).transpose(1, 2)
    if initial_state is None:
        state = (q.new_zeros(b, nh, dk, dv, dtype=dtype), q.new_zeros(b, nh, dk, dtype=dtype),
                 q.new_zeros(b, nh, dtype=dtype))
    else:
        C0, n0, m0 = initial_state
        if C0.shape != (b, nh, dk, dv) or n0.shape != (b, nh, dk) or m0.shape != (b, nh):
            raise ValueError(f"initial_state shapes {tuple(C0.shape)}, {tuple(n0.shape)}, {tuple(m0.shape)} do not "
                             f"fit (C {(b, nh, dk, dv)}, n {(b, nh, dk)}, m {(b, nh)})")
        state = (C0.to(dtype), n0.to(dtype), m0.to(dtype))
    cs = min(chunk_size, l)
    full = (l // cs) * cs
    outs = []
    for start, stop, size in ((0, full, cs), (full, l, l - full)):
        if stop > start:
            y, state = _chunks(qh[:, :, start:stop], kh[:, :, start:stop], vh[:, :, start:stop],
                               ih[:, :, start:stop], lfh[:, :, start:stop], size, state, eps)
            outs.append(y)
    y = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)  # (b, h, l, dv)
    return y.transpose(1, 2), state


def _chunks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, i: torch.Tensor, lf: torch.Tensor, cs: int,
            state: MLSTMState, eps: float) -> tuple[torch.Tensor, MLSTMState]:
    """Whole chunks of cs tokens: q (already scaled), k (b, h, c·cs, dk), v (b, h, c·cs, dv), i and lf the log
    forget gates (b, h, c·cs). Return h (b, h, c·cs, dv) and the state after the last chunk."""
    b, nh, L, dk = q.shape
    dv = v.shape[-1]
    c = L // cs
    qc = q.reshape(b, nh, c, cs, dk)
    kc = k.reshape(b, nh, c, cs, dk)
    vc = v.reshape(b, nh, c, cs, dv)
    ic = i.reshape(b, nh, c, cs)
    B = lf.reshape(b, nh, c, cs).cumsum(-1)  # (b, h, c, cs) log decay from the chunk's start through t
    G = B[..., -1]  # (b, h, c) the whole chunk's log decay
    A = G[..., None] - B + ic  # (b, h, c, cs) log weight of source s in the state after the chunk
    A_max = A.amax(-1)  # (b, h, c)

    # Intra-chunk part of every chunk at once, stabilised by its own row max (rescaled in the loop below).
    causal = torch.ones(cs, cs, dtype=torch.bool, device=q.device).tril()
    D = (B[..., :, None] - B[..., None, :] + ic[..., None, :]).masked_fill(~causal, float("-inf"))  # (b,h,c,t,s)
    M_intra = D.amax(-1)  # (b, h, c, cs), finite: the diagonal is always there
    P = (qc @ kc.transpose(-1, -2)) * torch.exp(D - M_intra[..., None]).to(q.dtype)  # (b, h, c, cs, cs)
    num_intra = P @ vc  # (b, h, c, cs, dv)
    den_intra = P.sum(-1)  # (b, h, c, cs)

    C, n, m = state
    dtype = q.dtype
    m = m.to(B.dtype)
    out = q.new_empty(b, nh, c, cs, dv)
    for j in range(c):
        carried = B[:, :, j] + m[..., None]  # (b, h, cs) log weight of the state before the chunk
        M = torch.maximum(carried, M_intra[:, :, j])  # (b, h, cs) the recurrent m at each token
        q_w = qc[:, :, j] * torch.exp(carried - M).to(dtype)[..., None]  # (b, h, cs, dk)
        w_intra = torch.exp(M_intra[:, :, j] - M).to(dtype)  # (b, h, cs)
        num = q_w @ C + w_intra[..., None] * num_intra[:, :, j]  # (b, h, cs, dv)
        den = (q_w @ n[..., None])[..., 0] + w_intra * den_intra[:, :, j]  # (b, h, cs)
        out[:, :, j] = num / (torch.maximum(den.abs(), torch.exp(-M).to(dtype)) + eps)[..., None]
        # The state after chunk j.
        m_next = torch.maximum(G[:, :, j] + m, A_max[:, :, j])  # (b, h)
        decay = torch.exp(G[:, :, j] + m - m_next).to(dtype)
        k_w = kc[:, :, j] * torch.exp(A[:, :, j] - m_next[..., None]).to(dtype)[..., None]  # (b, h, cs, dk)
        C = decay[..., None, None] * C + k_w.transpose(-1, -2) @ vc[:, :, j]
        n = decay[..., None] * n + k_w.sum(-2)
        m = m_next
    return out.reshape(b, nh, L, dv), (C, n, m.to(dtype))
