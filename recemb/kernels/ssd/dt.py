"""The effective SSD step size, shared by the model (``recemb.core.architectures.mamba2.mixer``, its calibration
``recemb.core.architectures.mamba2.calibration``) and the torch scan (``recemb.kernels.ssd.combined``); the
Triton stage ``chunk_cumsum`` computes it in its kernel.

Production code, Triton-free. Reference: ``recemb.kernels.ssd.reference.prepare_dt_ref``, which it equals to the
bit and which is tested against the formula elementwise in fp64 (``tests/kernels/test_references.py``).
Shapes: see ``recemb.kernels.ssd.reference``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["prepare_dt"]


def prepare_dt(
    dt: torch.Tensor,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
) -> torch.Tensor:
    """Effective step size: ``clamp(softplus?(dt + dt_bias), *dt_limit)`` in fp32.

    Follows transformers' ``mamba2_chunk_scan`` and mamba_ssm's ``_chunk_cumsum_fwd``: the bias is added
    first, then softplus, then the clamp (fp32, or fp64 for fp64 input). The clamp is skipped for the default
    ``(0, inf)`` limit, which would only turn an exact 0 into 0 (and LongMamba's zeroed steps must stay zero).
    """
    dt = dt.to(torch.promote_types(dt.dtype, torch.float32))
    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)
    if dt_softplus:
        # fp32 steps are rounded once from an fp64 softplus: torch's vectorised body and scalar tail round an fp32
        # softplus differently, and which steps fall in the tail depends on the batch.
        dt = F.softplus(dt.double()).to(dt.dtype) if dt.dtype == torch.float32 else F.softplus(dt)
    lo, hi = dt_limit
    if lo > 0.0 or hi != float("inf"):
        dt = dt.clamp(min=lo, max=hi)
    return dt
