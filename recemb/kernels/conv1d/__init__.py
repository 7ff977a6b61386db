"""The causal depthwise conv1d with a carried state (the short convolution over xBC in a Mamba2 mixer).

``causal_conv1d`` (dispatcher) over two production paths: ``causal_conv1d_torch`` (``conv1d.py``, the CPU path)
and ``causal_conv1d_triton`` (``conv1d_triton.py``, CUDA; imported on first use, so Triton stays optional).
``causal_conv1d_ref`` (``reference.py``) is the pure-torch definition both are tested against.
"""

from recemb.kernels.conv1d.conv1d import causal_conv1d, causal_conv1d_torch
from recemb.kernels.conv1d.reference import causal_conv1d_ref

__all__ = ["causal_conv1d", "causal_conv1d_ref", "causal_conv1d_torch"]
