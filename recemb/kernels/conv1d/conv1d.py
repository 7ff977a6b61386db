"""Causal depthwise conv1d with a carried state (the short convolution over xBC in a Mamba2 mixer).

Production paths: ``causal_conv1d_torch`` here (the CPU path) and ``causal_conv1d_triton``
(``conv1d_triton.py``, CUDA), behind the dispatcher ``causal_conv1d``. Reference:
``recemb.kernels.conv1d.reference.causal_conv1d_ref``.

Shapes: x (b, l, d) channels last, as ``in_proj`` produces it; weight (d, k); bias (d,);
conv_state (b, d, k): the last k raw inputs seen, oldest first (transformers' and mamba_ssm's layout; only the
last k-1 columns enter the next convolution).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from recemb.kernels._backend import resolve_backend
from recemb.kernels.workspace import Workspace, scratch

__all__ = ["causal_conv1d", "causal_conv1d_torch"]


def causal_conv1d_torch(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    conv_state: torch.Tensor | None = None,
    activation: str | None = "silu",
    workspace: Workspace | None = None,
    out_dtype: torch.dtype | None = None,
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
        out_dtype: the dtype of y and of the new state; None: x.dtype. A bf16 x (projection output) with
            out_dtype fp32 gives the fp32 conv a mixed-precision model runs (the state then holds x exactly).
    Return:
        y: (b, l, d) in out_dtype
        new_conv_state: (b, d, k) in out_dtype, the last k inputs of cat(conv_state, x)
    """
    out_dtype = out_dtype or x.dtype
    b, l, d = x.shape
    k = weight.shape[-1]
    if conv_state is None:
        history = x.new_zeros(b, k - 1, d)
    else:
        history = conv_state[:, :, 1:].transpose(1, 2)  # (b, k-1, d)
    # accumulate the taps in fp32 (fp64 for fp64 input or output)
    cdt = torch.promote_types(torch.promote_types(x.dtype, out_dtype), torch.float32)
    # Taps as contiguous rows (k, d): a column w[:, j] has stride k, which keeps the elementwise kernels below from
    # vectorising (3x slower per tap on the CPU).
    w = weight.to(cdt).t().contiguous()
    if x.dtype != cdt and not torch.is_grad_enabled():
        # A bf16 x (a mixed-precision model's in_proj output) converted once: mixed-dtype addcmul_ below would
        # convert it again per tap (docs/benchmarks.md, "Measured facts the code relies on").
        x = scratch(workspace, "conv_in", (b, l, d), x, dtype=cdt).copy_(x)
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
            y[:, :head].addcmul_(history[:, j : j + head].to(cdt), w[j])
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
        past = x.new_zeros(b, k, d, dtype=out_dtype) if conv_state is None else conv_state.transpose(1, 2)
        tail = torch.cat([past[:, l:].to(out_dtype), x.to(out_dtype)], dim=1)  # (b, k, d)
    # Always a copy: x may be a workspace buffer that the next call overwrites.
    new_state = tail.transpose(1, 2).to(out_dtype, memory_format=torch.contiguous_format, copy=True)
    return y.to(out_dtype), new_state


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    conv_state: torch.Tensor | None = None,
    activation: str | None = "silu",
    backend: str = "auto",
    workspace: Workspace | None = None,
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal depthwise conv1d with carried state; see ``causal_conv1d_torch`` for shapes and ``out_dtype``
    (``workspace``: torch backend only)."""
    if resolve_backend(backend, x.device) == "triton":
        from recemb.kernels.conv1d.conv1d_triton import causal_conv1d_triton

        y, state = causal_conv1d_triton(x, weight, bias, conv_state, activation)
        return (y, state) if out_dtype is None else (y.to(out_dtype), state.to(out_dtype))
    return causal_conv1d_torch(x, weight, bias, conv_state, activation, workspace=workspace, out_dtype=out_dtype)
