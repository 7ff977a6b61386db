"""The recurrent state carried across vertical chunks.

Per layer: ``conv_state`` (b, conv_dim, k), the last k raw xBC inputs (oldest first, same layout as
transformers' cache and mamba_ssm), kept in the activation dtype since it holds in_proj outputs unchanged;
``ssm_state`` (b, h, p, n), always fp32.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["LayerState", "ModelState"]


class LayerState(NamedTuple):
    conv_state: torch.Tensor  # (b, conv_dim, k)
    ssm_state: torch.Tensor  # (b, h, p, n), fp32

    @staticmethod
    def zeros(batch: int, conv_dim: int, conv_kernel: int, nheads: int, headdim: int, d_state: int,
              device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> "LayerState":
        return LayerState(
            torch.zeros(batch, conv_dim, conv_kernel, device=device, dtype=dtype),
            torch.zeros(batch, nheads, headdim, d_state, device=device, dtype=torch.float32),
        )

    def keep_rows(self, n: int) -> "LayerState":
        """The state of the first n sequences of the batch (finished sequences leave from the end)."""
        return LayerState(self.conv_state[:n], self.ssm_state[:n])


ModelState = list[LayerState]  # one LayerState per layer
