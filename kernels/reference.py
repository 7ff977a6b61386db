"""Pure-torch references of the conv and the gated norm: the definitions their implementations are tested
against.

A ``*_ref`` function is written to be obviously correct, not fast; it never runs in production and imports
only torch (so it works without Triton). Production paths: ``causal_conv1d_torch`` / ``causal_conv1d_triton``
(``conv1d.py``, ``conv1d_triton.py``) and ``gated_rms_norm_torch`` / ``gated_rms_norm_triton``
(``gated_norm.py``, ``gated_norm_triton.py``). The SSD scan's references: ``recemb.kernels.ssd.reference``.

Shapes: x (b, l, d) channels last; weight (d, k) conv taps; conv_state (b, d, k) the last k raw inputs, oldest
first (only the last k-1 enter the next convolution); y, z (..., d) for the norm, normalised per group of
``group_size`` channels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["causal_conv1d_ref", "gated_rms_norm_ref"]


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


def gated_rms_norm_ref(
    y: torch.Tensor,
    z: torch.Tensor | None,
    weight: torch.Tensor,
    group_size: int,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Gated RMSNorm per group, ``weight * rmsnorm_per_group(y * silu(z))``, in the sequence of casts of
    transformers' MambaRMSNormGated (norm_before_gate=False); groups of ``group_size`` channels.

    Arguments:
        y: (..., d)
        z: (..., d) or None
        weight: (d,)
    Return:
        (..., d) in the dtype of ``weight * y`` (computed in fp32, cast back to y.dtype before the weight)
    """
    in_dtype = y.dtype
    h = y.float()
    if z is not None:
        h = h * F.silu(z.float())
    *prefix, d = h.shape
    hg = h.view(*prefix, d // group_size, group_size)
    hg = hg * torch.rsqrt(hg.pow(2).mean(-1, keepdim=True) + eps)
    return weight * hg.view(*prefix, d).to(in_dtype)
