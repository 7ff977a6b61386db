"""SSD stage 1: the state each chunk produces on its own, starting from a zero state.

    states[b, c, h, p, n] = sum_s exp(dA_cumsum[b, h, c, -1] - dA_cumsum[b, h, c, s]) * dt[b, h, c, s]
                                  * x[b, c*Q + s, h, p] * B[b, c*Q + s, g(h), n]

i.e. one (p, s) x (s, n) matmul per (batch, chunk, head) with the source positions s weighted by their decay
to the end of the chunk. Step 2 of Listing 1 in Dao & Gu 2024; follows mamba_ssm's ``_chunk_state_fwd``
(``mamba_ssm/ops/triton/ssd_chunk_state.py``).

Reference: ``recemb.kernels.ssd.reference.chunk_state_ref`` (pure torch; its module has the shape glossary).
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
    dot_config,
    matmul_configs,
)

__all__ = ["chunk_state"]

_CONFIGS = matmul_configs(
    [  # (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, num_stages, num_warps)
        (128, 256, 64, 3, 8),
        (64, 256, 32, 4, 4),
        (128, 128, 32, 4, 4),
        (128, 64, 32, 4, 4),
        (64, 128, 32, 4, 4),
        (64, 64, 32, 4, 2),
        (32, 64, 32, 5, 2),
    ]
)


@triton.autotune(configs=_CONFIGS, key=["hdim", "dstate", "chunk_size"])
@triton.jit
def _chunk_state_fwd_kernel(
    # Pointers
    x_ptr,
    B_ptr,
    states_ptr,
    dt_ptr,
    dA_cumsum_ptr,
    # Dimensions
    hdim,
    dstate,
    chunk_size,
    seqlen,
    nchunks,
    nheads_ngroups_ratio,
    # Strides
    stride_x_batch,
    stride_x_seqlen,
    stride_x_head,
    stride_x_hdim,
    stride_B_batch,
    stride_B_seqlen,
    stride_B_group,
    stride_B_dstate,
    stride_states_batch,
    stride_states_chunk,
    stride_states_head,
    stride_states_hdim,
    stride_states_dstate,
    stride_dt_batch,
    stride_dt_head,
    stride_dt_chunk,
    stride_dt_csize,
    stride_dA_cs_batch,
    stride_dA_cs_head,
    stride_dA_cs_chunk,
    stride_dA_cs_csize,
    # Meta-parameters
    DOT_DTYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
):
    # Tile (pid_m, pid_n) of the (hdim, dstate) state of chunk pid_c, head pid_h.
    pid_mn = tl.program_id(0)
    pid_bc = tl.program_id(1).to(tl.int64)
    pid_h = tl.program_id(2)
    pid_b = pid_bc // nchunks
    pid_c = pid_bc - pid_b * nchunks
    num_pid_n = tl.cdiv(dstate, BLOCK_SIZE_N)
    pid_m = pid_mn // num_pid_n
    pid_n = pid_mn % num_pid_n
    pid_g = pid_h // nheads_ngroups_ratio

    chunk_start = pid_c * chunk_size
    x_ptr += pid_b * stride_x_batch + chunk_start * stride_x_seqlen + pid_h * stride_x_head
    B_ptr += pid_b * stride_B_batch + chunk_start * stride_B_seqlen + pid_g * stride_B_group
    dt_ptr += pid_b * stride_dt_batch + pid_c * stride_dt_chunk + pid_h * stride_dt_head
    dA_cumsum_ptr += pid_b * stride_dA_cs_batch + pid_c * stride_dA_cs_chunk + pid_h * stride_dA_cs_head

    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)  # (BLOCK_SIZE_M,) along hdim
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)  # (BLOCK_SIZE_N,) along dstate
    offs_k = tl.arange(0, BLOCK_SIZE_K)  # (BLOCK_SIZE_K,) source positions in the chunk
    mask_m = offs_m < hdim
    mask_n = offs_n < dstate
    chunk_size_limit = tl.minimum(chunk_size, seqlen - chunk_start)
    dA_cs_last = tl.load(dA_cumsum_ptr + (chunk_size - 1) * stride_dA_cs_csize).to(tl.float32)

    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, chunk_size_limit, BLOCK_SIZE_K):
        offs_s = k + offs_k
        mask_s = offs_s < chunk_size_limit
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_x_hdim + offs_s[None, :] * stride_x_seqlen,
            mask=mask_m[:, None] & mask_s[None, :],
            other=0.0,
        )  # (p, s)
        b = tl.load(
            B_ptr + offs_s[:, None] * stride_B_seqlen + offs_n[None, :] * stride_B_dstate,
            mask=mask_s[:, None] & mask_n[None, :],
            other=0.0,
        )  # (s, n)
        dA_cs_s = tl.load(dA_cumsum_ptr + offs_s * stride_dA_cs_csize, mask=mask_s, other=0.0).to(tl.float32)
        dt_s = tl.load(dt_ptr + offs_s * stride_dt_csize, mask=mask_s, other=0.0).to(tl.float32)
        scale = tl.exp(dA_cs_last - dA_cs_s) * dt_s  # (s,) decay to the chunk end times the step
        b = (b.to(tl.float32) * scale[:, None]).to(DOT_DTYPE)
        acc += tl.dot(x.to(DOT_DTYPE), b, input_precision=DOT_PRECISION)  # (p, n)

    states_ptr += pid_b * stride_states_batch + pid_c * stride_states_chunk + pid_h * stride_states_head
    tl.store(
        states_ptr + offs_m[:, None] * stride_states_hdim + offs_n[None, :] * stride_states_dstate,
        acc,
        mask=mask_m[:, None] & mask_n[None, :],
    )


def _chunk_state_fwd(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
) -> torch.Tensor:
    batch, seqlen, nheads, hdim = x.shape
    _, _, nchunks, chunk_size = dt.shape
    _, _, ngroups, dstate = B.shape
    assert nheads % ngroups == 0, f"ngroups {ngroups} must divide nheads {nheads}"
    assert B.shape == (batch, seqlen, ngroups, dstate), f"B: {tuple(B.shape)}"
    assert dt.shape == (batch, nheads, nchunks, chunk_size), f"dt: {tuple(dt.shape)}"
    assert dA_cumsum.shape == dt.shape, f"dA_cumsum: {tuple(dA_cumsum.shape)}"
    assert nchunks == cdiv(seqlen, chunk_size)
    check_dtype("x", x)
    check_dtype("B", B)
    check_grid_yz(x, batch_x_nchunks=batch * nchunks, nheads=nheads)
    dot_dtype, dot_precision = dot_config(x.dtype)
    states = torch.empty(
        batch, nchunks, nheads, hdim, dstate, device=x.device, dtype=torch.float32
    )  # (b, c, h, p, n)

    def grid(META):
        return (
            cdiv(hdim, META["BLOCK_SIZE_M"]) * cdiv(dstate, META["BLOCK_SIZE_N"]),
            batch * nchunks,
            nheads,
        )

    with device_guard(x):
        _chunk_state_fwd_kernel[grid](
            x, B, states, dt, dA_cumsum,
            hdim, dstate, chunk_size, seqlen, nchunks, nheads // ngroups,
            x.stride(0), x.stride(1), x.stride(2), x.stride(3),
            B.stride(0), B.stride(1), B.stride(2), B.stride(3),
            states.stride(0), states.stride(1), states.stride(2), states.stride(3), states.stride(4),
            dt.stride(0), dt.stride(1), dt.stride(2), dt.stride(3),
            dA_cumsum.stride(0), dA_cumsum.stride(1), dA_cumsum.stride(2), dA_cumsum.stride(3),
            DOT_DTYPE=dot_dtype,
            DOT_PRECISION=dot_precision,
        )  # fmt: skip
    return states


@compiler_disable
def chunk_state(B: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, dA_cumsum: torch.Tensor) -> torch.Tensor:
    """Triton forward of ``recemb.kernels.ssd.reference.chunk_state_ref``: the same arguments, shapes and result."""
    return _chunk_state_fwd(B, x, dt, dA_cumsum)
