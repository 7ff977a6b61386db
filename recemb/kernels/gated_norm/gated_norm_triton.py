"""Triton gated RMSNorm per group; reference: ``recemb.kernels.gated_norm.reference.gated_rms_norm_ref``.

For each row and each group of ``group_size`` channels:

    h   = y * silu(z)                                   (fp32; the gate comes before the norm)
    out = weight * (h * rsqrt(mean(h²) + eps)).to(y.dtype)

One program normalises a (BLOCK_SIZE_M rows, one group) tile; the whole group sits in one block, so the mean
is a single in-register reduction. Output dtype: ``promote_types(weight.dtype, y.dtype)`` as in the ref.
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
    is_interpreter,
    next_power_of_2,
    same_device,
)
from recemb.kernels.gated_norm.checks import check_group_size

__all__ = ["gated_rms_norm_triton"]

# Largest group held in one block (fp32 registers spread over the warps); mamba2 groups are <= 8192 channels.
_MAX_BLOCK_SIZE_N = 65536


@triton.jit
def _gated_rms_norm_fwd_kernel(
    # Pointers
    y_ptr,
    z_ptr,
    weight_ptr,
    out_ptr,
    # Dimensions
    nrows,
    group_size,
    eps,
    # Strides
    stride_y_row,
    stride_y_dim,
    stride_z_row,
    stride_z_dim,
    stride_weight_dim,
    stride_out_row,
    stride_out_dim,
    # Meta-parameters
    HAS_Z: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_g = tl.program_id(1)
    row_start = pid_m * BLOCK_SIZE_M
    group_start = pid_g * group_size
    y_ptr += row_start.to(tl.int64) * stride_y_row + group_start * stride_y_dim
    out_ptr += row_start.to(tl.int64) * stride_out_row + group_start * stride_out_dim
    weight_ptr += group_start * stride_weight_dim

    offs_m = tl.arange(0, BLOCK_SIZE_M)  # (BLOCK_SIZE_M,) rows relative to row_start
    offs_n = tl.arange(0, BLOCK_SIZE_N)  # (BLOCK_SIZE_N,) channels of the group
    mask_n = offs_n < group_size
    mask = ((row_start + offs_m) < nrows)[:, None] & mask_n[None, :]

    h = tl.load(
        y_ptr + offs_m[:, None] * stride_y_row + offs_n[None, :] * stride_y_dim, mask=mask, other=0.0
    ).to(tl.float32)  # (m, n)
    if HAS_Z:
        z_ptr += row_start.to(tl.int64) * stride_z_row + group_start * stride_z_dim
        z = tl.load(
            z_ptr + offs_m[:, None] * stride_z_row + offs_n[None, :] * stride_z_dim, mask=mask, other=0.0
        ).to(tl.float32)  # (m, n)
        h *= z * tl.sigmoid(z)
    rstd = tl.rsqrt(tl.sum(h * h, axis=1) / group_size + eps)  # (m,)
    normed = (h * rstd[:, None]).to(y_ptr.dtype.element_ty).to(tl.float32)  # rounded like the reference
    weight = tl.load(weight_ptr + offs_n * stride_weight_dim, mask=mask_n, other=0.0).to(tl.float32)  # (n,)
    tl.store(
        out_ptr + offs_m[:, None] * stride_out_row + offs_n[None, :] * stride_out_dim,
        (normed * weight[None, :]).to(out_ptr.dtype.element_ty),
        mask=mask,
    )


def _gated_rms_norm_fwd(
    y: torch.Tensor,
    z: torch.Tensor | None,
    weight: torch.Tensor,
    group_size: int,
    eps: float = 1e-5,
) -> torch.Tensor:
    *prefix, dim = y.shape
    check_group_size(dim, group_size)
    assert weight.shape == (dim,), f"weight must be ({dim},), got {tuple(weight.shape)}"
    if z is not None:
        assert z.shape == y.shape, f"z must have y's shape {tuple(y.shape)}, got {tuple(z.shape)}"
    check_dtype("y", y)
    same_device(y, z, weight)
    block_size_n = next_power_of_2(group_size)
    if block_size_n > _MAX_BLOCK_SIZE_N:
        raise ValueError(f"group_size {group_size} is larger than the kernel supports ({_MAX_BLOCK_SIZE_N})")
    check_grid_yz(y, ngroups=dim // group_size)
    y2 = y.reshape(-1, dim)  # (rows, d), a view whenever y's prefix dims are collapsible
    z2 = z.reshape(-1, dim) if z is not None else None
    nrows = y2.shape[0]
    out = torch.empty(nrows, dim, device=y.device, dtype=torch.promote_types(weight.dtype, y.dtype))
    # About 8K (GPU) or 64K (interpreter: fewer, larger programs) elements per tile.
    tile = 65536 if is_interpreter() else 8192
    block_size_m = max(1, min(tile // block_size_n, next_power_of_2(max(nrows, 1))))
    num_warps = min(max(block_size_m * block_size_n // 1024, 1), 16)
    grid = (cdiv(nrows, block_size_m), dim // group_size)
    if nrows > 0:
        with device_guard(y):
            _gated_rms_norm_fwd_kernel[grid](
                y2, z2, weight, out,
                nrows, group_size, eps,
                y2.stride(0), y2.stride(1),
                *((z2.stride(0), z2.stride(1)) if z2 is not None else (0, 0)),
                weight.stride(0),
                out.stride(0), out.stride(1),
                HAS_Z=z is not None,
                BLOCK_SIZE_M=block_size_m,
                BLOCK_SIZE_N=block_size_n,
                num_warps=num_warps,
            )  # fmt: skip
    return out.view(*prefix, dim)


@compiler_disable
def gated_rms_norm_triton(
    y: torch.Tensor,
    z: torch.Tensor | None,
    weight: torch.Tensor,
    group_size: int,
    eps: float = 1e-5,
) -> torch.Tensor:
    """
    Arguments:
        y: (..., dim)
        z: (..., dim) or None
        weight: (dim,)
        group_size: channels per normalisation group (dim / ngroups)
    Return:
        out: (..., dim) in promote_types(weight.dtype, y.dtype)
    """
    return _gated_rms_norm_fwd(y, z, weight, group_size, eps)
