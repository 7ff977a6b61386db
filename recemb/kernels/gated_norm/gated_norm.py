"""Gated RMSNorm of the Mamba2 mixer: ``weight * rmsnorm_per_group(y * silu(z))`` (norm_before_gate=False).

Normalisation runs over groups of ``group_size`` channels (d / n_groups), not over all d channels, as in
mamba_ssm's ``RMSNormGated(group_size=d_ssm // ngroups)`` and transformers' ``MambaRMSNormGated``.

Production paths: ``gated_rms_norm_torch`` here (the CPU path) and ``gated_rms_norm_triton``
(``gated_norm_triton.py``, CUDA), behind the dispatcher ``gated_rms_norm``. Reference:
``recemb.kernels.gated_norm.reference.gated_rms_norm_ref``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from recemb.kernels._backend import resolve_backend
from recemb.kernels.gated_norm.checks import check_group_size

__all__ = ["gated_rms_norm", "gated_rms_norm_torch"]


def gated_rms_norm(
    y: torch.Tensor,
    z: torch.Tensor | None,
    weight: torch.Tensor,
    group_size: int,
    eps: float = 1e-5,
    backend: str = "auto",
    inplace: bool = False,
) -> torch.Tensor:
    """Gated RMSNorm per group; see ``gated_rms_norm_torch``. ``inplace``: y and z are scratch the caller
    gives up, so the torch inference path may write the result into y and overwrite z (no new chunk-sized
    buffer)."""
    if resolve_backend(backend, y.device) == "triton":
        from recemb.kernels.gated_norm.gated_norm_triton import gated_rms_norm_triton

        return gated_rms_norm_triton(y, z, weight, group_size, eps)
    return gated_rms_norm_torch(y, z, weight, group_size, eps, inplace=inplace)


def gated_rms_norm_torch(
    y: torch.Tensor,
    z: torch.Tensor | None,
    weight: torch.Tensor,
    group_size: int,
    eps: float = 1e-5,
    inplace: bool = False,
) -> torch.Tensor:
    """The torch path of ``gated_rms_norm`` (CPU production).

    Under autograd, or for inputs other than fp32, transformers' MambaRMSNormGated sequence of casts (the
    reference's formula). Otherwise ``_gated_rms_norm_inference``: fp32 in place, equal up to rounding.

    Arguments:
        y: (..., d)
        z: (..., d) or None
        weight: (d,)
        inplace: y and z are scratch the caller gives up (fp32 path only: the result may be y's memory, z is
            overwritten)
    Return:
        (..., d) in the dtype of ``weight * y`` (computed in fp32, cast back to y.dtype before the weight)
    """
    *prefix, d = y.shape
    check_group_size(d, group_size)
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (y, z, weight))
    if not needs_grad and y.dtype == torch.float32 and weight.dtype == torch.float32:
        return _gated_rms_norm_inference(y, z, weight, group_size, eps, inplace=inplace)
    h = y.float()
    if z is not None:
        h = h * F.silu(z.float())
    hg = h.view(*prefix, d // group_size, group_size)
    hg = hg * torch.rsqrt(hg.pow(2).mean(-1, keepdim=True) + eps)
    return weight * hg.view(*prefix, d).to(y.dtype)


def _gated_rms_norm_inference(
    y: torch.Tensor,
    z: torch.Tensor | None,
    weight: torch.Tensor,
    group_size: int,
    eps: float = 1e-5,
    inplace: bool = False,
) -> torch.Tensor:
    """``gated_rms_norm_torch`` for fp32 y and weight without autograd, in three passes over (..., d)
    instead of seven: one buffer, updated in place, and a sum of squares without a squared copy. Equal to the
    reference up to rounding (tested); the CPU encoder spends ~10% of its time here otherwise. ``inplace``:
    that buffer is y itself, and silu(z) is taken in z's memory."""
    *prefix, d = y.shape
    if inplace and y.is_contiguous():
        h = y.mul_(F.silu(z.float(), inplace=True)) if z is not None else y
    else:
        h = F.silu(z.float()).mul_(y) if z is not None else y.clone()
    hg = h.view(*prefix, d // group_size, group_size)
    mean_sq = torch.linalg.vector_norm(hg, dim=-1, keepdim=True).square_().div_(group_size)
    hg.mul_(mean_sq.add_(eps).rsqrt_())
    return h.mul_(weight)
