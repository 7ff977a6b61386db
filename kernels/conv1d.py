"""Causal depthwise conv1d with a carried state (the short convolution over xBC in a Mamba2 mixer).

Production paths: ``causal_conv1d_torch`` here (the CPU path) and ``causal_conv1d_triton``
(``conv1d_triton.py``, CUDA), behind the dispatcher ``causal_conv1d``. Reference:
``recemb.kernels.reference.causal_conv1d_ref``.

Shapes: x (b, l, d) channels last, as ``in_proj`` produces it; weight (d, k); bias (d,);
conv_state (b, d, k): the last k raw inputs seen, oldest first (transformers' and mamba_ssm's layout; only the
last k-1 columns enter the next convolution).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from recemb.kernels._backend import resolve_backend
from recemb.kernels.workspace import Workspace, scratch


def causal_conv1d_torch(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    conv_state: torch.Tensor | None = None,
    activation: str | None = "silu",
    workspace: Workspace | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch path of ``causal_conv1d`` (CPU production): ``causal_conv1d_ref`` computed for speed; the
    state replaces transformers' zero left padding.

    Arguments:
        x: (b, l, d)
        weight: (d, k)
        bias: (d,) or None
        conv_state: (b, d, k) or None (zeros: the start of a sequence)
        activation: "silu" or None
        workspace: where y is written (buffer "conv"), valid until the next call with that workspace
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
    # Taps as contiguous rows (k, d): a column w[:, j] has stride k, which keeps the elementwise kernels below from
    # vectorising (3x slower per tap on the CPU).
    w = weight.to(cdt).t().contiguous()
    # Shift-and-add over the k taps, y[t] = sum_j w[j] * full[t + j] with full = cat(history, x), read from x and
    # history directly: on the CPU this beats a depthwise F.conv1d on the transposed (b, d, l), and skipping the
    # cat saves a copy of the whole chunk. Tap j looks s = k-1-j tokens back.
    # Taps in order 0..k-1, the order of the cat-based form, so results are unchanged to the bit.
    y = scratch(workspace, "conv", (b, l, d), x, dtype=cdt)
    for j in range(k):
        s = k - 1 - j
        head = min(s, l)  # outputs whose tap j falls in the history
        if j == 0:
            y[:, :head] = history[:, :head].to(cdt) * w[0]
            if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
                y[:, head:] = x[:, : l - head].to(cdt) * w[0]  # out= has no autograd
            else:
                torch.mul(x[:, : l - head].to(cdt), w[0], out=y[:, head:])
        else:
            y[:, :head].addcmul_(history[:, j : j + head], w[j])
            y[:, head:].addcmul_(x[:, : l - head], w[j])
    if bias is not None:
        y += bias.to(cdt)
    if activation == "silu":
        # in place when nothing needs y's pre-activation for backward: no second chunk-sized buffer
        y = F.silu(y, inplace=not y.requires_grad)
    elif activation is not None:
        raise ValueError(f"unsupported activation {activation!r}")
    # The new state is the last k inputs of cat(conv_state, x).
    if l >= k:
        tail = x[:, -k:]
    else:
        past = x.new_zeros(b, k, d) if conv_state is None else conv_state.transpose(1, 2).to(x.dtype)
        tail = torch.cat([past[:, l:], x], dim=1)  # (b, k, d)
    # Always a copy: x may be a workspace buffer that the next call overwrites.
    new_state = tail.transpose(1, 2).clone(memory_format=torch.contiguous_format)
    return y.to(x.dtype), new_state


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    conv_state: torch.Tensor | None = None,
    activation: str | None = "silu",
    backend: str = "auto",
    workspace: Workspace | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal depthwise conv1d with carried state; see ``causal_conv1d_torch`` for shapes (``workspace``:
    torch backend only)."""
    if resolve_backend(backend, x.device) == "triton":
        from recemb.kernels.conv1d_triton import causal_conv1d_triton

        return causal_conv1d_triton(x, weight, bias, conv_state, activation)
    return causal_conv1d_torch(x, weight, bias, conv_state, activation, workspace=workspace)
