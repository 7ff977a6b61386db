"""``ssd_chunk_scan``: the chunked SSD scan with carried state, behind one backend switch.

The torch backend is the chunked matmul form (Listing 1 of Dao & Gu 2024), vectorised over chunks and written
for CPU speed: C·Bᵀ is computed once per group rather than per head, the intra-chunk decay uses the cumsum
difference (as mamba_ssm's kernels do), and the inter-chunk recurrence is an explicit loop over chunks, so the
carried state is visible exactly as it is between vertical chunks. Shapes: see ``recemb.kernels.ssd.naive``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from recemb.kernels._backend import resolve_backend
from recemb.kernels.ssd.naive import prepare_dt


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked SSD with ``dt`` already effective (bias, softplus and limit applied).

    Computes in fp32, or fp64 when x is fp64 (so tests can compare against the fp64 loop at full precision).
    Return: y (b, l, h, p), final_states (b, h, p, n), both in the compute dtype.
    """
    b, l, h, p = x.shape
    g, n = B.shape[2:]
    k = h // g  # heads per group
    q = min(chunk_size, l)  # a shorter chunk changes nothing but rounding, and avoids padding tiny inputs
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
    # X = x·dt, the input of the discretised recurrence, in the (b, c, g, k, s, p) layout the matmuls below read.
    x_view = xp.view(b, c, q, g, k, p).permute(0, 1, 3, 4, 2, 5)
    dt_view = dtp.view(b, c, q, g, k, 1).permute(0, 1, 3, 4, 2, 5)
    if grad:
        Xc = x_view * dt_view
    else:  # written straight into that layout: the matmuls would otherwise copy the strided product
        Xc = torch.mul(x_view, dt_view, out=x.new_empty(b, c, g, k, q, p))
    Bc = Bp.view(b, c, q, g, n).transpose(2, 3)  # (b, c, g, s, n)
    Cc = Cp.view(b, c, q, g, n).transpose(2, 3)  # (b, c, g, q, n)
    dA_cs = torch.cumsum(dtp.view(b, c, q, g, k) * A.view(g, k), dim=2).permute(0, 1, 3, 4, 2)  # (b, c, g, k, q)

    # 1. Intra-chunk (diagonal blocks): y_q = sum_{s<=q} (C_q·B_s) exp(cs_q - cs_s) X_s.
    CB = (Cc @ Bc.transpose(-1, -2))[:, :, :, None]  # (b, c, g, 1, q, s): once per group, not per head
    causal = torch.ones(q, q, dtype=torch.bool, device=x.device).tril()
    M = (dA_cs[..., :, None] - dA_cs[..., None, :]).masked_fill_(~causal, float("-inf"))  # (b, c, g, k, q, s)
    M = M.exp_()
    # In place saves a (b, c, g, k, q, s) buffer at inference; autograd needs exp's output intact for backward.
    M = M * CB if torch.is_grad_enabled() else M.mul_(CB)
    y = M @ Xc  # (b, c, g, k, q, p)
    del M, CB

    # 2. Each chunk's own contribution to the state at its end, from a zero state, in (n, k·p) layout so that
    #    one matmul per group covers all its heads: states[n, (k p)] = sum_s B[s, n] exp(cs_end - cs_s) X[s, k, p].
    w = torch.exp(dA_cs[..., -1:] - dA_cs)  # (b, c, g, k, s)
    if grad:
        Xw = (Xc * w[..., None]).permute(0, 1, 2, 4, 3, 5).reshape(b, c, g, q, k * p)  # (b, c, g, s, k·p)
    else:  # one pass into the (s, k·p) layout instead of a product and then a copy
        Xw = torch.mul(Xc.permute(0, 1, 2, 4, 3, 5), w.permute(0, 1, 2, 4, 3)[..., None],
                       out=x.new_empty(b, c, g, q, k, p)).view(b, c, g, q, k * p)
    chunk_states = Bc.transpose(-1, -2) @ Xw  # (b, c, g, n, k·p)

    # 3. Inter-chunk recurrence: the state entering each chunk (the same carry as between vertical chunks).
    chunk_decay = torch.exp(dA_cs[..., -1])  # (b, c, g, k)
    chunk_decay = chunk_decay[..., None].expand(b, c, g, k, p).reshape(b, c, g, 1, k * p)
    if initial_states is not None:
        state = initial_states.to(cdt).view(b, g, k, p, n).permute(0, 1, 4, 2, 3).reshape(b, g, n, k * p)
    else:
        state = x.new_zeros(b, g, n, k * p)
    if grad:
        entering = []
        # unbind, not [:, ci]: under autograd each indexing op's backward would write a full-size zero gradient.
        for decay_ci, states_ci in zip(chunk_decay.unbind(1), chunk_states.unbind(1)):
            entering.append(state)
            state = decay_ci * state + states_ci
        S = torch.stack(entering, dim=1)  # (b, c, g, n, k·p)
    else:  # write each entering state straight into S: no list of states and no stack copy
        S = state.new_empty(b, c, g, n, k * p)
        S[:, 0] = state
        for ci in range(c - 1):
            torch.addcmul(chunk_states[:, ci], chunk_decay[:, ci], S[:, ci], out=S[:, ci + 1])
        state = torch.addcmul(chunk_states[:, -1], chunk_decay[:, -1], S[:, -1])
    final_states = state.view(b, g, n, k, p).permute(0, 1, 3, 4, 2).reshape(b, h, p, n)

    # 4. State -> output: y_q += exp(cs_q) C_q · state_entering.
    if initial_states is not None or c > 1:
        y_off = (Cc @ S).view(b, c, g, q, k, p).transpose(3, 4)  # (b, c, g, k, q, p)
        decay_in = torch.exp(dA_cs)[..., None]
        y = y + y_off * decay_in if grad else y.addcmul_(y_off, decay_in)
    del S

    y = y.permute(0, 1, 4, 2, 3, 5).reshape(b, c * q, h, p)[:, :l]  # (b, l, h, p)
    if D is not None:
        y = torch.addcmul(y, D.to(cdt)[:, None], x)
    if z is not None:
        y = y * F.silu(z.to(cdt))
    return y, final_states


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
        y, final_states = ssd_chunk_scan_torch(x, dt_eff, A, B, C, chunk_size, D=D, z=z, initial_states=initial_states)
    y = y.to(out_dtype)
    return (y, final_states) if return_final_states else y


def ssd_chunk_scan_ref(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, dt_softplus=False,
                       dt_limit=(0.0, float("inf")), initial_states=None):
    """Reference for ``ssd_chunk_scan``: the token loop of ``naive.ssd_naive_recurrent`` in fp64.

    ``chunk_size`` is accepted for a matching signature and has no effect on the result.
    """
    from recemb.kernels.ssd.naive import ssd_naive_recurrent

    return ssd_naive_recurrent(x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
                               dt_limit=dt_limit, initial_states=initial_states)
