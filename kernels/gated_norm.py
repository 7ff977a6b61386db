"""Gated RMSNorm of the Mamba2 mixer: ``weight * rmsnorm_per_group(y * silu(z))`` (norm_before_gate=False).

Normalisation runs over groups of ``group_size`` channels (d / n_groups), not over all d channels, as in
mamba_ssm's ``RMSNormGated(group_size=d_ssm // ngroups)`` and transformers' ``MambaRMSNormGated``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from recemb.kernels._backend import resolve_backend


def gated_rms_norm_ref(
    y: torch.Tensor,
    z: torch.Tensor | None,
    weight: torch.Tensor,
    group_size: int,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Pure-torch gated RMSNorm, numerically the same sequence of casts as transformers' MambaRMSNormGated.

    Arguments:
        y: (..., d)
        z: (..., d) or None
        weight: (d,)
    Return:
        (..., d) in the dtype of ``weight * y`` (y is computed in fp32 and cast back to y.dtype before the weight)
    """
    in_dtype = y.dtype
    h = y.float()
    if z is not None:
        h = h * F.silu(z.float())
    *prefix, d = h.shape
    if d % group_size != 0:
        raise ValueError(f"channels {d} are not a multiple of group_size {group_size}")
    hg = h.view(*prefix, d // group_size, group_size)
    hg = hg * torch.rsqrt(hg.pow(2).mean(-1, keepdim=True) + eps)
    return weight * hg.view(*prefix, d).to(in_dtype)


def gated_rms_norm(
    y: torch.Tensor,
    z: torch.Tensor | None,
    weight: torch.Tensor,
    group_size: int,
    eps: float = 1e-5,
    backend: str = "auto",
) -> torch.Tensor:
    """Gated RMSNorm per group; see ``gated_rms_norm_ref``."""
    if resolve_backend(backend, y.device) == "triton":
        from recemb.kernels.gated_norm_triton import gated_rms_norm_triton

        return gated_rms_norm_triton(y, z, weight, group_size, eps)
    return gated_rms_norm_ref(y, z, weight, group_size, eps)
