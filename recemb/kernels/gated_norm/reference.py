"""The pure-torch reference of the gated RMSNorm: the definition its implementations are tested against.

A ``*_ref`` function is written to be obviously correct, not fast; it never runs in production and imports
only torch (so it works without Triton). Production paths: ``gated_rms_norm_torch`` (``gated_norm.py``, with the
dispatcher ``gated_rms_norm``) and ``gated_rms_norm_triton`` (``gated_norm_triton.py``).

Shapes: y, z (..., d), normalised per group of ``group_size`` channels; weight (d,).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["gated_rms_norm_ref"]


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
