"""Triton causal depthwise conv1d, carried state; reference: ``recemb.kernels.conv1d.reference.causal_conv1d_ref``.

With ``full = cat(conv_state, xᵀ)`` along time (length k + l, the state's k columns first, oldest first):

    y[b, t, d]          = act(bias[d] + sum_{j < k} weight[d, j] * full[b, d, t + 1 + j])
    new_conv_state[b, d] = full[b, d, l : l + k]           (the last k raw inputs)

Only the last k-1 state columns enter the convolution. One program computes a (BLOCK_SIZE_L, BLOCK_SIZE_D)
tile of y with channels contiguous (x is channels-last, as ``in_proj`` produces it); the programs of the first
time block also write the new state, so the whole op is one launch. Accumulation is fp32.
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
    same_device,
)

__all__ = ["causal_conv1d_triton"]

_CONFIGS = pick_configs(
    [
        triton.Config({"BLOCK_SIZE_L": bl, "BLOCK_SIZE_D": bd}, num_warps=w)
        for bl, bd, w in [(16, 128, 4), (32, 128, 4), (64, 64, 4), (64, 128, 8), (32, 256, 8)]
    ],
    triton.Config({"BLOCK_SIZE_L": 64, "BLOCK_SIZE_D": 128}),
)


@triton.autotune(configs=_CONFIGS, key=["dim", "WIDTH"])
@triton.jit
def _causal_conv1d_fwd_kernel(
    # Pointers
    x_ptr,
    weight_ptr,
    bias_ptr,
    conv_state_ptr,
    y_ptr,
    new_conv_state_ptr,
    # Dimensions
    seqlen,
    dim,
    # Strides
    stride_x_batch,
    stride_x_seqlen,
    stride_x_dim,
    stride_weight_dim,
    stride_weight_width,
    stride_conv_state_batch,
    stride_conv_state_dim,
    stride_conv_state_width,
    stride_y_batch,
    stride_y_seqlen,
    stride_y_dim,
    stride_new_conv_state_batch,
    stride_new_conv_state_dim,
    stride_new_conv_state_width,
    # Meta-parameters
    WIDTH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_CONV_STATE: tl.constexpr,
    SILU_ACTIVATION: tl.constexpr,
    BLOCK_SIZE_WIDTH: tl.constexpr,
    BLOCK_SIZE_L: tl.constexpr,
    BLOCK_SIZE_D: tl.constexpr,
):
    pid_l = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    pid_d = tl.program_id(2)
    l_start = pid_l * BLOCK_SIZE_L
    # Block offsets in int64 (long sequences of wide rows overflow int32); in-block offsets stay int32.
    x_batch_ptr = x_ptr + pid_b * stride_x_batch
    x_ptr = x_batch_ptr + l_start.to(tl.int64) * stride_x_seqlen
    if HAS_CONV_STATE:
        conv_state_ptr += pid_b * stride_conv_state_batch
    y_ptr += pid_b * stride_y_batch + l_start.to(tl.int64) * stride_y_seqlen

    offs_t = tl.arange(0, BLOCK_SIZE_L)  # (BLOCK_SIZE_L,) time steps relative to l_start
    offs_l = l_start + offs_t  # (BLOCK_SIZE_L,) output time steps t
    offs_d = pid_d * BLOCK_SIZE_D + tl.arange(0, BLOCK_SIZE_D)  # (BLOCK_SIZE_D,) channels
    mask_l = offs_l < seqlen
    mask_d = offs_d < dim

    acc = tl.zeros((BLOCK_SIZE_L, BLOCK_SIZE_D), dtype=tl.float32)
    for j in tl.static_range(WIDTH):
        # Tap j reads full[t + 1 + j]: x[t - (WIDTH - 1 - j)] when that is >= 0, else conv_state[t + 1 + j].
        x_idx = offs_l - (WIDTH - 1 - j)  # (l,) index into x
        w = tl.load(weight_ptr + offs_d * stride_weight_dim + j * stride_weight_width, mask=mask_d, other=0.0)
        xv = tl.load(
            x_ptr + (offs_t - (WIDTH - 1 - j))[:, None] * stride_x_seqlen + offs_d[None, :] * stride_x_dim,
            mask=((x_idx >= 0) & mask_l)[:, None] & mask_d[None, :],
            other=0.0,
        ).to(tl.float32)  # (l, d)
        if HAS_CONV_STATE:
            sv = tl.load(
                conv_state_ptr + (x_idx + WIDTH)[:, None] * stride_conv_state_width
                + offs_d[None, :] * stride_conv_state_dim,
                mask=((x_idx < 0) & mask_l)[:, None] & mask_d[None, :],
                other=0.0,
            ).to(tl.float32)  # (l, d)
            xv += sv  # exactly one of the two loads is unmasked
        acc += xv * w.to(tl.float32)[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_d, mask=mask_d, other=0.0).to(tl.float32)[None, :]
    if SILU_ACTIVATION:
        acc = acc * tl.sigmoid(acc)
    tl.store(
        y_ptr + offs_t[:, None] * stride_y_seqlen + offs_d[None, :] * stride_y_dim,
        acc.to(y_ptr.dtype.element_ty),
        mask=mask_l[:, None] & mask_d[None, :],
    )

    if pid_l == 0:
        # new_conv_state[:, m] = full[l + m]: x[l + m - WIDTH] when that is >= 0, else conv_state[l + m].
        offs_w = tl.arange(0, BLOCK_SIZE_WIDTH)  # (BLOCK_SIZE_WIDTH,) state columns m
        mask_w = offs_w < WIDTH
        tail_idx = seqlen - WIDTH + offs_w  # (w,) index into x
        from_x = tail_idx >= 0
        x_tail_ptr = x_batch_ptr + tl.cast(seqlen - WIDTH, tl.int64) * stride_x_seqlen
        state = tl.load(
            x_tail_ptr + offs_w[None, :] * stride_x_seqlen + offs_d[:, None] * stride_x_dim,
            mask=mask_d[:, None] & (from_x & mask_w)[None, :],
            other=0.0,
        ).to(new_conv_state_ptr.dtype.element_ty)  # (d, w)
        if HAS_CONV_STATE:
            old = tl.load(
                conv_state_ptr + (tail_idx + WIDTH)[None, :] * stride_conv_state_width
                + offs_d[:, None] * stride_conv_state_dim,
                mask=mask_d[:, None] & (~from_x & mask_w)[None, :],
                other=0.0,
            ).to(new_conv_state_ptr.dtype.element_ty)  # (d, w)
            state = tl.where(from_x[None, :], state, old)
        new_conv_state_ptr += pid_b * stride_new_conv_state_batch
        tl.store(
            new_conv_state_ptr + offs_d[:, None] * stride_new_conv_state_dim
            + offs_w[None, :] * stride_new_conv_state_width,
            state,
            mask=mask_d[:, None] & mask_w[None, :],
        )


def _causal_conv1d_fwd(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    conv_state: torch.Tensor | None = None,
    activation: str | None = "silu",
) -> tuple[torch.Tensor, torch.Tensor]:
    batch, seqlen, dim = x.shape
    assert weight.dim() == 2 and weight.shape[0] == dim, f"weight must be ({dim}, k): {tuple(weight.shape)}"
    width = weight.shape[1]
    if bias is not None:
        assert bias.shape == (dim,), f"bias must be ({dim},), got {tuple(bias.shape)}"
    if conv_state is not None:
        assert conv_state.shape == (batch, dim, width), (
            f"conv_state must be ({batch}, {dim}, {width}), got {tuple(conv_state.shape)}"
        )
    if activation not in (None, "silu"):
        raise ValueError(f"unsupported activation {activation!r}")
    assert seqlen >= 1
    check_dtype("x", x)
    same_device(x, weight, bias, conv_state)
    check_grid_yz(x, batch=batch, dim_blocks=cdiv(dim, 64))
    y = torch.empty(batch, seqlen, dim, device=x.device, dtype=x.dtype)  # (b, l, d)
    new_conv_state = torch.empty(
        batch, dim, width, device=x.device, dtype=conv_state.dtype if conv_state is not None else x.dtype
    )  # (b, d, k)
    cs_strides = conv_state.stride() if conv_state is not None else (0, 0, 0)

    def grid(META):
        return (cdiv(seqlen, META["BLOCK_SIZE_L"]), batch, cdiv(dim, META["BLOCK_SIZE_D"]))

    with device_guard(x):
        _causal_conv1d_fwd_kernel[grid](
            x, weight, bias, conv_state, y, new_conv_state,
            seqlen, dim,
            x.stride(0), x.stride(1), x.stride(2),
            weight.stride(0), weight.stride(1),
            *cs_strides,
            y.stride(0), y.stride(1), y.stride(2),
            new_conv_state.stride(0), new_conv_state.stride(1), new_conv_state.stride(2),
            WIDTH=width,
            HAS_BIAS=bias is not None,
            HAS_CONV_STATE=conv_state is not None,
            SILU_ACTIVATION=activation == "silu",
            BLOCK_SIZE_WIDTH=next_power_of_2(width),
        )  # fmt: skip
    return y, new_conv_state


@compiler_disable
def causal_conv1d_triton(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    conv_state: torch.Tensor | None = None,
    activation: str | None = "silu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """
    Arguments:
        x: (batch, seqlen, dim) channels last; any strides (unit stride along dim is fastest)
        weight: (dim, width)
        bias: (dim,) or None
        conv_state: (batch, dim, width) the last width raw inputs, oldest first; None means zeros
        activation: "silu" or None
    Return:
        y: (batch, seqlen, dim) in x.dtype
        new_conv_state: (batch, dim, width) in conv_state.dtype (x.dtype when conv_state is None)
    """
    return _causal_conv1d_fwd(x, weight, bias, conv_state, activation)
