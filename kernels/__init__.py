"""The non-matmul ops of a Mamba2 mixer: the SSD scan, the causal conv1d and the gated RMSNorm.

Each op has a dispatcher (``ssd_chunk_scan``, ``causal_conv1d``, ``gated_rms_norm``) over two
production paths, ``*_torch`` (what runs on the CPU) and ``*_triton`` (our own Triton kernels, for CUDA;
imported on first use, so Triton stays optional), and a ``*_ref``: the pure-torch definition the tests
compare both against, never run in production (``reference.py``, ``ssd/reference.py``; Triton-free).
"""

from recemb.kernels._backend import BACKENDS, resolve_backend, triton_available
from recemb.kernels.conv1d import causal_conv1d, causal_conv1d_torch
from recemb.kernels.gated_norm import gated_rms_norm, gated_rms_norm_torch
from recemb.kernels.reference import causal_conv1d_ref, gated_rms_norm_ref
from recemb.kernels.ssd import (
    prepare_dt,
    ssd_chunk_scan,
    ssd_chunk_scan_ref,
    ssd_chunk_scan_torch,
    ssd_naive_chunked,
    ssd_naive_recurrent,
    torch_scan_chunk_length,
)
from recemb.kernels.workspace import Workspace

__all__ = [
    "BACKENDS",
    "Workspace",
    "causal_conv1d",
    "causal_conv1d_ref",
    "causal_conv1d_torch",
    "gated_rms_norm",
    "gated_rms_norm_ref",
    "gated_rms_norm_torch",
    "prepare_dt",
    "resolve_backend",
    "ssd_chunk_scan",
    "ssd_chunk_scan_ref",
    "ssd_chunk_scan_torch",
    "ssd_naive_chunked",
    "ssd_naive_recurrent",
    "torch_scan_chunk_length",
    "triton_available",
]
