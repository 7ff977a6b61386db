"""Scratch buffers reused across the calls of one encode (every layer of every vertical chunk has the same shapes).

Why: the CPU inference path writes several chunk-sized intermediates per layer (in_proj's output, the conv's
output, the intra-chunk decay matrix, the chunk states, ...). Freshly allocated, a large one often comes from a new
``mmap`` whose pages the kernel faults in and zeroes on first write. Reusing them saved 1-10% of an encode on the
2-core machines this project runs on, depending on the allocator's state (``docs/benchmarks.md``), and keeps the
peak memory steady. A workspace allocates each named buffer once and hands out views of it.

Contract: a buffer handed out under a name is valid until the next ``empty`` with the same name. Callers use a
name for one purpose per call and copy out whatever must outlive the call (states, outputs kept by the caller).
"""

from __future__ import annotations

import math

import torch

__all__ = ["Workspace", "scratch"]


class Workspace:
    """Named scratch buffers, grown on demand and never shrunk (dropped with the workspace)."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, torch.dtype, torch.device], torch.Tensor] = {}

    def empty(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """An uninitialised contiguous tensor of ``shape`` backed by the buffer ``name``."""
        numel = math.prod(shape)
        key = (name, dtype, torch.device(device))
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < numel:
            buf = torch.empty(numel, dtype=dtype, device=device)
            self._buffers[key] = buf
        return buf[:numel].view(shape)

    @property
    def nbytes(self) -> int:
        """Bytes held by all buffers."""
        return sum(b.numel() * b.element_size() for b in self._buffers.values())


def scratch(workspace: Workspace | None, name: str, shape: tuple[int, ...], like: torch.Tensor,
            dtype: torch.dtype | None = None) -> torch.Tensor:
    """``workspace.empty(name, ...)``, or a fresh ``torch.empty`` when there is no workspace."""
    dtype = dtype or like.dtype
    if workspace is None:
        return torch.empty(shape, dtype=dtype, device=like.device)
    return workspace.empty(name, tuple(shape), dtype, like.device)
