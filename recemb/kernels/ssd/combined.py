"""``ssd_chunk_scan``: the chunked SSD scan with carried state, behind one backend switch.

Production paths: ``ssd_chunk_scan_torch`` here (the CPU path) and ``ssd_chunk_scan_triton`` in
``recemb.kernels.ssd.triton_combined`` (CUDA). The torch path is the chunked matmul form (Listing 1 of Dao &
Gu 2024), vectorised over chunks and written for CPU speed: C·Bᵀ is computed once per group rather than per
head, the intra-chunk decay uses the cumsum difference (as mamba_ssm's kernels do), and the inter-chunk
recurrence is an explicit loop over chunks, so the carried state is visible exactly as it is between vertical
chunks.

Reference: ``recemb.kernels.ssd.reference.ssd_chunk_scan_ref`` (the fp64 token loop; its module has the shape
glossary).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from recemb.kernels._backend import resolve_backend
from recemb.kernels.ssd.dt import prepare_dt
from recemb.kernels.workspace import Workspace, scratch

__all__ = ["CHUNK_ALIGN", "ssd_chunk_scan", "ssd_chunk_scan_torch", "torch_scan_chunk_length"]


def _check_shapes(x, dt, A, B, C, D, z, dt_bias, initial_states) -> None:
    if x.dim() != 4:
        raise ValueError(f"x must be (b, l, h, p), got shape {tuple(x.shape)}")
    b, l, h, p = x.shape
    if l < 1:
        raise ValueError("ssd_chunk_scan needs a sequence length of at least 1")
    if B.dim() != 4 or B.shape[:2] != (b, l):
        raise ValueError(f"B must be (b, l, g, n) = ({b}, {l}, g, n), got {tuple(B.shape)}")
    g, n = B.shape[2:]
    if h % g != 0:
        raise ValueError(f"ngroups {g} must divide nheads {h}")
    expected = {
        "dt": (dt, (b, l, h)),
        "A": (A, (h,)),
        "C": (C, (b, l, g, n)),
        "D": (D, (h,)),
        "z": (z, (b, l, h, p)),
        "dt_bias": (dt_bias, (h,)),
        "initial_states": (initial_states, (b, h, p, n)),
    }
    for name, (tensor, shape) in expected.items():
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(tensor.shape)}")


# A short input's chunk length is rounded up to a multiple of this many tokens. Why: the same row must give the
# same bits alone and in a batch, where it is padded to the longest row. With the chunk length taken from each
# call's own length, the matmuls' shapes and which elements fall in the elementwise ops' scalar tails moved with
# the padding, and so did a text's vector (docs/benchmarks.md, "Measured facts the code relies on"). 32 tokens
# make every per-head run of q elements whole vectors of the widest vectorised loop (2 x 16 fp32 lanes).
CHUNK_ALIGN = 32


def torch_scan_chunk_length(l: int, chunk_size: int) -> int:
    """The chunk length q ``ssd_chunk_scan_torch`` runs an input of l tokens with: ``chunk_size``, or for a
    shorter input l rounded up to a multiple of CHUNK_ALIGN (the input is zero-padded to whole chunks of q)."""
    return min(chunk_size, -(-l // CHUNK_ALIGN) * CHUNK_ALIGN)


def ssd_chunk_scan_torch(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    workspace: Workspace | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked SSD with ``dt`` already effective (bias, softplus and limit applied).

    Computes in fp32, or fp64 when x is fp64 (so tests can compare against the fp64 loop at full precision).
    Without autograd it takes ``_ssd_chunk_scan_inference`` (the same arithmetic with fewer buffers and copies, and
    decays below a cutoff set to exact zeros, see _EXP_FLOOR); with a ``workspace`` y is then a view of a workspace
    buffer, valid until the next call with that workspace.
    Return: y (b, l, h, p), final_states (b, h, p, n), both in the compute dtype.
    """
    b, l, h, p = x.shape
    g, n = B.shape[2:]
    k = h // g  # heads per group
    q = torch_scan_chunk_length(l, chunk_size)
    pad = (-l) % q
    c = (l + pad) // q

    cdt = torch.promote_types(x.dtype, torch.float32)  # compute dtype
    x, dt, A, B, C = (t.to(cdt) for t in (x, dt, A, B, C))
    if pad:
        # dt = 0 on the padded tail: no decay and no input, so the final state is the state after token l-1.
        xp = F.pad(x, (0, 0, 0, 0, 0, pad))
        dtp = F.pad(dt, (0, 0, 0, pad))
        Bp = F.pad(B, (0, 0, 0, 0, 0, pad))
        Cp = F.pad(C, (0, 0, 0, 0, 0, pad))
    else:
        xp, dtp, Bp, Cp = x, dt, B, C

    grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (x, dt, A, B, C, D, initial_states))
    if not grad:
        return _ssd_chunk_scan_inference(xp, dtp, A, Bp, Cp, q, l, D, z, initial_states, workspace)

    Xc = (xp.view(b, c, q, g, k, p) * dtp.view(b, c, q, g, k, 1)).permute(0, 1, 3, 4, 2, 5)  # (b, c, g, k, s, p)
    Bc = Bp.view(b, c, q, g, n).transpose(2, 3)  # (b, c, g, s, n)
    Cc = Cp.view(b, c, q, g, n).transpose(2, 3)  # (b, c, g, q, n)
    dA_cs = torch.cumsum(dtp.view(b, c, q, g, k) * A.view(g, k), dim=2).permute(0, 1, 3, 4, 2)  # (b, c, g, k, q)

    # 1. Intra-chunk (diagonal blocks): y_q = sum_{s<=q} (C_q·B_s) exp(cs_q - cs_s) X_s.
    CB = (Cc @ Bc.transpose(-1, -2))[:, :, :, None]  # (b, c, g, 1, q, s): once per group, not per head
    causal = torch.ones(q, q, dtype=torch.bool, device=x.device).tril()
    M = (dA_cs[..., :, None] - dA_cs[..., None, :]).masked_fill_(~causal, float("-inf"))  # (b, c, g, k, q, s)
    y = (M.exp_() * CB) @ Xc  # (b, c, g, k, q, p)

    # 2. Each chunk's own contribution to the state at its end, from a zero state, in (n, k·p) layout so that
    #    one matmul per group covers all its heads: states[n, (k p)] = sum_s B[s, n] exp(cs_end - cs_s) X[s, k, p].
    w = torch.exp(dA_cs[..., -1:] - dA_cs)  # (b, c, g, k, s)
    Xw = (Xc * w[..., None]).permute(0, 1, 2, 4, 3, 5).reshape(b, c, g, q, k * p)  # (b, c, g, s, k·p)
    chunk_states = Bc.transpose(-1, -2) @ Xw  # (b, c, g, n, k·p)

    # 3. Inter-chunk recurrence: the state entering each chunk (the same carry as between vertical chunks).
    chunk_decay = torch.exp(dA_cs[..., -1])  # (b, c, g, k)
    chunk_decay = chunk_decay[..., None].expand(b, c, g, k, p).reshape(b, c, g, 1, k * p)
    if initial_states is not None:
        state = initial_states.to(cdt).view(b, g, k, p, n).permute(0, 1, 4, 2, 3).reshape(b, g, n, k * p)
    else:
        state = x.new_zeros(b, g, n, k * p)
    entering = []
    # unbind, not [:, ci]: under autograd each indexing op's backward would write a full-size zero gradient.
    for decay_ci, states_ci in zip(chunk_decay.unbind(1), chunk_states.unbind(1)):
        entering.append(state)
        state = decay_ci * state + states_ci
    S = torch.stack(entering, dim=1)  # (b, c, g, n, k·p)
    final_states = state.view(b, g, n, k, p).permute(0, 1, 3, 4, 2).reshape(b, h, p, n)

    # 4. State -> output: y_q += exp(cs_q) C_q · state_entering.
    if initial_states is not None or c > 1:
        y_off = (Cc @ S).view(b, c, g, q, k, p).transpose(3, 4)  # (b, c, g, k, q, p)
        y = y + y_off * torch.exp(dA_cs)[..., None]

    y = y.permute(0, 1, 4, 2, 3, 5).reshape(b, c * q, h, p)[:, :l]  # (b, l, h, p)
    if D is not None:
        y = torch.addcmul(y, D.to(cdt)[:, None], x)
    if z is not None:
        y = y * F.silu(z.to(cdt))
    return y, final_states


