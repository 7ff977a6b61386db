"""What one vertical chunk of an xLSTM encoder holds in memory at its peak, from the shapes alone.

Read off the forward code (``XLSTMBlock`` -> ``MLSTMLayer`` -> ``recemb.kernels.mlstm.mlstm_chunkwise``). Nothing
is reused across layers: each layer's tensors are freed when it returns, so the peak is the larger of its two
halves. Per token of b rows x V tokens (d model width, h heads, qk = h·dk, v = h·dv, up the feed-forward's width,
cs the chunkwise form's chunk length):

    mLSTM   the residual stream d three times (the previous chunk's, the block's input, the normed input), the
            projections q, k, v and their chunk-major copies (2 x (2 qk + v)), q scaled qk, the gates and their
            fp64 running sums (about 16 h); then either the intra-chunk log weights (b, h, c, cs, cs) in fp64 with
            the temporaries of their exp (7 h·cs floats) or, in the loop over chunks, the weights kept
            (3 h·cs) with the intra-chunk numerator and the output (2 v)
    FFN     the stream four times and three up-sized tensors (silu(gate), up, their product)

in fp32 (4 bytes; the cell computes in fp32, bf16 models are estimated as fp32). Per row: one chunk's loop
temporaries. The state per layer and row is (C (h, dk, dv), n (h, dk), m (h)) in fp32, twice (before and after the
chunk), plus three state-sized temporaries of the layer that is running.

The sum is the peak of live tensor bytes (checked against a tally of every tensor's storage). The peak RSS is
well above it (docs/benchmarks.md, "Memory budgets"): every one of these tensors is allocated fresh and freed into
glibc's heap, which keeps much of it (its mmap threshold rises with the sizes it has freed), so the estimate is
scaled by ALLOCATOR_FACTOR, the largest ratio measured with some room. Mamba2, whose buffers are reused, needs far
less.
"""

from __future__ import annotations

import torch

from recemb.core.architectures.descriptor import ChunkMemory
from recemb.core.architectures.xlstm.config import XLSTMConfig

__all__ = ["chunk_memory"]

FP32 = 4
ALLOCATOR_FACTOR = 2.6  # peak RSS over the live bytes: the measured worst with some room (module docstring)


def chunk_memory(config: XLSTMConfig, dtype: torch.dtype, rows: int, vertical_chunk_size: int,
                 chunk_size: int | None = None, backend: str = "torch") -> ChunkMemory:
    """Peak bytes of one forward of ``rows`` rows x ``vertical_chunk_size`` tokens (the module docstring's
    terms); ``dtype`` and ``backend`` do not change it (one torch path, fp32 inside)."""
    c = config
    d, h, qk, v, up = c.hidden_size, c.num_heads, c.qk_dim, c.v_dim, c.up_proj_dim
    cs = max(1, min(chunk_size or c.chunk_size, vertical_chunk_size))
    mlstm = 3 * d + 2 * (2 * qk + v) + qk + 16 * h + max(7 * h * cs, 3 * h * cs + 2 * v + h)
    ffn = 4 * d + 3 * up
    per_row_loop = cs * (2 * qk + 2 * v)  # one chunk's q·w, k·w and outputs inside the loop
    state = h * c.qk_head_dim * c.v_head_dim + h * c.qk_head_dim + h
    activations = ALLOCATOR_FACTOR * FP32 * rows * (max(mlstm, ffn) * vertical_chunk_size + per_row_loop + 3 * state)
    states = 2 * FP32 * rows * c.num_hidden_layers * state
    return ChunkMemory(activations=int(activations), states=states)
