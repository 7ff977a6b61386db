"""The chunk-parallel ops of recemb's architectures, the ones that are not plain matmuls, a package each:

- Mamba2: the SSD scan (``ssd``), the causal conv1d (``conv1d``) and the gated RMSNorm (``gated_norm``); each has a
  dispatcher (``ssd_chunk_scan``, ``causal_conv1d``, ``gated_rms_norm``) over two production paths, ``*_torch``
  (what runs on the CPU) and ``*_triton`` (our own Triton kernels, for CUDA; imported on first use, so Triton
  stays optional);
- xLSTM: the mLSTM cell (``mlstm``): ``mlstm_chunkwise`` in torch on every device, and on CUDA the mlstm_kernels
  package's kernel where it is installed (``mlstm.mlstm`` chooses);
- RWKV-7: the generalised delta rule (``rwkv7``): ``rwkv7_chunked`` in torch on every device, and on CUDA
  flash-linear-attention's chunk kernel where it is installed (``rwkv7.rwkv7`` chooses).

Each op's package holds its references in ``reference.py`` (pure torch, Triton-free, never run in production):
``<op>_ref``, the definition an implementation is tested against, and for the recurrences ``<op>_recurrent_ref``,
the fp64 token loop that is the ground truth.
"""

from recemb.kernels._backend import BACKENDS, resolve_backend, triton_available
from recemb.kernels.conv1d import causal_conv1d, causal_conv1d_ref, causal_conv1d_torch
from recemb.kernels.gated_norm import gated_rms_norm, gated_rms_norm_ref, gated_rms_norm_torch
from recemb.kernels.mlstm import MLSTMState, mlstm_chunkwise, mlstm_recurrent_ref
from recemb.kernels.rwkv7 import rwkv7_chunked, rwkv7_recurrent_ref
from recemb.kernels.ssd import (
    prepare_dt,
    prepare_dt_ref,
    ssd_chunk_scan,
    ssd_chunk_scan_ref,
    ssd_chunk_scan_torch,
    ssd_chunked_ref,
    ssd_recurrent_ref,
    torch_scan_chunk_length,
)
from recemb.kernels.workspace import Workspace

__all__ = [
    "BACKENDS",
    "MLSTMState",
    "Workspace",
    "causal_conv1d",
    "causal_conv1d_ref",
    "causal_conv1d_torch",
    "gated_rms_norm",
    "gated_rms_norm_ref",
    "gated_rms_norm_torch",
    "mlstm_chunkwise",
    "mlstm_recurrent_ref",
    "prepare_dt",
    "prepare_dt_ref",
    "resolve_backend",
    "rwkv7_chunked",
    "rwkv7_recurrent_ref",
    "ssd_chunk_scan",
    "ssd_chunk_scan_ref",
    "ssd_chunk_scan_torch",
    "ssd_chunked_ref",
    "ssd_recurrent_ref",
    "torch_scan_chunk_length",
    "triton_available",
]
