"""The SSD (state space duality) scan of Mamba2: production paths and their pure-torch references.

Production: ``ssd_chunk_scan`` (dispatcher), ``ssd_chunk_scan_torch`` (CPU), the Triton stages and
``triton_combined`` (CUDA), ``prepare_dt`` (``dt.py``). References, Triton-free: ``reference.py``.
"""

from recemb.kernels.ssd.combined import ssd_chunk_scan, ssd_chunk_scan_torch, torch_scan_chunk_length
from recemb.kernels.ssd.dt import prepare_dt
from recemb.kernels.ssd.reference import ssd_chunk_scan_ref, ssd_naive_chunked, ssd_naive_recurrent

__all__ = [
    "prepare_dt",
    "ssd_chunk_scan",
    "ssd_chunk_scan_ref",
    "ssd_chunk_scan_torch",
    "ssd_naive_chunked",
    "ssd_naive_recurrent",
    "torch_scan_chunk_length",
]