# Decays on the inference path are cut to exactly 0 below a cutoff, for speed, in two ways (the timings are in
# docs/benchmarks.md, "Measured facts the code relies on"):
# - exp is many times slower for arguments below log(smallest normal) (-87.34 in fp32) than for normal results,
#   with or without flush-to-zero, and fast again for -inf;
# - a tiny decay times an input is a denormal, and the matmuls that read such products run slower: flush-to-zero
#   (encode_vertical) is set on the calling thread only, not on the OpenMP workers that share the work.
# In fp32 the cutoff is 2^-100: such a term is 2^-76 below the chunk's own unit-decay term, beyond fp32's 2^-24
# resolution, and its products with inputs down to 2^-26 stay normal. Results equal the uncut ones to the bit in
# the encoder comparisons of docs/benchmarks.md. fp64 (the precision tests) cuts only what exp cannot represent.
# Per dtype: the clamp floor for exp's argument (its exp lies below the cutoff) and the cutoff.
_EXP_FLOOR = {torch.float32: (-69.4, 2.0**-100), torch.float64: (-708.0, 3.4e-308)}


def _decay_exp_(t: torch.Tensor, upper: float | None = None) -> torch.Tensor:
    """exp of decay exponents in place, with 0 where exp(t) is at or below the cutoff (see _EXP_FLOOR; a dtype
    without an entry gets plain exp, which is how benchmarks/cpu_ablation.py switches the cutoff off).
    ``upper`` clamps large arguments too (entries whose exp is then multiplied by 0: they must stay finite)."""
    floor = _EXP_FLOOR.get(t.dtype)
    if floor is None:
        return t.clamp_(max=upper).exp_() if upper is not None else t.exp_()
    lo, tiny = floor
    return F.threshold_(t.clamp_(min=lo, max=upper).exp_(), tiny, 0.0)


