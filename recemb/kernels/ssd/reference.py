"""Pure-torch references of the SSD scan: the definitions every implementation is tested against.

A ``*_ref`` function is written to be obviously correct, not fast; it never runs in production and imports only
torch, so the references work without Triton. The implementations they check: ``recemb.kernels.ssd.combined``
(the scan's torch path and dispatcher), ``recemb.kernels.ssd.dt`` (the effective step, ``prepare_dt``) and the
five Triton stage files ``recemb.kernels.ssd.<stage>``, each naming its reference.

Shape glossary (shared by every file in ``recemb.kernels`` and ``recemb.core``):
    b batch, l sequence length, h heads, p head dim, g groups of B/C, n state size,
    c number of chunks, q chunk size (positions within a chunk: q target, s source).
    A (h,) negative decay rates; B, C (b, l, g, n); D (h,) skip; dt (b, l, h) step sizes; x (b, l, h, p).

The recurrence, per head h (with its group g = h // (nheads / ngroups)):
    state_t = exp(dt_t * A) * state_{t-1} + dt_t * x_t ⊗ B_t          state: (p, n)
    y_t     = state_t · C_t + D * x_t

Three levels, each tested against the one above it:
    ``ssd_recurrent_ref`` the recurrence token by token (fp64), the ground truth; ``ssd_chunk_scan_ref`` is
        the same with the signature of ``ssd_chunk_scan``;
    ``ssd_chunked_ref`` the chunked algorithm, Listing 1 of the SSD paper, one einsum per step;
    ``<stage>_ref`` the five Triton stages one by one (chunk_cumsum, chunk_state, state_passing, bmm_chunk,
        chunk_scan), with the kernels' argument layouts.
``prepare_dt_ref`` is the effective step, which the references that take raw steps compute with.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["bmm_chunk_ref", "chunk_cumsum_ref", "chunk_scan_ref", "chunk_state_ref", "prepare_dt_ref", "segsum",
           "ssd_chunk_scan_ref", "ssd_chunked_ref", "ssd_recurrent_ref", "state_passing_ref"]


def prepare_dt_ref(
    dt: torch.Tensor,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
) -> torch.Tensor:
    """Reference for ``prepare_dt`` (``recemb.kernels.ssd.dt``): the effective step
    ``clamp(softplus?(dt + dt_bias), *dt_limit)``.

    Computed in fp32 (fp64 for fp64 input): the bias added, the softplus taken in fp64 and rounded once, then the
    clamp, which only a limit other than the default applies (a lower limit above 0 or an upper one below inf),
    so zero and negative raw steps stay as they are without one.

    Arguments:
        dt: (b, l, h) raw steps
        dt_bias: (h,) or None
    Return:
        (b, l, h) fp32 (fp64 for fp64 input)
    """
    compute_dtype = torch.promote_types(dt.dtype, torch.float32)
    step = dt.to(compute_dtype)
    if dt_bias is not None:
        step = step + dt_bias.to(compute_dtype)
    if dt_softplus:
        step = F.softplus(step.double()).to(compute_dtype)
    lo, hi = dt_limit
    if lo > 0.0 or hi != float("inf"):
        step = step.clamp(min=lo, max=hi)
    return step


def ssd_recurrent_ref(
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
    dt = prepare_dt_ref(dt, dt_bias, dt_softplus, dt_limit).to(dtype)  # (b, l, h)
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


def ssd_chunked_ref(
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

    ``dt`` here is already the effective step (see ``prepare_dt_ref``). Shapes as in ``ssd_recurrent_ref``;
    any l.
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


def ssd_chunk_scan_ref(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, dt_softplus=False,
                       dt_limit=(0.0, float("inf")), initial_states=None):
    """Reference for ``recemb.kernels.ssd_chunk_scan``: the token loop ``ssd_recurrent_ref`` in fp64.

    ``chunk_size`` is accepted for a matching signature and has no effect on the result.
    """
    return ssd_recurrent_ref(x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
                               dt_limit=dt_limit, initial_states=initial_states)


# The five stages of the Triton scan (``recemb.kernels.ssd.triton_combined``), in the order it chains them,
# each with the arguments and docstring of its public stage function; fp32 compute (fp64 for fp64 input).


def chunk_cumsum_ref(
    dt: torch.Tensor,
    A: torch.Tensor,
    chunk_size: int,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference for ``chunk_cumsum`` (Triton kernel: ``recemb.kernels.ssd.chunk_cumsum``).

    Arguments:
        dt: (batch, seqlen, nheads) raw steps
        A: (nheads,)
        dt_bias: (nheads,) or None
    Return:
        dA_cumsum: (batch, nheads, nchunks, chunk_size) fp32 (fp64 for fp64 input)
        dt_out: (batch, nheads, nchunks, chunk_size) fp32 (fp64 for fp64 input), zero past the end
    """
    batch, seqlen, nheads = dt.shape
    nchunks = -(-seqlen // chunk_size)  # ceil(l / q)
    dt = prepare_dt_ref(dt, dt_bias, dt_softplus, dt_limit)  # (b, l, h)
    dt = F.pad(dt, (0, 0, 0, nchunks * chunk_size - seqlen))  # (b, c*q, h), zero steps on the padded tail
    dt_out = dt.view(batch, nchunks, chunk_size, nheads).permute(0, 3, 1, 2)  # (b, h, c, q)
    dA_cumsum = torch.cumsum(dt_out * A.to(dt.dtype)[:, None, None], dim=-1)  # (b, h, c, q)
    return dA_cumsum, dt_out.contiguous()


def chunk_state_ref(
    B: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, dA_cumsum: torch.Tensor
) -> torch.Tensor:
    """Reference for ``chunk_state`` (Triton kernel: ``recemb.kernels.ssd.chunk_state``).

    Arguments:
        B: (batch, seqlen, ngroups, dstate)
        x: (batch, seqlen, nheads, headdim)
        dt: (batch, nheads, nchunks, chunk_size) effective steps, zero past the end of the sequence
        dA_cumsum: (batch, nheads, nchunks, chunk_size)
    Return:
        states: (batch, nchunks, nheads, headdim, dstate) fp32 (fp64 for fp64 input)
    """
    batch, seqlen, nheads, hdim = x.shape
    _, _, nchunks, chunk_size = dt.shape
    ngroups, dstate = B.shape[2:]
    cdt = torch.promote_types(x.dtype, torch.float32)
    pad = nchunks * chunk_size - seqlen
    x = F.pad(x.to(cdt), (0, 0, 0, 0, 0, pad))
    x = x.view(batch, nchunks, chunk_size, nheads, hdim)  # (b, c, s, h, p)
    B = F.pad(B.to(cdt), (0, 0, 0, 0, 0, pad)).view(batch, nchunks, chunk_size, ngroups, dstate)
    B = B.repeat_interleave(nheads // ngroups, dim=3)  # (b, c, s, h, n)
    dA_cumsum, dt = dA_cumsum.to(cdt), dt.to(cdt)
    decay_states = torch.exp(dA_cumsum[..., -1:] - dA_cumsum)  # (b, h, c, s)
    return torch.einsum("bcshn,bhcs,bcshp->bchpn", B, decay_states * dt, x)


def state_passing_ref(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference for ``state_passing`` (Triton kernel: ``recemb.kernels.ssd.state_passing``).

    Arguments:
        states: (batch, nchunks, nheads, headdim, dstate) each chunk's own final state (from chunk_state)
        dA_chunk_cumsum: (batch, nheads, nchunks) log-decay of each whole chunk (dA_cumsum[..., -1])
        initial_states: (batch, nheads, headdim, dstate) or None
    Return:
        out: (batch, nchunks, nheads, headdim, dstate) fp32 (fp64 for fp64 input), the state entering a chunk
        final_states: (batch, nheads, headdim, dstate) fp32 (fp64 for fp64 input)
    """
    cdt = torch.promote_types(states.dtype, torch.float32)
    states, dA_chunk_cumsum = states.to(cdt), dA_chunk_cumsum.to(cdt)
    if initial_states is None:
        initial_states = torch.zeros_like(states[:, 0])
    states = torch.cat([initial_states.to(cdt)[:, None], states], dim=1)  # (b, c+1, h, p, n)
    # Closed form (Listing 1, step 3): out[z] = sum_{c <= z} exp(sum(dA[c:z])) * states[c].
    dA = torch.nn.functional.pad(dA_chunk_cumsum, (1, 0))  # (b, h, c+1)
    cs = torch.cumsum(dA, dim=-1)  # (b, h, c+1)
    seg = cs[..., :, None] - cs[..., None, :]  # (b, h, z, c)
    causal = torch.ones(seg.shape[-2:], dtype=torch.bool, device=states.device).tril()
    decay_chunk = torch.exp(seg.masked_fill(~causal, float("-inf")))  # (b, h, z, c)
    new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)  # (b, c+1, h, p, n)
    return new_states[:, :-1], new_states[:, -1]


def bmm_chunk_ref(a: torch.Tensor, b: torch.Tensor, chunk_size: int, causal: bool = False) -> torch.Tensor:
    """Reference for ``bmm_chunk`` (Triton kernel: ``recemb.kernels.ssd.bmm``).

    Arguments:
        a: (batch, seqlen, ngroups, k)   C for the scan
        b: (batch, seqlen, ngroups, k)   B for the scan
        causal: zero the strictly upper triangle (j > i)
    Return:
        out: (batch, nchunks, ngroups, chunk_size, chunk_size) fp32 (fp64 for fp64 input)
    """
    batch, seqlen, ngroups, k = a.shape
    nchunks = -(-seqlen // chunk_size)  # ceil(l / q)
    cdt = torch.promote_types(torch.promote_types(a.dtype, b.dtype), torch.float32)
    pad = nchunks * chunk_size - seqlen

    def chunks(t: torch.Tensor) -> torch.Tensor:  # (b, l, g, k) -> (b, c, g, q, k)
        t = F.pad(t.to(cdt), (0, 0, 0, 0, 0, pad))
        return t.view(batch, nchunks, chunk_size, ngroups, k).transpose(2, 3)

    out = chunks(a) @ chunks(b).transpose(-1, -2)  # (b, c, g, q, q)
    if causal:
        out = out.tril()
    return out


def chunk_scan_ref(
    CB: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    C: torch.Tensor,
    states: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Reference for ``chunk_scan`` (Triton kernel: ``recemb.kernels.ssd.chunk_scan``).

    Arguments:
        CB: (batch, nchunks, ngroups, chunk_size, chunk_size) C·Bᵀ per chunk (only j <= i is read)
        x: (batch, seqlen, nheads, headdim)
        dt: (batch, nheads, nchunks, chunk_size) effective steps
        dA_cumsum: (batch, nheads, nchunks, chunk_size)
        C: (batch, seqlen, ngroups, dstate)
        states: (batch, nchunks, nheads, headdim, dstate) the state entering each chunk
        D: (nheads,) or None
        z: (batch, seqlen, nheads, headdim) or None
    Return:
        out: (batch, seqlen, nheads, headdim) in out_dtype (default x.dtype)
    """
    batch, seqlen, nheads, hdim = x.shape
    _, nchunks, ngroups, chunk_size, _ = CB.shape
    dstate = C.shape[-1]
    heads_per_group = nheads // ngroups
    cdt = torch.promote_types(x.dtype, torch.float32)
    pad = nchunks * chunk_size - seqlen
    x_raw = x.to(cdt)
    xc = F.pad(x_raw, (0, 0, 0, 0, 0, pad)).view(batch, nchunks, chunk_size, nheads, hdim)  # (b, c, j, h, p)
    Cc = F.pad(C.to(cdt), (0, 0, 0, 0, 0, pad)).view(batch, nchunks, chunk_size, ngroups, dstate)
    Cc = Cc.repeat_interleave(heads_per_group, dim=3)  # (b, c, i, h, n)
    CBh = CB.to(cdt).repeat_interleave(heads_per_group, dim=2)  # (b, c, h, i, j)
    dA_cumsum, dt = dA_cumsum.to(cdt).transpose(1, 2), dt.to(cdt).transpose(1, 2)  # (b, c, h, q)

    # 1. Intra-chunk (diagonal blocks).
    causal = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=x.device).tril()
    seg = dA_cumsum[..., :, None] - dA_cumsum[..., None, :]  # (b, c, h, i, j)
    seg = seg.masked_fill(~causal, float("-inf"))
    M = CBh * torch.exp(seg) * dt[..., None, :]  # (b, c, h, i, j)
    y = torch.einsum("bchij,bcjhp->bcihp", M, xc)  # (b, c, i, h, p)
    # 4. State entering the chunk -> outputs.
    y_off = torch.einsum("bcihn,bchpn->bcihp", Cc, states.to(cdt))  # (b, c, i, h, p)
    y = y + y_off * torch.exp(dA_cumsum).transpose(2, 3)[..., None]
    y = y.reshape(batch, nchunks * chunk_size, nheads, hdim)[:, :seqlen]  # (b, l, h, p)
    if D is not None:
        y = y + D.to(cdt)[:, None] * x_raw
    if z is not None:
        y = y * F.silu(z.to(cdt))
    return y.to(out_dtype or x.dtype)
