"""The SSD scan on our Triton kernels: the five stages of ``recemb.kernels.ssd`` chained in order.

    dt, A ──chunk_cumsum──> dt_out, dA_cumsum                 (b, h, c, q)
    B, x  ──chunk_state───> states                            (b, c, h, p, n)  each chunk from a zero state
    states, initial_states ──state_passing──> states entering each chunk, final_states (b, h, p, n)
    C, B  ──bmm_chunk─────> CB                                (b, c, g, q, q)
    CB, x, C, states, D, z ──chunk_scan──> y                  (b, l, h, p)

Called by ``recemb.kernels.ssd.combined.ssd_chunk_scan(..., backend="triton")``; mirrors mamba_ssm's
``_mamba_chunk_scan_combined_fwd``. Runs on CUDA, or on CPU tensors under ``TRITON_INTERPRET=1`` (tests).
"""

from __future__ import annotations

import torch

from recemb.kernels._triton_utils import compiler_disable, last_dim_contiguous, same_device
from recemb.kernels.ssd.bmm import _bmm_chunk_fwd
from recemb.kernels.ssd.chunk_cumsum import _chunk_cumsum_fwd
from recemb.kernels.ssd.chunk_scan import _chunk_scan_fwd
from recemb.kernels.ssd.chunk_state import _chunk_state_fwd
from recemb.kernels.ssd.state_passing import _state_passing_fwd

__all__ = ["ssd_chunk_scan_triton"]


@compiler_disable
def ssd_chunk_scan_triton(
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
    out_dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked SSD scan with an optional initial state, on the Triton kernels.

    Arguments:
        x: (batch, seqlen, nheads, headdim)          fp32, bf16 or fp16
        dt: (batch, seqlen, nheads) raw steps; the effective step is clamp(softplus?(dt + dt_bias), *dt_limit)
        A: (nheads,)
        B: (batch, seqlen, ngroups, dstate)          cast to x.dtype if it differs
        C: (batch, seqlen, ngroups, dstate)          cast to x.dtype if it differs
        chunk_size: SSD chunk length (any seqlen >= 1 works; the last chunk may be partial)
        D: (nheads,) or None
        z: (batch, seqlen, nheads, headdim) or None; y *= silu(z)
        initial_states: (batch, nheads, headdim, dstate) or None
        out_dtype: dtype of y (fp32 by default, so a later cast to any dtype loses nothing)
    Return:
        y: (batch, seqlen, nheads, headdim) in out_dtype
        final_states: (batch, nheads, headdim, dstate) fp32
    Accumulation is fp32 throughout; the states between stages are fp32.
    """
    batch, seqlen, nheads, hdim = x.shape
    ngroups, dstate = B.shape[2:]
    if seqlen < 1:
        raise ValueError("ssd_chunk_scan_triton needs a sequence length of at least 1")
    if nheads % ngroups != 0:
        raise ValueError(f"ngroups {ngroups} must divide nheads {nheads}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    same_device(x, dt, A, B, C, D, z, dt_bias, initial_states)
    if B.dtype != x.dtype:
        B = B.to(x.dtype)
    if C.dtype != x.dtype:
        C = C.to(x.dtype)
    x, B, C, z = (last_dim_contiguous(t) for t in (x, B, C, z))

    dA_cumsum, dt = _chunk_cumsum_fwd(dt, A, chunk_size, dt_bias, dt_softplus, dt_limit)  # (b, h, c, q)
    states = _chunk_state_fwd(B, x, dt, dA_cumsum)  # (b, c, h, p, n)
    states, final_states = _state_passing_fwd(states, dA_cumsum[:, :, :, -1], initial_states)
    CB = _bmm_chunk_fwd(C, B, chunk_size, causal=True)  # (b, c, g, q, q)
    y = _chunk_scan_fwd(CB, x, dt, dA_cumsum, C, states, D=D, z=z, out_dtype=out_dtype)  # (b, l, h, p)
    return y, final_states
