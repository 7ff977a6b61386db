"""What one vertical chunk of an RWKV-7 encoder holds in memory at its peak, from the shapes alone.

Read off the forward code (``RWKV7Block`` -> ``RWKV7TimeMix`` -> ``recemb.kernels.rwkv7.rwkv7_chunked``). Nothing is
reused across layers; the peak is at the end of the chunked delta rule, when the time mix still holds its inputs.
Per token of b rows x V tokens (d model width, n head size, q the chunk length):

    time mix   the residual stream d twice, the normed input and its shift difference, the six token-shift mixes,
               r, w, k, v, a, g, kk, layer 0's values and the two products passed on (20 d in all); inside the
               delta rule the six chunk-major copies, the cumulative decays, both factor matrices, the right-hand
               sides, their solution and its products, the output and its copy (24 d), the (2q, 2q) products per
               chunk 4 q·d / n and two relaid q x q blocks 2 q·d / n, and the per-chunk (n, p) and (n, n)
               matrices (4 p + 2 n) d / q

in fp32 (4 bytes; the delta rule computes in fp32, bf16 models are estimated as fp32). The channel mix (its width
4 d, two at once) stays below it. The state per layer and row is the two token-shift inputs (2 d) and the wkv
state (d·n) in fp32, twice (before and after the chunk).

The sum is the peak of live tensor bytes (checked against a tally of every tensor's storage). The peak RSS is
above it (docs/benchmarks.md, "Memory budgets"): every one of these tensors is allocated fresh and freed into
glibc's heap, which keeps part of it, so the estimate is scaled by ALLOCATOR_FACTOR, the largest ratio measured with
some room.
"""

from __future__ import annotations

import torch

from recemb.core.architectures.descriptor import ChunkMemory
from recemb.core.architectures.rwkv7.config import RWKV7Config

__all__ = ["chunk_memory"]

FP32 = 4
ALLOCATOR_FACTOR = 1.9  # peak RSS over the live bytes: the measured worst with some room (module docstring)


def chunk_memory(config: RWKV7Config, dtype: torch.dtype, rows: int, vertical_chunk_size: int,
                 chunk_size: int | None = None, backend: str = "torch") -> ChunkMemory:
    """Peak bytes of one forward of ``rows`` rows x ``vertical_chunk_size`` tokens (the module docstring's
    terms); ``dtype`` and ``backend`` do not change it (one torch path, fp32 inside)."""
    c = config
    d, n, inner = c.hidden_size, c.head_dim, c.intermediate_size
    q = max(1, min(chunk_size or c.chunk_size, vertical_chunk_size))
    padded = -(-vertical_chunk_size // q) * q
    time_mix = 20 * d + 24 * d + 6 * q * d / n + (6 * n) * d / q
    channel_mix = 6 * d + 2 * inner
    activations = ALLOCATOR_FACTOR * FP32 * rows * max(time_mix, channel_mix) * padded
    states = 2 * FP32 * rows * c.num_hidden_layers * (2 * d + d * n)
    return ChunkMemory(activations=int(activations), states=states)
