"""Causal depthwise conv1d with a carried state (the short convolution over xBC in a Mamba2 mixer).

Shapes: x (b, l, d) channels last, as ``in_proj`` produces it; weight (d, k); bias (d,);
conv_state (b, d, k): the last k raw inputs seen, oldest first (transformers' and mamba_ssm's layout; only the
last k-1 columns enter the next convolution).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from recemb.kernels._backend import resolve_backend


def causal_conv1d_ref(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    conv_state: torch.Tensor | None = None,
    activation: str | None = "silu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pure-torch causal depthwise convolution; the state replaces transformers' zero left padding.

    Arguments:
        x: (b, l, d)
        weight: (d, k)
        bias: (d,) or None
        conv_state: (b, d, k) or None (zeros: the start of a sequence)
        activation: "silu" or None
    Return:
        y: (b, l, d) in x.dtype
        new_conv_state: (b, d, k), the last k inputs of cat(conv_state, x)
    """
    b, l, d = x.shape
    k = weight.shape[-1]
    if conv_state is None:
        history = x.new_zeros(b, k - 1, d)
    else:
        history = conv_state[:, :, 1:].transpose(1, 2).to(x.dtype)  # (b, k-1, d)
    cdt = torch.promote_types(x.dtype, torch.float32)  # accumulate the taps in fp32 (fp64 for fp64 input)
    full = torch.cat([history, x], dim=1)  # (b, k-1+l, d), channels stay contiguous
    w = weight.to(cdt)
    # Shift-and-add over the k taps: on the CPU this beats a depthwise F.conv1d on the transposed (b, d, l).
    y = full[:, 0:l].to(cdt) * w[:, 0]
    for j in range(1, k):
        y.addcmul_(full[:, j : j + l], w[:, j])
    if bias is not None:
        y += bias.to(cdt)
    if activation == "silu":
        y = F.silu(y)
    elif activation is not None:
        raise ValueError(f"unsupported activation {activation!r}")
    if conv_state is None:
        new_state = full[:, -k:].transpose(1, 2)  # full holds k-1 zeros + l >= 1 inputs
    else:
        new_state = torch.cat([conv_state[:, :, :1].to(x.dtype), full.transpose(1, 2)], dim=-1)[:, :, -k:]
    return y.to(x.dtype), new_state.contiguous()


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    conv_state: torch.Tensor | None = None,
    activation: str | None = "silu",
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal depthwise conv1d with carried state; see ``causal_conv1d_ref`` for shapes."""
    if resolve_backend(backend, x.device) == "triton":
        from recemb.kernels.conv1d_triton import causal_conv1d_triton

        return causal_conv1d_triton(x, weight, bias, conv_state, activation)
    return causal_conv1d_ref(x, weight, bias, conv_state, activation)
