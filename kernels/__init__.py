"""SSD ops for Mamba2: pure-torch references and implementations, and our own Triton kernels for CUDA."""

from recemb.kernels._backend import BACKENDS, resolve_backend, triton_available
from recemb.kernels.conv1d import causal_conv1d, causal_conv1d_ref
from recemb.kernels.gated_norm import gated_rms_norm, gated_rms_norm_ref
from recemb.kernels.ssd import (
    prepare_dt,
    ssd_chunk_scan,
    ssd_chunk_scan_ref,
    ssd_chunk_scan_torch,
    ssd_naive_chunked,
    ssd_naive_recurrent,
)
from recemb.kernels.workspace import Workspace

__all__ = [
    "BACKENDS",
    "Workspace",
    "causal_conv1d",
    "causal_conv1d_ref",
    "gated_rms_norm",
    "gated_rms_norm_ref",
    "prepare_dt",
    "resolve_backend",
    "ssd_chunk_scan",
    "ssd_chunk_scan_ref",
    "ssd_chunk_scan_torch",
    "ssd_naive_chunked",
    "ssd_naive_recurrent",
    "triton_available",
]
