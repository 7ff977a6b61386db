"""The state one xLSTM block carries across vertical chunks: the mLSTM cell's (C, n, m).

The blocks have no convolution or other memory, so nothing else crosses a chunk boundary.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["XLSTMLayerState", "XLSTMState"]


class XLSTMLayerState(NamedTuple):
    """One layer's mLSTM cell state, in the kernel's compute dtype (fp32; fp64 for an fp64 model).

    transformers' ``xLSTMCache.rnn_state[layer]`` holds the same three tensors, with m as (b, h, 1).
    """

    C: torch.Tensor  # (b, h, dk, dv) the matrix memory, divided by exp(m)
    n: torch.Tensor  # (b, h, dk) the normaliser, divided by exp(m)
    m: torch.Tensor  # (b, h) the stabiliser (log scale)

    @staticmethod
    def zeros(batch: int, nheads: int, dk: int, dv: int, device: torch.device | str | None = None,
              dtype: torch.dtype = torch.float32) -> "XLSTMLayerState":
        return XLSTMLayerState(torch.zeros(batch, nheads, dk, dv, device=device, dtype=dtype),
                               torch.zeros(batch, nheads, dk, device=device, dtype=dtype),
                               torch.zeros(batch, nheads, device=device, dtype=dtype))

    def keep_rows(self, rows: int) -> "XLSTMLayerState":
        """The state of the first ``rows`` sequences of the batch (finished sequences leave from the end)."""
        return XLSTMLayerState(self.C[:rows], self.n[:rows], self.m[:rows])


XLSTMState = list[XLSTMLayerState]  # one per block
