"""What the vertical engine needs of a recurrent model: the protocol every architecture implements.

The vertical loop (``recemb/core/vertical.py``), ``Embedder``, the exporters and the integrations use only this; none of
them imports an architecture's own classes. An architecture (a package under ``recemb/core/architectures/``: Mamba2,
xLSTM, RWKV-7) subclasses ``RecurrentEncoder`` and provides:

- ``forward_chunk(input_ids (b, l), states, run) -> (h (b, l, d), states)``: embed the ids and run the chunk
  through every layer; ``states`` is one state object per layer before the chunk (None: the start of the
  sequence), the return the states after it. ``h`` is the residual stream before the final norm.
- ``final_norm(h)``: the final norm, applied only at pooled positions.
- per-layer state objects with ``keep_rows(n)``: the state of the first n rows (finished rows leave from the end).
- ``config`` with ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``pad_token_id``, ``chunk_size`` (the
  chunk length of its chunk-parallel form, which also sets the default V for batches), ``model_type``, and
  ``to_dict()`` (what ``save`` writes as config.json; collections fingerprint the model by it).
- ``save(folder, safe_serialization=True)``: the architecture's own checkpoint format (config.json +
  model.safetensors, or pytorch_model.bin), which its loader reads back.

Context extension (MambaExtend, LongMamba) is Mamba2's alone: ``delta_controls`` returns None for every other
architecture and ``context_extension`` stays None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn

from recemb.core.context_extension import MODES, resolve_mode
from recemb.kernels.workspace import Workspace

__all__ = ["ChunkRun", "RecurrentEncoder", "check_context_extension"]


@dataclass
class ChunkRun:
    """What every layer's forward needs besides its input and state, for one chunk of one call.

    backend: "auto" | "torch" | "triton" (architectures without Triton kernels run torch everywhere);
    workspace: scratch buffers reused by every layer of every chunk (CPU inference; ``recemb.kernels.workspace``);
    chunk_size: the chunk length of the chunk-parallel form (numerics only); None: the layer's default;
    deltas: Mamba2's per-layer context-extension Δ controls (``delta_controls``), None for the plain model;
    last_tokens: (b,) each row's last real token in this chunk (every pooled EOS is one of them), which a
    mixed-precision model computes at full precision (``recemb/core/precision.py``); None: position l - 1 of every row.
    """

    backend: str = "auto"
    workspace: Workspace | None = None
    chunk_size: int | None = None
    deltas: list | None = field(default=None, repr=False)
    last_tokens: torch.Tensor | None = field(default=None, repr=False)

    def delta(self, layer: int):
        """Layer ``layer``'s Δ control, or None."""
        return None if self.deltas is None else self.deltas[layer]

    def last_token_index(self, b: int, l: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows, positions), both (b,): the index of each row's last real token in a (b, l, ...) chunk."""
        last = self.last_tokens if self.last_tokens is not None else torch.full((b,), l - 1)
        return torch.arange(b, device=device), last[:b].to(device)


def check_context_extension(model: "RecurrentEncoder", mode: str) -> str:
    """``mode`` resolved for ``model`` ("off", "mambaextend", "longmamba", "both"); a clear error for a method the
    architecture does not have or the model has not calibrated."""
    if not model.supports_context_extension and mode in MODES and mode not in ("auto", "off"):
        raise ValueError(f"context extension (MambaExtend, LongMamba) exists for Mamba2 only; this model is "
                         f"{model.config.model_type!r}")
    return resolve_mode(model.context_extension, mode)


class RecurrentEncoder(nn.Module):
    """Base class of the architectures: the protocol above, plus what all of them share."""

    config: object
    # Calibrated context-extension artifacts; only Mamba2 has any (``recemb/core/context_extension.py``).
    context_extension = None
    supports_context_extension = False  # MambaExtend and LongMamba act on Mamba2's Δ
    # Low precision on the CPU (``recemb/core/precision.py``): the names of the layers quantize="int8" quantises (after
    # ``prepare_int8``); None: no int8 path. Mixed bf16 is ``to_mixed_precision`` where an architecture has it.
    int8_projections: tuple[str, ...] | None = None

    def prepare_int8(self) -> None:
        """Whatever must happen to the fp32 model before its ``int8_projections`` are quantised."""

    def to_mixed_precision(self, dtype: torch.dtype) -> "RecurrentEncoder":
        raise NotImplementedError(f"{self.config.model_type} has no mixed-precision CPU path")

    def weight_samples(self) -> list[tuple[str, bytes, str]]:
        """What identifies the weights (collections fingerprint the model by it): per tensor of the state dict,
        its name, its first and last 16 values as float64 bytes and its sum to 6 decimals. Taken from the weights as
        loaded: ``keep_weight_samples`` fixes them before a low-precision conversion, so a model run in bf16 or
        int8 is still the model its checkpoint holds (and the quantised state dict, which holds packed weights, is
        never read for it)."""
        kept = getattr(self, "_weight_samples", None)
        if kept is not None:
            return kept
        samples = []
        with torch.no_grad():
            for name, p in sorted(self.state_dict().items()):
                flat = p.detach().reshape(-1)
                sample = torch.cat([flat[:16], flat[-16:]]).double().cpu()
                samples.append((name, sample.numpy().tobytes(), repr(round(float(flat.double().sum()), 6))))
        return samples

    def keep_weight_samples(self) -> None:
        """Fix ``weight_samples`` at the weights as they are now (before a conversion changes them)."""
        self._weight_samples = None
        self._weight_samples = self.weight_samples()

    @property
    def dim(self) -> int:
        return self.config.hidden_size

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def forward_chunk(self, input_ids: torch.Tensor, states: list | None = None, run: ChunkRun | None = None
                      ) -> tuple[torch.Tensor, list]:
        raise NotImplementedError

    def final_norm(self, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def delta_controls(self, full_lengths: torch.Tensor, context_extension: str = "auto") -> list | None:
        """Per-layer Δ controls for rows whose whole inputs are ``full_lengths`` tokens; None for the plain model.
        Architectures without context extension accept "auto" and "off" and return None."""
        check_context_extension(self, context_extension)
        return None

    def forward(self, input_ids: torch.Tensor, backend: str = "auto", chunk_size: int | None = None
                ) -> torch.Tensor:
        """Horizontal forward over the whole input: final-normed hidden states (b, l, d)."""
        h, _ = self.forward_chunk(input_ids, None, ChunkRun(backend=backend, chunk_size=chunk_size))
        return self.final_norm(h)

    def save(self, folder, safe_serialization: bool = True) -> None:
        raise NotImplementedError
