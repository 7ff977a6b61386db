"""The pure-torch reference of the causal conv1d: the definition its implementations are tested against.

A ``*_ref`` function is written to be obviously correct, not fast; it never runs in production and imports
only torch (so it works without Triton). Production paths: ``causal_conv1d_torch`` (``conv1d.py``, with the
dispatcher ``causal_conv1d``) and ``causal_conv1d_triton`` (``conv1d_triton.py``).

Shapes: x (b, l, d) channels last; weight (d, k) conv taps; conv_state (b, d, k) the last k raw inputs, oldest
first (only the last k-1 enter the next convolution).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["causal_conv1d_ref"]


def causal_conv1d_ref(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    conv_state: torch.Tensor | None = None,
    activation: str | None = "silu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal depthwise conv1d over cat(history, x), the history being the state (zeros at the start).

    y[t, d] = act(bias[d] + sum_j weight[d, j] * full[t + j, d]),   full = cat(conv_state[:, :, 1:], x)

    Arguments:
        x: (b, l, d)
        weight: (d, k)
        bias: (d,) or None
        conv_state: (b, d, k) or None (zeros: the start of a sequence)
        activation: "silu" or None
    Return:
        y: (b, l, d) in x.dtype, accumulated in fp32 (fp64 for fp64 input)
        new_conv_state: (b, d, k) in x.dtype, the last k inputs of cat(conv_state, x)
    """
    b, l, d = x.shape
    k = weight.shape[-1]
    cdt = torch.promote_types(x.dtype, torch.float32)
    past = x.new_zeros(b, d, k) if conv_state is None else conv_state.to(x.dtype)  # (b, d, k)
    full = torch.cat([past.transpose(1, 2), x], dim=1)  # (b, k + l, d): all inputs so far, oldest first
    new_state = full[:, -k:].transpose(1, 2).contiguous()  # (b, d, k)
    full = full[:, 1:].to(cdt)  # (b, k - 1 + l, d): the oldest state column is outside every window
    w = weight.to(cdt)
    y = sum(full[:, j : j + l] * w[:, j] for j in range(k))  # (b, l, d); tap j reads k-1-j tokens back
    if bias is not None:
        y = y + bias.to(cdt)
    if activation == "silu":
        y = F.silu(y)
    elif activation is not None:
        raise ValueError(f"unsupported activation {activation!r}")
    return y.to(x.dtype), new_state
