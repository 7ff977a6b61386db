"""The mLSTM cell token by token in fp64: the definition the chunkwise form is tested against.

Never run in production; imports only torch. It computes exactly the stabilised recurrence of transformers'
native xLSTM kernels (``mlstm_recurrent_step_native`` in models/xlstm/modeling_xlstm.py, v5.24) and of the
``xlstm`` package's ``mlstm_kernels`` native step, written out once more from the paper (Beck et al. 2024,
"xLSTM: Extended Long Short-Term Memory", eqs. 19-27, with the stabiliser of appendix A).

Shape glossary (``recemb.kernels.mlstm``): b batch, l tokens, h heads, dk query/key head dim, dv value head dim.
    q, k (b, l, h, dk); v (b, l, h, dv); i, f (b, l, h) the input and forget gate pre-activations (after the
    model's soft cap); state (C (b, h, dk, dv), n (b, h, dk), m (b, h)).

The recurrence, per head, from C = 0, n = 0, m = 0 at the start of a sequence (m starts at 0, not -inf, as in
transformers' cache and the ``xlstm`` package; only the eps term below can tell the difference):
    m_t = max(logsigmoid(f_t) + m_{t-1}, i_t)                    stabiliser (log scale of C and n)
    C_t = exp(logsigmoid(f_t) + m_{t-1} - m_t) C_{t-1} + exp(i_t - m_t) k_t v_t^T
    n_t = exp(logsigmoid(f_t) + m_{t-1} - m_t) n_{t-1} + exp(i_t - m_t) k_t
    h_t = (s q_t)^T C_t / (max(|(s q_t)^T n_t|, exp(-m_t)) + eps)      s = dk^-1/2
So the forget gate is sigmoid, the input gate exp, both in log space; C and n are kept divided by exp(m_t).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["MLSTMStateRef", "mlstm_recurrent_ref", "mlstm_zero_state"]

MLSTMStateRef = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # C (b, h, dk, dv), n (b, h, dk), m (b, h)


def mlstm_zero_state(b: int, h: int, dk: int, dv: int, device=None, dtype=torch.float32) -> MLSTMStateRef:
    """The state at the start of a sequence: C = 0, n = 0, m = 0."""
    return (torch.zeros(b, h, dk, dv, device=device, dtype=dtype), torch.zeros(b, h, dk, device=device, dtype=dtype),
            torch.zeros(b, h, device=device, dtype=dtype))


def mlstm_recurrent_ref(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, i: torch.Tensor, f: torch.Tensor,
    initial_state: MLSTMStateRef | None = None, eps: float = 1e-6, qk_scale: float | None = None,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, MLSTMStateRef]:
    """The recurrence above, one token at a time, computed in ``dtype`` (fp64 by default).

    Arguments:
        q, k: (b, l, h, dk); v: (b, l, h, dv); i, f: (b, l, h) gate pre-activations
        initial_state: (C (b, h, dk, dv), n (b, h, dk), m (b, h)), the state before token 0; None: zeros
        eps: added to the normaliser (transformers' ``config.eps``); qk_scale: None for dk^-1/2
    Return:
        h (b, l, h, dv) and the state after the last token, all in ``dtype``
    """
    b, l, nh, dk = q.shape
    dv = v.shape[-1]
    scale = dk ** -0.5 if qk_scale is None else qk_scale
    q, k, v, i, f = (t.to(dtype) for t in (q, k, v, i, f))
    if initial_state is None:
        C, n, m = mlstm_zero_state(b, nh, dk, dv, q.device, dtype)
    else:
        C, n, m = (t.to(dtype) for t in initial_state)
    out = []
    for t in range(l):
        log_f = F.logsigmoid(f[:, t])  # (b, h)
        m_new = torch.maximum(log_f + m, i[:, t])
        decay = torch.exp(log_f + m - m_new)  # (b, h)
        gain = torch.exp(i[:, t] - m_new)
        C = decay[..., None, None] * C + gain[..., None, None] * (k[:, t, :, :, None] * v[:, t, :, None, :])
        n = decay[..., None] * n + gain[..., None] * k[:, t]
        m = m_new
        qs = scale * q[:, t]  # (b, h, dk)
        num = torch.einsum("bhd,bhde->bhe", qs, C)
        den = torch.maximum((qs * n).sum(-1).abs(), torch.exp(-m)) + eps  # (b, h)
        out.append(num / den[..., None])
    return torch.stack(out, dim=1), (C, n, m)
