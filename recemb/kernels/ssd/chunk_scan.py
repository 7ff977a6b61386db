"""SSD stage 4: the outputs, from inside the chunk and from the state entering it.

    y[b, c*Q + i, h, p] = sum_{j <= i} CB[b, c, g(h), i, j] * exp(dA_cs[i] - dA_cs[j]) * dt[j]
                                       * x[b, c*Q + j, h, p]
                        + exp(dA_cs[i]) * sum_n C[b, c*Q + i, g(h), n] * states[b, c, h, p, n]
                        + D[h] * x[b, c*Q + i, h, p]
    y *= silu(z)                                                         (optional gate)

(dA_cs and dt of head h and chunk c.) Steps 1 and 4 of Listing 1 in Dao & Gu 2024; follows mamba_ssm's
``_chunk_scan_fwd`` (``mamba_ssm/ops/triton/ssd_chunk_scan.py``).

Reference: ``recemb.kernels.ssd.reference.chunk_scan_ref`` (pure torch; its module has the shape glossary).
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
    next_power_of_2,
)

__all__ = ["chunk_scan"]

_CONFIGS = matmul_configs(
    [  # (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, num_stages, num_warps)
        (128, 256, 32, 3, 8),
        (128, 128, 32, 4, 4),
        (128, 64, 32, 4, 4),
        (64, 128, 32, 4, 4),
        (64, 64, 32, 4, 4),
        (64, 32, 32, 5, 2),
        (32, 32, 32, 5, 2),
    ]
)


@triton.autotune(configs=_CONFIGS, key=["chunk_size", "hdim", "dstate", "HAS_D", "HAS_Z"])
@triton.jit
def _chunk_scan_fwd_kernel(
    # Pointers
    CB_ptr,
    x_ptr,
    z_ptr,
    out_ptr,
    dt_ptr,
    dA_cumsum_ptr,
    C_ptr,
    states_ptr,
    D_ptr,
    # Dimensions
    chunk_size,
    hdim,
    dstate,
    seqlen,
    nchunks,
    nheads_ngroups_ratio,
    # Strides
    stride_CB_batch,
    stride_CB_chunk,
    stride_CB_group,
    stride_CB_csize_m,
    stride_CB_csize_k,
    stride_x_batch,
    stride_x_seqlen,
    stride_x_head,
    stride_x_hdim,
    stride_z_batch,
    stride_z_seqlen,
    stride_z_head,
    stride_z_hdim,
    stride_out_batch,
    stride_out_seqlen,
    stride_out_head,
    stride_out_hdim,
    stride_dt_batch,
    stride_dt_head,
    stride_dt_chunk,
    stride_dt_csize,
    stride_dA_cs_batch,
    stride_dA_cs_head,
    stride_dA_cs_chunk,
    stride_dA_cs_csize,
    stride_C_batch,
    stride_C_seqlen,
    stride_C_group,
    stride_C_dstate,
    stride_states_batch,
    stride_states_chunk,
    stride_states_head,
    stride_states_hdim,
    stride_states_dstate,
    stride_D_head,
    # Meta-parameters
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    BLOCK_SIZE_DSTATE: tl.constexpr,
):
    # Tile (pid_m, pid_n) of the (chunk_size, hdim) output of chunk pid_c, head pid_h.
    pid_mn = tl.program_id(0)
    pid_bc = tl.program_id(1).to(tl.int64)
    pid_h = tl.program_id(2)
    pid_b = pid_bc // nchunks
    pid_c = pid_bc - pid_b * nchunks
    num_pid_n = tl.cdiv(hdim, BLOCK_SIZE_N)
    pid_m = pid_mn // num_pid_n
    pid_n = pid_mn % num_pid_n
    pid_g = pid_h // nheads_ngroups_ratio

    chunk_start = pid_c * chunk_size
    chunk_size_limit = tl.minimum(chunk_size, seqlen - chunk_start)
    if pid_m * BLOCK_SIZE_M >= chunk_size_limit:
        return  # rows entirely in the padded tail of the last chunk: nothing to write

    CB_ptr += pid_b * stride_CB_batch + pid_c * stride_CB_chunk + pid_g * stride_CB_group
    x_ptr += pid_b * stride_x_batch + chunk_start * stride_x_seqlen + pid_h * stride_x_head
    dt_ptr += pid_b * stride_dt_batch + pid_c * stride_dt_chunk + pid_h * stride_dt_head
    dA_cumsum_ptr += pid_b * stride_dA_cs_batch + pid_c * stride_dA_cs_chunk + pid_h * stride_dA_cs_head
    C_ptr += pid_b * stride_C_batch + chunk_start * stride_C_seqlen + pid_g * stride_C_group
    states_ptr += pid_b * stride_states_batch + pid_c * stride_states_chunk + pid_h * stride_states_head

    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)  # (BLOCK_SIZE_M,) target positions i
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)  # (BLOCK_SIZE_N,) along hdim
    mask_m = offs_m < chunk_size_limit
    mask_n = offs_n < hdim
    dA_cs_m = tl.load(dA_cumsum_ptr + offs_m * stride_dA_cs_csize, mask=offs_m < chunk_size, other=0.0).to(
        tl.float32
    )  # (i,)

    # Inter-chunk: exp(dA_cs[i]) * C[i] · state entering the chunk.
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    offs_kd = tl.arange(0, BLOCK_SIZE_DSTATE)
    for k in range(0, dstate, BLOCK_SIZE_DSTATE):
        mask_kd = (k + offs_kd) < dstate
        c = tl.load(
            C_ptr + offs_m[:, None] * stride_C_seqlen + (k + offs_kd)[None, :] * stride_C_dstate,
            mask=mask_m[:, None] & mask_kd[None, :],
            other=0.0,
        )  # (i, n)
        s = tl.load(
            states_ptr + (k + offs_kd)[:, None] * stride_states_dstate + offs_n[None, :] * stride_states_hdim,
            mask=mask_kd[:, None] & mask_n[None, :],
            other=0.0,
        )  # (n, p)
        acc += tl.dot(c.to(DOT_DTYPE), s.to(DOT_DTYPE), input_precision=DOT_PRECISION)  # (i, p)
    acc *= tl.exp(dA_cs_m)[:, None]

    # Intra-chunk: causal (CB ⊙ decay ⊙ dt) @ x over source positions j <= i.
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    k_end = tl.minimum((pid_m + 1) * BLOCK_SIZE_M, chunk_size_limit)
    for k in range(0, k_end, BLOCK_SIZE_K):
        offs_s = k + offs_k  # (j,)
        mask_s = offs_s < k_end
        cb = tl.load(
            CB_ptr + offs_m[:, None] * stride_CB_csize_m + offs_s[None, :] * stride_CB_csize_k,
            mask=mask_m[:, None] & mask_s[None, :],
            other=0.0,
        ).to(tl.float32)  # (i, j)
        dA_cs_s = tl.load(dA_cumsum_ptr + offs_s * stride_dA_cs_csize, mask=mask_s, other=0.0).to(tl.float32)
        dt_s = tl.load(dt_ptr + offs_s * stride_dt_csize, mask=mask_s, other=0.0).to(tl.float32)
        w = cb * tl.exp(dA_cs_m[:, None] - dA_cs_s[None, :]) * dt_s[None, :]  # (i, j)
        # where(), not a product with the mask: exp() above the diagonal may overflow to inf.
        w = tl.where((offs_m[:, None] >= offs_s[None, :]) & mask_s[None, :], w, 0.0)
        xs = tl.load(
            x_ptr + offs_s[:, None] * stride_x_seqlen + offs_n[None, :] * stride_x_hdim,
            mask=mask_s[:, None] & mask_n[None, :],
            other=0.0,
        )  # (j, p)
        acc += tl.dot(w.to(DOT_DTYPE), xs.to(DOT_DTYPE), input_precision=DOT_PRECISION)  # (i, p)

    mask_mn = mask_m[:, None] & mask_n[None, :]
    if HAS_D:
        x_m = tl.load(
            x_ptr + offs_m[:, None] * stride_x_seqlen + offs_n[None, :] * stride_x_hdim,
            mask=mask_mn,
            other=0.0,
        ).to(tl.float32)  # (i, p)
        D = tl.load(D_ptr + pid_h * stride_D_head).to(tl.float32)
        acc += x_m * D
    if HAS_Z:
        z_ptr += pid_b * stride_z_batch + chunk_start * stride_z_seqlen + pid_h * stride_z_head
        z = tl.load(
            z_ptr + offs_m[:, None] * stride_z_seqlen + offs_n[None, :] * stride_z_hdim,
            mask=mask_mn,
            other=0.0,
        ).to(tl.float32)  # (i, p)
        acc *= z * tl.sigmoid(z)

    out_ptr += pid_b * stride_out_batch + chunk_start * stride_out_seqlen + pid_h * stride_out_head
    tl.store(
        out_ptr + offs_m[:, None] * stride_out_seqlen + offs_n[None, :] * stride_out_hdim,
        acc.to(out_ptr.dtype.element_ty),
        mask=mask_mn,
    )


def _chunk_scan_fwd(
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
    batch, seqlen, nheads, hdim = x.shape
    _, _, nchunks, chunk_size = dt.shape
    _, _, ngroups, dstate = C.shape
    assert nheads % ngroups == 0, f"ngroups {ngroups} must divide nheads {nheads}"
    assert C.shape == (batch, seqlen, ngroups, dstate), f"C: {tuple(C.shape)}"
    assert CB.shape == (batch, nchunks, ngroups, chunk_size, chunk_size), f"CB: {tuple(CB.shape)}"
    assert dt.shape == (batch, nheads, nchunks, chunk_size), f"dt: {tuple(dt.shape)}"
    assert dA_cumsum.shape == dt.shape, f"dA_cumsum: {tuple(dA_cumsum.shape)}"
    assert states.shape == (batch, nchunks, nheads, hdim, dstate), f"states: {tuple(states.shape)}"
    assert nchunks == cdiv(seqlen, chunk_size)
    if D is not None:
        assert D.shape == (nheads,), f"D: {tuple(D.shape)}"
    if z is not None:
        assert z.shape == x.shape, f"z: {tuple(z.shape)}"
    check_dtype("x", x)
    check_dtype("C", C)
    check_grid_yz(x, batch_x_nchunks=batch * nchunks, nheads=nheads)
    dot_dtype, dot_precision = dot_config(x.dtype)
    out = torch.empty(
        batch, seqlen, nheads, hdim, device=x.device, dtype=out_dtype or x.dtype
    )  # (b, l, h, p)
    z_strides = (z.stride(0), z.stride(1), z.stride(2), z.stride(3)) if z is not None else (0, 0, 0, 0)

    def grid(META):
        return (
            cdiv(chunk_size, META["BLOCK_SIZE_M"]) * cdiv(hdim, META["BLOCK_SIZE_N"]),
            batch * nchunks,
            nheads,
        )

    with device_guard(x):
        _chunk_scan_fwd_kernel[grid](
            CB, x, z, out, dt, dA_cumsum, C, states, D,
            chunk_size, hdim, dstate, seqlen, nchunks, nheads // ngroups,
            CB.stride(0), CB.stride(1), CB.stride(2), CB.stride(3), CB.stride(4),
            x.stride(0), x.stride(1), x.stride(2), x.stride(3),
            *z_strides,
            out.stride(0), out.stride(1), out.stride(2), out.stride(3),
            dt.stride(0), dt.stride(1), dt.stride(2), dt.stride(3),
            dA_cumsum.stride(0), dA_cumsum.stride(1), dA_cumsum.stride(2), dA_cumsum.stride(3),
            C.stride(0), C.stride(1), C.stride(2), C.stride(3),
            states.stride(0), states.stride(1), states.stride(2), states.stride(3), states.stride(4),
            D.stride(0) if D is not None else 0,
            HAS_D=D is not None,
            HAS_Z=z is not None,
            DOT_DTYPE=dot_dtype,
            DOT_PRECISION=dot_precision,
            BLOCK_SIZE_DSTATE=max(16, min(next_power_of_2(dstate), 64)),
        )  # fmt: skip
    return out


@compiler_disable
def chunk_scan(
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
    """Triton forward of ``recemb.kernels.ssd.reference.chunk_scan_ref``: the same arguments, shapes and result."""
    return _chunk_scan_fwd(CB, x, dt, dA_cumsum, C, states, D, z, out_dtype)
