"""Ground-truth SSD references, slow and obviously correct.

Shape glossary (shared by every file in ``recemb.kernels`` and ``recemb.core``):
    b batch, l sequence length, h heads, p head dim, g groups of B/C, n state size,
    c number of chunks, q chunk size (positions within a chunk: q target, s source).
    A (h,) negative decay rates; B, C (b, l, g, n); D (h,) skip; dt (b, l, h) step sizes; x (b, l, h, p).

The recurrence, per head h (with its group g = h // (nheads / ngroups)):
    state_t = exp(dt_t * A) * state_{t-1} + dt_t * x_t ⊗ B_t          state: (p, n)
    y_t     = state_t · C_t + D * x_t
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def prepare_dt(
    dt: torch.Tensor,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
) -> torch.Tensor:
    """Effective step size: ``clamp(softplus?(dt + dt_bias), *dt_limit)`` in fp32.

    Follows transformers' ``mamba2_chunk_scan`` and mamba_ssm's ``_chunk_cumsum_fwd``: the bias is added first,
    then softplus, then the clamp (fp32, or fp64 for fp64 input). The clamp is skipped for the default ``(0, inf)`` limit, which would only turn
    an exact 0 into 0 (and LongMamba's zeroed steps must stay zero).
    """
    dt = dt.to(torch.promote_types(dt.dtype, torch.float32))
    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)
    if dt_softplus:
        dt = F.softplus(dt)
    lo, hi = dt_limit
    if lo > 0.0 or hi != float("inf"):
        dt = dt.clamp(min=lo, max=hi)
    return dt


def ssd_naive_recurrent(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    initial_states: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-by-token loop over the recurrence above; computes in ``dtype`` (fp64 by default).

    Arguments:
        x: (b, l, h, p)
        dt: (b, l, h)
        A: (h,)
        B: (b, l, g, n)
        C: (b, l, g, n)
        D: (h,) or None
        z: (b, l, h, p) or None; the output is multiplied by silu(z)
        initial_states: (b, h, p, n) or None
    Return:
        y: (b, l, h, p) in ``dtype``
        final_states: (b, h, p, n) in ``dtype``
    """
    b, l, h, p = x.shape
    g, n = B.shape[-2:]
    heads_per_group = h // g
    dt = prepare_dt(dt, dt_bias, dt_softplus, dt_limit).to(dtype)  # (b, l, h)
    x, A, B, C = x.to(dtype), A.to(dtype), B.to(dtype), C.to(dtype)
    B = B.repeat_interleave(heads_per_group, dim=2)  # (b, l, h, n)
    C = C.repeat_interleave(heads_per_group, dim=2)  # (b, l, h, n)
    state = (
        initial_states.to(dtype).clone()
        if initial_states is not None
        else x.new_zeros(b, h, p, n)
    )  # (b, h, p, n)
    ys = []
    for t in range(l):
        decay = torch.exp(dt[:, t] * A)  # (b, h)
        state = decay[:, :, None, None] * state + torch.einsum(
            "bh,bhp,bhn->bhpn", dt[:, t], x[:, t], B[:, t]
        )
        ys.append(torch.einsum("bhpn,bhn->bhp", state, C[:, t]))
    y = torch.stack(ys, dim=1) if ys else x.new_zeros(b, 0, h, p)  # (b, l, h, p)
    if D is not None:
        y = y + D.to(dtype)[:, None] * x
    if z is not None:
        y = y * F.silu(z.to(dtype))
    return y, state


def segsum(dA: torch.Tensor) -> torch.Tensor:
    """Stable segment sums: ``out[..., i, j] = sum(dA[..., j+1 : i+1])`` for j <= i, else -inf.

    dA: (..., q) -> (..., q, q). Summing the masked increments (rather than subtracting two cumulative sums)
    keeps full precision for long chunks; this is the reference form of Listing 1 in the SSD paper.
    """
    q = dA.shape[-1]
    dA = dA[..., None].expand(*dA.shape, q)  # (..., q_target, q_source) holds dA[target]
    strictly_lower = torch.tril(torch.ones(q, q, dtype=torch.bool, device=dA.device), diagonal=-1)
    dA = dA.masked_fill(~strictly_lower, 0)
    out = torch.cumsum(dA, dim=-2)
    lower = torch.tril(torch.ones(q, q, dtype=torch.bool, device=dA.device))
    return out.masked_fill(~lower, float("-inf"))


def ssd_naive_chunked(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Listing 1 of the SSD paper (Dao & Gu 2024, "Transformers are SSMs"), one einsum per step.

    ``dt`` here is already the effective step (see ``prepare_dt``). Shapes as in ``ssd_naive_recurrent``; any l.
    """
    b, l, h, p = x.shape
    g, n = B.shape[-2:]
    q = chunk_size
    pad = (-l) % q
    x_raw = x.to(dtype)
    dt = dt.to(dtype)
    B = B.to(dtype).repeat_interleave(h // g, dim=2)
    C = C.to(dtype).repeat_interleave(h // g, dim=2)

    def chunks(t: torch.Tensor) -> torch.Tensor:  # (b, l, ...) -> (b, c, q, ...)
        t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))
        return t.reshape(b, -1, q, *t.shape[2:])

    X = chunks(x_raw * dt[..., None])  # (b, c, q, h, p)
    dA = chunks(dt * A.to(dtype)).permute(0, 3, 1, 2)  # (b, h, c, q)
    Bc, Cc = chunks(B), chunks(C)  # (b, c, q, h, n)
    dA_cs = torch.cumsum(dA, dim=-1)  # (b, h, c, q)

    # 1. Intra-chunk output (diagonal blocks).
    L = torch.exp(segsum(dA))  # (b, h, c, q, s)
    Y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", Cc, Bc, L, X)
    # 2. Each chunk's own final state, from zero.
    decay_states = torch.exp(dA_cs[..., -1:] - dA_cs)  # (b, h, c, q)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bc, decay_states, X)
    # 3. Inter-chunk recurrence: the state entering every chunk.
    if initial_states is None:
        initial_states = torch.zeros_like(states[:, 0])
    states = torch.cat([initial_states.to(dtype)[:, None], states], dim=1)  # (b, c+1, h, p, n)
    decay_chunk = torch.exp(segsum(F.pad(dA_cs[..., -1], (1, 0))))  # (b, h, c+1, c+1)
    new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
    states, final_states = new_states[:, :-1], new_states[:, -1]
    # 4. State -> output within each chunk.
    Y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", Cc, states, torch.exp(dA_cs))
    y = (Y_diag + Y_off).reshape(b, -1, h, p)[:, :l]
    if D is not None:
        y = y + D.to(dtype)[:, None] * x_raw
    return y, final_states
