"""The SSD (state space duality) scan of Mamba2: references and implementations."""

from recemb.kernels.ssd.combined import ssd_chunk_scan, ssd_chunk_scan_ref, ssd_chunk_scan_torch
from recemb.kernels.ssd.naive import prepare_dt, ssd_naive_chunked, ssd_naive_recurrent

__all__ = [
    "prepare_dt",
    "ssd_chunk_scan",
    "ssd_chunk_scan_ref",
    "ssd_chunk_scan_torch",
    "ssd_naive_chunked",
    "ssd_naive_recurrent",
]
