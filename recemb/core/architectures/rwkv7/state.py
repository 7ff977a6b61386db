"""What one RWKV-7 layer carries across vertical chunks: both mixes' token-shift inputs and the wkv state.

v_first is not carried: layer 0 computes it for each token from that same token.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["RWKV7LayerState", "RWKV7State"]


class RWKV7LayerState(NamedTuple):
    """What one layer carries from one vertical chunk to the next."""

    attn_shift: torch.Tensor  # (b, d): the time mix's input (attn_norm output) at the last token, model dtype
    wkv: torch.Tensor  # (b, h, n, n), fp32: the delta-rule state, value rows and key columns (rwkv's layout)
    ffn_shift: torch.Tensor  # (b, d): the channel mix's input (ffn_norm output) at the last token

    @staticmethod
    def zeros(batch: int, hidden_size: int, num_heads: int, head_dim: int,
              device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
              ) -> "RWKV7LayerState":
        return RWKV7LayerState(
            torch.zeros(batch, hidden_size, device=device, dtype=dtype),
            torch.zeros(batch, num_heads, head_dim, head_dim, device=device, dtype=torch.float32),
            torch.zeros(batch, hidden_size, device=device, dtype=dtype),
        )

    def keep_rows(self, n: int) -> "RWKV7LayerState":
        """The state of the first n sequences of the batch (finished sequences leave from the end)."""
        return RWKV7LayerState(self.attn_shift[:n], self.wkv[:n], self.ffn_shift[:n])


RWKV7State = list[RWKV7LayerState]  # one per layer
