"""What recemb knows of an architecture outside its own package: one ``Architecture`` per architecture."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from recemb.core.encoder import RecurrentEncoder

__all__ = ["Architecture", "ChunkMemory"]


class ChunkMemory(NamedTuple):
    """Peak bytes of one vertical chunk's forward, as an architecture estimates them from its shapes.

    activations: the chunk-sized tensors alive at the peak (scratch buffers, temporaries, the residual stream);
    states: the recurrent states of every layer, before and after the chunk (both are alive at once).
    """

    activations: int
    states: int

    @property
    def total(self) -> int:
        return self.activations + self.states


@dataclass(frozen=True)
class Architecture:
    """One architecture's entry in the registry (``recemb.core.architectures.ARCHITECTURES``).

    name: the config's ``model_type`` ("mamba2"), the registry's key.
    display_name: how people write it ("Mamba2"), for messages and model cards.
    detect(folder) -> format | None: the name of the checkpoint format a folder holds when it is this
        architecture's, else None; never raises for another architecture's folder (a folder one architecture
        claims, no other does).
    load(folder, format, device, dtype) -> RecurrentEncoder: the model of a folder ``detect`` claimed, in eval
        mode without gradients; dtype None: fp32 on the CPU, the checkpoint's dtype elsewhere.
    save_format: the format ``RecurrentEncoder.save`` writes (what ``detect`` answers for a saved folder).
    formats: the formats read, as a phrase for "recemb reads ..." messages.
    backbone: what a saved ``config.json`` + ``model.safetensors`` are, as a phrase for model cards ("a
        transformers `Mamba2Model` checkpoint (...)").
    describe(config) -> dict: the architecture's own shape fields, beyond those every config has (``recemb
        info`` shows them after ``layers``): any of heads, head_dim, state_size, n_groups it has, in that order.
    cpu_mixed_precision: whether a low-precision dtype on the CPU means mixed precision (bf16 projections, the
        rest fp32; ``RecurrentEncoder.to_mixed_precision``) and dtype="auto" may pick bf16 there.
    chunk_memory(config, dtype, rows, V, chunk_size, backend) -> ChunkMemory: the peak memory of one forward of
        rows x V tokens, read off the architecture's forward code (its ``memory`` module), which
        ``recemb.core.memory`` plans ``max_memory`` budgets with; None: budgets are refused for it.
    """

    name: str
    display_name: str
    detect: Callable[[Path], str | None]
    load: Callable[[Path, str, torch.device, torch.dtype | None], RecurrentEncoder]
    save_format: str
    formats: str
    backbone: str
    describe: Callable[[Any], dict[str, Any]]
    cpu_mixed_precision: bool = False
    chunk_memory: Callable[[Any, torch.dtype, int, int, int | None, str], ChunkMemory] | None = None