def _decay_exp_rounded(t: torch.Tensor) -> torch.Tensor:
    """``_decay_exp_`` of a copy of t, computed in fp64 and rounded once to t's dtype: for a tensor whose length is
    no multiple of the vector width (one decay per head and chunk), where the vectorised body and the scalar tail
    of an fp32 exp round differently and which elements fall in the tail depends on the batch."""
    floor = _EXP_FLOOR.get(t.dtype)
    if floor is None or t.dtype == torch.float64:
        return _decay_exp_(t.clone())
    lo, tiny = floor
    return F.threshold_(t.double().clamp_(min=lo).exp_().to(t.dtype), tiny, 0.0)


def _ssd_chunk_scan_inference(xp, dtp, A, Bp, Cp, q, l, D, z, initial_states, workspace):
    """The four steps of ``ssd_chunk_scan_torch`` without autograd, on inputs padded to c·q tokens (``l`` real).

    The autograd path's arithmetic in the same order, except that decays at or below the cutoff are exact zeros
    (_decay_exp_; within 1e-6 of the autograd path, tested, and to the bit in the encoder comparisons). Every
    chunk-sized intermediate is written once, straight into the layout its consumer reads, into workspace
    buffers: X = x·dt lands in the matmuls' (b, c, g, k, s, p) layout, the decay matrix is built and scaled in
    place, the recurrence runs in place over the chunk states, and y is written once into (b, l, h, p) with D·x.
    Chunk states are stored chunk-major, H (c + 1, b, g, n, k·p) with H[ci] the state entering chunk ci and H[c]
    the final state, so every matmul reads and writes whole views for any b.
    """
    b, lp, h, p = xp.shape
    g, n = Bp.shape[2:]
    k, c = h // g, lp // q

    def buffer(name, *shape):
        return scratch(workspace, name, shape, xp)

    Xc = torch.mul(xp.view(b, c, q, g, k, p).permute(0, 1, 3, 4, 2, 5),
                   dtp.view(b, c, q, g, k, 1).permute(0, 1, 3, 4, 2, 5), out=buffer("X", b, c, g, k, q, p))
    Bc = Bp.view(b, c, q, g, n).transpose(2, 3)  # (b, c, g, s, n)
    Cc = Cp.view(b, c, q, g, n).transpose(2, 3)  # (b, c, g, q, n)
    # Cumsum along the last dim of a contiguous (b, c, g, k, q): the decay matrix below broadcasts it along q, and
    # a strided q would keep those passes from vectorising. (The CPU cumsum adds in the same order either way.)
    dA = (dtp.view(b, c, q, g, k) * A.view(g, k)).permute(0, 1, 3, 4, 2).contiguous()
    dA_cs = torch.cumsum(dA, dim=-1)  # (b, c, g, k, q)

    # 1. Intra-chunk. Decays go through _decay_exp_ (exact zeros, no slow exp). The causal mask zeroes CB, once
    #    per group, instead of putting -inf into the exponents: above the diagonal the exponents are >= 0 (A < 0),
    #    clamped to stay finite, so their exp times 0 is exactly 0.
    CB = (Cc @ Bc.transpose(-1, -2)).masked_fill_(~torch.ones(q, q, dtype=torch.bool, device=xp.device).tril(), 0.0)
    M = torch.sub(dA_cs[..., :, None], dA_cs[..., None, :], out=buffer("M", b, c, g, k, q, q))
    _decay_exp_(M, upper=80.0).mul_(CB[:, :, :, None])  # (b, c, g, k, q, s)
    y = buffer("y", b, c, g, k, q, p)
    torch.bmm(M.view(-1, q, q), Xc.view(-1, q, p), out=y.view(-1, q, p))

    # 2. Chunk states, written into H[1:] (chunk-major).
    w = _decay_exp_(dA_cs[..., -1:] - dA_cs)  # (b, c, g, k, s)
    Xw = torch.mul(Xc.permute(1, 0, 2, 4, 3, 5), w.permute(1, 0, 2, 4, 3)[..., None],
                   out=buffer("chunk_major", c, b, g, q, k, p))  # (c, b, g, s, k, p)
    H = buffer("H", c + 1, b, g, n, k * p)
    torch.bmm(Bc.permute(1, 0, 2, 4, 3).reshape(c * b * g, n, q), Xw.view(c * b * g, q, k * p),
              out=H[1:].view(c * b * g, n, k * p))

    # 3. Recurrence in place: H[ci + 1] = decay_ci · H[ci] + (chunk ci's own state, already in H[ci + 1]).
    chunk_decay = _decay_exp_rounded(dA_cs[..., -1]).permute(1, 0, 2, 3)  # (c, b, g, k)
    chunk_decay = chunk_decay[..., None].expand(c, b, g, k, p).reshape(c, b, g, 1, k * p)
    if initial_states is not None:
        H[0].view(b, g, n, k, p).copy_(initial_states.view(b, g, k, p, n).permute(0, 1, 4, 2, 3))
    else:
        H[0].zero_()
    for ci in range(c):
        H[ci + 1].addcmul_(chunk_decay[ci], H[ci])
    final_states = xp.new_empty(b, g, k, p, n)  # its own memory: it outlives the workspace's next use
    final_states.copy_(H[c].view(b, g, n, k, p).permute(0, 1, 3, 4, 2))

    # 4. State -> output, into the chunk-major buffer (X·w is no longer needed).
    if initial_states is not None or c > 1:
        y_off = buffer("chunk_major", c, b, g, q, k * p)
        torch.bmm(Cc.permute(1, 0, 2, 3, 4).reshape(c * b * g, q, n), H[:c].view(c * b * g, n, k * p),
                  out=y_off.view(c * b * g, q, k * p))
        y.addcmul_(y_off.view(c, b, g, q, k, p).permute(1, 0, 2, 4, 3, 5), _decay_exp_(dA_cs)[..., None])

    # (b, c, g, k, q, p) -> (b, l, h, p) in one pass with the skip D·x, into X's buffer (X is no longer needed).
    out = buffer("X", b, c * q, h, p)
    y_in_out_layout = y.permute(0, 1, 4, 2, 3, 5)  # (b, c, q, g, k, p)
    if D is not None:
        torch.addcmul(y_in_out_layout, D.to(xp.dtype).view(g, k, 1), xp.view(b, c, q, g, k, p),
                      out=out.view(b, c, q, g, k, p))
    else:
        out.view(b, c, q, g, k, p).copy_(y_in_out_layout)
    out = out[:, :l]
    if z is not None:
        out.mul_(F.silu(z.to(xp.dtype)))
    return out, final_states.view(b, h, p, n)


