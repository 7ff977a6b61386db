"""The SSD (state space duality) scan of Mamba2: production paths and their pure-torch references.

Production: ``ssd_chunk_scan`` (dispatcher), ``ssd_chunk_scan_torch`` (CPU), the Triton stages and
``triton_combined`` (CUDA), ``prepare_dt`` (``dt.py``). References, Triton-free (``reference.py``):
``ssd_recurrent_ref`` (the fp64 token loop, the ground truth), ``ssd_chunk_scan_ref`` (the same with
``ssd_chunk_scan``'s signature), ``ssd_chunked_ref`` (the chunked algorithm), ``prepare_dt_ref`` and the five
stage references.
"""

from recemb.kernels.ssd.combined import ssd_chunk_scan, ssd_chunk_scan_torch, torch_scan_chunk_length
from recemb.kernels.ssd.dt import prepare_dt
from recemb.kernels.ssd.reference import prepare_dt_ref, ssd_chunk_scan_ref, ssd_chunked_ref, ssd_recurrent_ref

__all__ = [
    "prepare_dt",
    "prepare_dt_ref",
    "ssd_chunk_scan",
    "ssd_chunk_scan_ref",
    "ssd_chunk_scan_torch",
    "ssd_chunked_ref",
    "ssd_recurrent_ref",
    "torch_scan_chunk_length",
]
