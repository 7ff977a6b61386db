"""Mamba2 backbone as an encoder: embeddings -> blocks -> final RMSNorm, one vertical chunk at a time.

State dict keys equal transformers' ``Mamba2Model`` (``embeddings.weight``, ``layers.{i}.norm.weight``,
``layers.{i}.mixer.*``, ``norm_f.weight``).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from recemb.core.architectures.mamba2.config import Mamba2Config
from recemb.core.architectures.mamba2.mixer import Mamba2Block, RMSNorm
from recemb.core.architectures.mamba2.state import LayerState, ModelState
from recemb.core.context_extension import ContextExtension, DeltaControl, resolve_mode
from recemb.core.encoder import ChunkRun, RecurrentEncoder
from recemb.core.files import write_checkpoint
from recemb.core.precision import check_saveable

__all__ = ["Mamba2Encoder"]


class Mamba2Encoder(RecurrentEncoder):
    """Mamba2 as a ``RecurrentEncoder`` (``recemb/core/encoder.py``): the one architecture with context extension."""

    supports_context_extension = True
    # What quantize="int8" quantises (``recemb/core/precision.py``). Not out_proj: int8 there loses far too much,
    # even of its weights alone with fp32 activations (docs/benchmarks.md, "Low-precision CPU inference").
    int8_projections = ("mixer.in_proj",)

    def __init__(self, config: Mamba2Config):
        super().__init__()
        self.config = config
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Mamba2Block(config, i) for i in range(config.num_hidden_layers))
        self.norm_f = RMSNorm(config.hidden_size, config.layer_norm_epsilon)
        # Calibrated MambaExtend / LongMamba artifacts (loaded with the model, shared by its callers); each
        # call says which methods run (``delta_controls``). None: plain Mamba2 whatever the mode.
        self.context_extension: ContextExtension | None = None

    def delta_controls(self, full_lengths: torch.Tensor, context_extension: str = "auto"
                       ) -> list[DeltaControl | None] | None:
        """Per-layer Δ hooks for rows whose whole inputs are ``full_lengths`` (b,) tokens, under the caller's
        context-extension mode; None for the plain model."""
        if resolve_mode(self.context_extension, context_extension) == "off":
            return None
        return self.context_extension.layer_controls(full_lengths, self.embeddings.weight.device,
                                                     context_extension)

    def forward_chunk(self, input_ids: torch.Tensor, states: ModelState | None = None, run: ChunkRun | None = None
                      ) -> tuple[torch.Tensor, ModelState]:
        """Run one chunk of tokens through every layer.

        input_ids: (b, l); states: one LayerState per layer, the state before this chunk (None = start);
        run: the call's backend, workspace, scan chunk length and Δ controls (``ChunkRun``). The returned stream
        and states never live in the workspace.
        Return: the residual stream after the last layer (b, l, d), before the final norm, and the new states.
        """
        run = run or ChunkRun()
        h = self.embeddings(input_ids)  # (b, l, d), a fresh tensor the layers may update in place
        new_states: ModelState = []
        for i, layer in enumerate(self.layers):
            h, s = layer(h, None if states is None else states[i], run)
            new_states.append(s)
        return h, new_states

    def keep_exact_gates(self) -> None:
        """Before the projections lose precision: every mixer keeps its gate rows in fp32 (``keep_exact_gate``)."""
        for layer in self.layers:
            layer.mixer.keep_exact_gate()

    def prepare_int8(self) -> None:
        """Before quantize="int8": each block's RMSNorm weight g is folded into in_proj (W·diag(g), the norm's weight
        set to 1: the same function), so that in_proj's input, quantised with one scale per token, carries no
        per-channel scale (its channels' ranges differ less; W's rows take g, quantised per output channel); then
        the gates are kept in fp32."""
        for layer in self.layers:
            g = layer.norm.weight.detach().clone()
            layer.mixer.in_proj.weight.mul_(g.to(layer.mixer.in_proj.weight.dtype)[None, :])
            layer.norm.weight.fill_(1.0)
        self.keep_exact_gates()

    def to_mixed_precision(self, dtype: torch.dtype) -> "Mamba2Encoder":
        """The CPU's low-precision model, in place: the projections and the embedding table in ``dtype`` (bf16),
        everything else (conv, Δ, A, D, norms, residual stream, state) in fp32 (``recemb/core/precision.py``)."""
        if self.embeddings.weight.dtype != torch.float32:
            raise ValueError("to_mixed_precision starts from an fp32 model")
        if self.layers[0].mixer.gate_weight_fp32 is None:  # not yet kept by prepare_int8
            self.keep_exact_gates()
        # The weights that stay fp32 get their own memory: loaded ones may be views of the checkpoint file's
        # mapping, which would otherwise stay mapped (and resident) for a few small tensors.
        for param in self.parameters():
            param.data = param.data.clone()
        self.embeddings.to(dtype)
        for layer in self.layers:
            for projection in (layer.mixer.in_proj, layer.mixer.out_proj):
                if isinstance(projection, nn.Linear):  # an int8-quantised in_proj stays int8
                    projection.to(dtype)
        return self

    def final_norm(self, h: torch.Tensor) -> torch.Tensor:
        return self.norm_f(h)

    def save(self, folder, safe_serialization: bool = True) -> None:
        """transformers' Mamba2 format: ``config.json`` + ``model.safetensors`` (``pytorch_model.bin`` with
        ``safe_serialization=False``) in ``Mamba2Model`` naming. An int8-quantised model is refused."""
        check_saveable(self)
        write_checkpoint(folder, self.config.to_transformers_dict(), self.state_dict(), "torch_dtype",
                         self.embeddings.weight.dtype, safetensors=safe_serialization)

    def zero_states(self, batch: int, device=None, dtype=None) -> ModelState:
        c = self.config
        device = device or self.embeddings.weight.device
        dtype = dtype or self.layers[0].mixer.conv1d.weight.dtype  # the conv's compute dtype holds its state
        return [
            LayerState.zeros(batch, c.conv_dim, c.conv_kernel, c.num_heads, c.head_dim, c.state_size, device, dtype)
            for _ in range(c.num_hidden_layers)
        ]