def ssd_chunk_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    initial_states: torch.Tensor | None = None,
    return_final_states: bool = True,
    backend: str = "auto",
    out_dtype: torch.dtype | None = None,
    workspace: Workspace | None = None,
):
    """Chunked SSD scan with optional initial state; argument conventions follow mamba_ssm's
    ``mamba_chunk_scan_combined``.

    Arguments:
        x: (b, l, h, p)
        dt: (b, l, h) raw steps; the effective step is clamp(softplus?(dt + dt_bias), *dt_limit)
        A: (h,) negative
        B: (b, l, g, n)
        C: (b, l, g, n)
        chunk_size: SSD chunk length q (numerics only)
        D: (h,) skip, applied to x before the dt multiply
        z: (b, l, h, p) gate: y * silu(z)
        initial_states: (b, h, p, n), the state before token 0 (the vertical-chunk carry)
        backend: "auto" | "torch" | "triton"
        out_dtype: dtype of y (default x.dtype); the state is always fp32
        workspace: scratch buffers for the torch backend's inference path (see ``recemb.kernels.workspace``);
            y may then be a view of one, valid until the next call with that workspace
    Return:
        y: (b, l, h, p)
        final_states: (b, h, p, n) fp32 (fp64 for fp64 input), only if return_final_states
    """
    _check_shapes(x, dt, A, B, C, D, z, dt_bias, initial_states)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    out_dtype = out_dtype or x.dtype
    if resolve_backend(backend, x.device) == "triton":
        from recemb.kernels.ssd.triton_combined import ssd_chunk_scan_triton

        y, final_states = ssd_chunk_scan_triton(
            x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
            dt_limit=dt_limit, initial_states=initial_states, out_dtype=out_dtype,
        )
    else:
        dt_eff = prepare_dt(dt, dt_bias, dt_softplus, dt_limit)
        y, final_states = ssd_chunk_scan_torch(x, dt_eff, A, B, C, chunk_size, D=D, z=z,
                                               initial_states=initial_states, workspace=workspace)
    y = y.to(out_dtype)
    return (y, final_states) if return_final_states else y
