"""SSD stage 0: effective step sizes and the cumulative log-decay inside each chunk.

    dt_out[b, h, c, q]    = clamp(softplus?(dt[b, c*Q + q, h] + dt_bias[h]), *dt_limit)   (0 past the end)
    dA_cumsum[b, h, c, q] = sum_{s <= q} dt_out[b, h, c, s] * A[h]

Padded positions of the last chunk get ``dt_out = 0``: no decay and no input, so ``dA_cumsum`` stays flat
there and ``dA_cumsum[..., -1]`` is the log-decay of the whole (possibly short) chunk. Follows mamba_ssm's
``_chunk_cumsum_fwd`` (``mamba_ssm/ops/triton/ssd_chunk_state.py``).

Reference: ``recemb.kernels.ssd.reference.chunk_cumsum_ref`` (pure torch; its module has the shape glossary).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from recemb.kernels._triton_utils import (
    cdiv,
    check_dtype,
    check_grid_yz,
    compiler_disable,
    device_guard,
    next_power_of_2,
    pick_configs,
    softplus,
)

__all__ = ["chunk_cumsum"]

_CONFIGS = pick_configs(
    [triton.Config({"BLOCK_SIZE_H": bh}, num_warps=4) for bh in (1, 2, 4, 8, 16, 32)],
    triton.Config({"BLOCK_SIZE_H": 64}),
)


@triton.autotune(configs=_CONFIGS, key=["chunk_size", "nheads"])
@triton.jit
def _chunk_cumsum_fwd_kernel(
    # Pointers
    dt_ptr,
    A_ptr,
    dt_bias_ptr,
    dt_out_ptr,
    dA_cumsum_ptr,
    # Dimensions
    seqlen,
    nheads,
    chunk_size,
    dt_min,
    dt_max,
    # Strides
    stride_dt_batch,
    stride_dt_seqlen,
    stride_dt_head,
    stride_A_head,
    stride_dt_bias_head,
    stride_dt_out_batch,
    stride_dt_out_head,
    stride_dt_out_chunk,
    stride_dt_out_csize,
    stride_dA_cs_batch,
    stride_dA_cs_head,
    stride_dA_cs_chunk,
    stride_dA_cs_csize,
    # Meta-parameters
    HAS_DT_BIAS: tl.constexpr,
    DT_SOFTPLUS: tl.constexpr,
    HAS_DT_LIMIT: tl.constexpr,
    BLOCK_SIZE_H: tl.constexpr,
    BLOCK_SIZE_CHUNK: tl.constexpr,
):
    pid_b = tl.program_id(0).to(tl.int64)
    pid_c = tl.program_id(1).to(tl.int64)
    pid_h = tl.program_id(2)
    chunk_start = pid_c * chunk_size
    dt_ptr += pid_b * stride_dt_batch + chunk_start * stride_dt_seqlen
    dt_out_ptr += pid_b * stride_dt_out_batch + pid_c * stride_dt_out_chunk
    dA_cumsum_ptr += pid_b * stride_dA_cs_batch + pid_c * stride_dA_cs_chunk

    offs_h = pid_h * BLOCK_SIZE_H + tl.arange(0, BLOCK_SIZE_H)  # (BLOCK_SIZE_H,) heads
    offs_q = tl.arange(0, BLOCK_SIZE_CHUNK)  # (BLOCK_SIZE_CHUNK,) positions in the chunk
    chunk_size_limit = tl.minimum(chunk_size, seqlen - chunk_start)
    mask_h = offs_h < nheads
    mask_valid = mask_h[:, None] & (offs_q[None, :] < chunk_size_limit)  # (h, q) real tokens

    dt = tl.load(
        dt_ptr + offs_h[:, None] * stride_dt_head + offs_q[None, :] * stride_dt_seqlen,
        mask=mask_valid,
        other=0.0,
    ).to(tl.float32)  # (h, q)
    if HAS_DT_BIAS:
        dt_bias = tl.load(dt_bias_ptr + offs_h * stride_dt_bias_head, mask=mask_h, other=0.0).to(tl.float32)
        dt += dt_bias[:, None]
    if DT_SOFTPLUS:
        dt = softplus(dt)
    if HAS_DT_LIMIT:
        dt = tl.minimum(tl.maximum(dt, dt_min), dt_max)
    dt = tl.where(mask_valid, dt, 0.0)  # padded tail: no decay, no input
    A = tl.load(A_ptr + offs_h * stride_A_head, mask=mask_h, other=0.0).to(tl.float32)  # (h,)
    dA_cs = tl.cumsum(dt * A[:, None], axis=1)  # (h, q)

    # Every position of the chunk is written, the padded tail included (later stages read dA_cumsum[..., -1]).
    mask_store = mask_h[:, None] & (offs_q[None, :] < chunk_size)
    tl.store(
        dt_out_ptr + offs_h[:, None] * stride_dt_out_head + offs_q[None, :] * stride_dt_out_csize,
        dt,
        mask=mask_store,
    )
    tl.store(
        dA_cumsum_ptr + offs_h[:, None] * stride_dA_cs_head + offs_q[None, :] * stride_dA_cs_csize,
        dA_cs,
        mask=mask_store,
    )


def _chunk_cumsum_fwd(
    dt: torch.Tensor,
    A: torch.Tensor,
    chunk_size: int,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
) -> tuple[torch.Tensor, torch.Tensor]:
    batch, seqlen, nheads = dt.shape
    assert A.shape == (nheads,), f"A must be ({nheads},), got {tuple(A.shape)}"
    if dt_bias is not None:
        assert dt_bias.shape == (nheads,), f"dt_bias must be ({nheads},), got {tuple(dt_bias.shape)}"
    assert chunk_size >= 1 and seqlen >= 1
    check_dtype("dt", dt)
    nchunks = cdiv(seqlen, chunk_size)
    dt_out = torch.empty(
        batch, nheads, nchunks, chunk_size, device=dt.device, dtype=torch.float32
    )  # (b, h, c, q)
    dA_cumsum = torch.empty(batch, nheads, nchunks, chunk_size, device=dt.device, dtype=torch.float32)
    check_grid_yz(dt, nchunks=nchunks)
    dt_min, dt_max = (float(v) for v in dt_limit)
    has_dt_limit = dt_min > 0.0 or dt_max != float("inf")  # the default (0, inf) is skipped, as in prepare_dt

    def grid(META):
        return (batch, nchunks, cdiv(nheads, META["BLOCK_SIZE_H"]))

    with device_guard(dt):
        _chunk_cumsum_fwd_kernel[grid](
            dt, A, dt_bias, dt_out, dA_cumsum,
            seqlen, nheads, chunk_size, dt_min, dt_max,
            dt.stride(0), dt.stride(1), dt.stride(2),
            A.stride(0),
            dt_bias.stride(0) if dt_bias is not None else 0,
            dt_out.stride(0), dt_out.stride(1), dt_out.stride(2), dt_out.stride(3),
            dA_cumsum.stride(0), dA_cumsum.stride(1), dA_cumsum.stride(2), dA_cumsum.stride(3),
            HAS_DT_BIAS=dt_bias is not None,
            DT_SOFTPLUS=dt_softplus,
            HAS_DT_LIMIT=has_dt_limit,
            BLOCK_SIZE_CHUNK=next_power_of_2(chunk_size),
        )  # fmt: skip
    return dA_cumsum, dt_out


@compiler_disable
def chunk_cumsum(
    dt: torch.Tensor,
    A: torch.Tensor,
    chunk_size: int,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton forward of ``recemb.kernels.ssd.reference.chunk_cumsum_ref``: the same arguments, shapes and result."""
    return _chunk_cumsum_fwd(dt, A, chunk_size, dt_bias, dt_softplus, dt_limit)
