"""What one vertical chunk of a Mamba2 encoder holds in memory at its peak, from the shapes alone.

Read off the inference path (``recemb/core/vertical.py`` -> ``Mamba2Block`` -> ``Mamba2Mixer.forward`` ->
``recemb.kernels``' conv, torch SSD scan and gated norm). On the CPU the chunk-sized buffers live in one
``Workspace`` per call, allocated by the first layer and reused by every later one, so they are all alive at once
however many layers run; the peak is reached inside the SSD scan, with the scan's own temporaries on top. Per token
of b rows x V tokens (V padded up to whole scan chunks of q; I = h·p, E = in_proj's rows, C = conv channels):

    workspace   rms_norm d, in_proj E, conv C, X I, y I, chunk_major I, out_proj d, M h·q (the intra-chunk decay
                matrix (b, c, g, k, q, q)), H h·p·n / q (the chunk states (c + 1, b, g, n, k·p), one more chunk
                per row)
    scan        the zero-padded copies of x, B, C, dt (a last, partial chunk), the cumulative decays (a few h),
                C·Bᵀ g·q, B and C in the matmuls' layout (2 g·n), the chunk decays I / q
    stream      the residual stream twice d: the vertical loop holds the previous chunk's while the next one runs
    low precision (bf16 / int8 projections)  fp32 copies of the conv input C, the gate z I and dt h

all fp32 (4 bytes; the scan always computes in fp32). The recurrent state is conv (C, k) + SSM (h, p, n) per
layer and row, twice: the states before the chunk stay alive until every layer has written its new one.

The Triton path (CUDA) keeps no decay matrix M (its kernels compute the intra-chunk terms in registers) but its
C·Bᵀ is g·q per token with the checkpoint's q; the same estimate applies otherwise.

Checked two ways on the CPU (docs/benchmarks.md, "Memory budgets"): against the peak of live tensor bytes, which
the sum above slightly overestimates, and against the peak RSS of fresh processes, which the allocator puts a little
above the live bytes (the scan's transients are freed into glibc's heap, which does not always hand them back
before the next are taken): ALLOCATOR_FACTOR. ``recemb.core.memory`` adds its own margin on top.
"""

from __future__ import annotations

import math

import torch

from recemb.core.architectures.descriptor import ChunkMemory
from recemb.core.architectures.mamba2.config import Mamba2Config
from recemb.core.architectures.mamba2.mixer import TORCH_SCAN_CHUNK_SIZE
from recemb.kernels import torch_scan_chunk_length

__all__ = ["chunk_memory", "scan_chunk_size"]

FP32 = 4
ALLOCATOR_FACTOR = 1.1  # peak RSS over the sum above, at most, as measured (module docstring)


def scan_chunk_size(config: Mamba2Config, backend: str, chunk_size: int | None) -> int:
    """The SSD chunk length q a call runs with (``Mamba2Mixer.chunk_size_for``)."""
    if chunk_size is not None:
        return chunk_size
    return min(config.chunk_size, TORCH_SCAN_CHUNK_SIZE) if backend == "torch" else config.chunk_size


def chunk_memory(config: Mamba2Config, dtype: torch.dtype, rows: int, vertical_chunk_size: int,
                 chunk_size: int | None = None, backend: str = "torch") -> ChunkMemory:
    """Peak bytes of one forward of ``rows`` rows x ``vertical_chunk_size`` tokens (the module docstring's terms);
    ``backend`` is the resolved one ("torch" or "triton")."""
    c = config
    d, inner, h, p, n, g, k = (c.hidden_size, c.intermediate_size, c.num_heads, c.head_dim, c.state_size,
                               c.n_groups, c.conv_kernel)
    conv, proj = c.conv_dim, c.in_proj_size
    q = scan_chunk_size(c, backend, chunk_size)
    # The torch scan pads a chunk shorter than q to a multiple of CHUNK_ALIGN tokens; Triton runs it as it is.
    q = torch_scan_chunk_length(vertical_chunk_size, q) if backend == "torch" else max(1, min(q, vertical_chunk_size))
    chunks = math.ceil(vertical_chunk_size / q)
    padded = chunks * q
    per_token = (d + proj + conv + 3 * inner + d  # workspace: rms_norm, in_proj, conv, X / y / chunk_major, out_proj
                 + (h * q if backend == "torch" else 0)  # M, the intra-chunk decay matrix
                 + inner + 2 * g * n + h  # padded copies of x, B, C, dt
                 + 6 * h + g * q + 2 * g * n + inner / q  # decays, C·Bᵀ, B / C relaid, chunk decays
                 + 2 * d)  # the residual stream, previous chunk's and this one's
    if dtype != torch.float32:
        per_token += conv + inner + h  # mixed precision's fp32 copies: conv input, exact gate, dt
    per_row = (chunks + 1) * h * p * n  # H, the chunk states
    activations = ALLOCATOR_FACTOR * FP32 * rows * (per_token * padded + per_row)
    states = 2 * FP32 * rows * c.num_hidden_layers * (conv * k + h * p * n)
    return ChunkMemory(activations=int(math.ceil(activations)), states=states)
