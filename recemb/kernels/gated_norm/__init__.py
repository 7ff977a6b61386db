"""The gated RMSNorm of a Mamba2 mixer: ``weight * rmsnorm_per_group(y * silu(z))``.

``gated_rms_norm`` (dispatcher) over two production paths: ``gated_rms_norm_torch`` (``gated_norm.py``, the CPU
path) and ``gated_rms_norm_triton`` (``gated_norm_triton.py``, CUDA; imported on first use, so Triton stays
optional). ``gated_rms_norm_ref`` (``reference.py``) is the pure-torch definition both are tested against.
"""

from recemb.kernels.gated_norm.gated_norm import gated_rms_norm, gated_rms_norm_torch
from recemb.kernels.gated_norm.reference import gated_rms_norm_ref

__all__ = ["gated_rms_norm", "gated_rms_norm_ref", "gated_rms_norm_torch"]
