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
    xt = x.transpose(1, 2).to(weight.dtype)  # (b, d, l)
    if conv_state is None:
        history = xt.new_zeros(b, d, k)
    else:
        history = conv_state.to(weight.dtype)
    full = torch.cat([history, xt], dim=-1)  # (b, d, k + l)
    y = F.conv1d(full[:, :, 1:], weight[:, None, :], bias, groups=d)  # (b, d, l)
    if activation == "silu":
        y = F.silu(y)
    elif activation is not None:
        raise ValueError(f"unsupported activation {activation!r}")
    new_state = full[:, :, -k:].to(conv_state.dtype if conv_state is not None else x.dtype)
    return y.transpose(1, 2).to(x.dtype), new_state


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
