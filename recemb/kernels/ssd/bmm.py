"""SSD stage 3: ``CB = C·Bᵀ`` inside each chunk, once per group (heads of a group share it).

    out[b, c, g, i, j] = sum_n a[b, c*Q + i, g, n] * b[b, c*Q + j, g, n]      (a = C, b = B for the scan)

Positions past the end of the sequence read as zeros, so the padded rows and columns of the last chunk are 0.
With ``causal=True`` the strictly upper triangle (j > i, which the scan never reads) is 0 and its tiles cost
no matmul. Follows mamba_ssm's ``_bmm_chunk_fwd`` (``mamba_ssm/ops/triton/ssd_bmm.py``).

Reference: ``recemb.kernels.ssd.reference.bmm_chunk_ref`` (pure torch; its module has the shape glossary).
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

__all__ = ["bmm_chunk"]

_CONFIGS = matmul_configs(
    [  # (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, num_stages, num_warps)
        (128, 256, 64, 3, 8),
        (128, 128, 32, 4, 4),
        (128, 64, 32, 4, 4),
        (64, 128, 32, 4, 4),
        (64, 64, 32, 4, 2),
        (32, 64, 32, 5, 2),
        (64, 32, 32, 5, 2),
    ]
)


@triton.autotune(configs=_CONFIGS, key=["chunk_size", "K", "IS_CAUSAL"])
@triton.jit
def _bmm_chunk_fwd_kernel(
    # Pointers
    a_ptr,
    b_ptr,
    out_ptr,
    # Dimensions
    seqlen,
    chunk_size,
    K,
    nchunks,
    # Strides
    stride_a_batch,
    stride_a_seqlen,
    stride_a_group,
    stride_a_k,
    stride_b_batch,
    stride_b_seqlen,
    stride_b_group,
    stride_b_k,
    stride_out_batch,
    stride_out_chunk,
    stride_out_group,
    stride_out_m,
    stride_out_n,
    # Meta-parameters
    IS_CAUSAL: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
):
    # Tile (pid_m, pid_n) of the (chunk_size, chunk_size) matrix of chunk pid_c, group pid_g.
    pid_mn = tl.program_id(0)
    pid_bc = tl.program_id(1).to(tl.int64)
    pid_g = tl.program_id(2)
    pid_b = pid_bc // nchunks
    pid_c = pid_bc - pid_b * nchunks
    num_pid_n = tl.cdiv(chunk_size, BLOCK_SIZE_N)
    pid_m = pid_mn // num_pid_n
    pid_n = pid_mn % num_pid_n

    chunk_start = pid_c * chunk_size
    a_ptr += pid_b * stride_a_batch + chunk_start * stride_a_seqlen + pid_g * stride_a_group
    b_ptr += pid_b * stride_b_batch + chunk_start * stride_b_seqlen + pid_g * stride_b_group

    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)  # (BLOCK_SIZE_M,) target positions i
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)  # (BLOCK_SIZE_N,) source positions j
    offs_k = tl.arange(0, BLOCK_SIZE_K)  # (BLOCK_SIZE_K,) along dstate
    chunk_size_limit = tl.minimum(chunk_size, seqlen - chunk_start)
    mask_m = offs_m < chunk_size_limit
    mask_n = offs_n < chunk_size_limit

    k_end = K
    if IS_CAUSAL:  # a tile strictly above the diagonal stores zeros without a matmul
        k_end = tl.where(pid_n * BLOCK_SIZE_N >= (pid_m + 1) * BLOCK_SIZE_M, 0, K)
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, k_end, BLOCK_SIZE_K):
        mask_k = (k + offs_k) < K
        a = tl.load(
            a_ptr + offs_m[:, None] * stride_a_seqlen + (k + offs_k)[None, :] * stride_a_k,
            mask=mask_m[:, None] & mask_k[None, :],
            other=0.0,
        )  # (i, k)
        b = tl.load(
            b_ptr + (k + offs_k)[:, None] * stride_b_k + offs_n[None, :] * stride_b_seqlen,
            mask=mask_k[:, None] & mask_n[None, :],
            other=0.0,
        )  # (k, j)
        acc += tl.dot(a.to(DOT_DTYPE), b.to(DOT_DTYPE), input_precision=DOT_PRECISION)  # (i, j)
    if IS_CAUSAL:
        acc = tl.where(offs_m[:, None] >= offs_n[None, :], acc, 0.0)

    out_ptr += pid_b * stride_out_batch + pid_c * stride_out_chunk + pid_g * stride_out_group
    tl.store(
        out_ptr + offs_m[:, None] * stride_out_m + offs_n[None, :] * stride_out_n,
        acc,
        mask=(offs_m[:, None] < chunk_size) & (offs_n[None, :] < chunk_size),
    )


def _bmm_chunk_fwd(a: torch.Tensor, b: torch.Tensor, chunk_size: int, causal: bool = False) -> torch.Tensor:
    batch, seqlen, ngroups, k = a.shape
    assert b.shape == a.shape, f"a {tuple(a.shape)} and b {tuple(b.shape)} must have the same shape"
    assert chunk_size >= 1 and seqlen >= 1
    check_dtype("a", a)
    check_dtype("b", b)
    dot_dtype, dot_precision = dot_config(a.dtype if a.dtype == b.dtype else torch.float32)
    nchunks = cdiv(seqlen, chunk_size)
    check_grid_yz(a, batch_x_nchunks=batch * nchunks, ngroups=ngroups)
    out = torch.empty(
        batch, nchunks, ngroups, chunk_size, chunk_size, device=a.device, dtype=torch.float32
    )  # (b, c, g, q, q)

    def grid(META):
        return (
            cdiv(chunk_size, META["BLOCK_SIZE_M"]) * cdiv(chunk_size, META["BLOCK_SIZE_N"]),
            batch * nchunks,
            ngroups,
        )

    with device_guard(a):
        _bmm_chunk_fwd_kernel[grid](
            a, b, out,
            seqlen, chunk_size, k, nchunks,
            a.stride(0), a.stride(1), a.stride(2), a.stride(3),
            b.stride(0), b.stride(1), b.stride(2), b.stride(3),
            out.stride(0), out.stride(1), out.stride(2), out.stride(3), out.stride(4),
            IS_CAUSAL=causal,
            DOT_DTYPE=dot_dtype,
            DOT_PRECISION=dot_precision,
        )  # fmt: skip
    return out


@compiler_disable
def bmm_chunk(a: torch.Tensor, b: torch.Tensor, chunk_size: int, causal: bool = False) -> torch.Tensor:
    """Triton forward of ``recemb.kernels.ssd.reference.bmm_chunk_ref``: the same arguments, shapes and result."""
    return _bmm_chunk_fwd(a, b, chunk_size, causal)
