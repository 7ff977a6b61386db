"""RWKV-7 as a ``RecurrentEncoder``: embeddings -> blocks -> ln_out, one vertical chunk at a time.

Parameter names are flash-linear-attention's ``RWKV7Model`` (``embeddings.weight``, ``layers.{i}.*``, ``norm``).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from recemb.core.architectures.rwkv7.blocks import RWKV7Block
from recemb.core.architectures.rwkv7.config import RWKV7Config
from recemb.core.architectures.rwkv7.state import RWKV7LayerState, RWKV7State
from recemb.core.encoder import ChunkRun, RecurrentEncoder
from recemb.core.files import write_checkpoint
from recemb.kernels import BACKENDS

__all__ = ["RWKV7Encoder"]


class RWKV7Encoder(RecurrentEncoder):
    """embeddings -> blocks -> ``final_norm`` (ln_out), with explicit per-layer state
    (``RWKV7LayerState``)."""

    def __init__(self, config: RWKV7Config):
        super().__init__()
        self.config = config
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(RWKV7Block(config, i) for i in range(config.num_hidden_layers))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)

    def forward_chunk(self, input_ids: torch.Tensor, states: RWKV7State | None = None,
                      run: ChunkRun | None = None) -> tuple[torch.Tensor, RWKV7State]:
        """input_ids (b, l); states: one RWKV7LayerState per layer before this chunk (None: the start).
        run.backend: "torch" runs the chunked torch form on any device; "auto" runs flash-linear-attention's
        chunk kernel on CUDA when it is installed, the torch form otherwise; "triton" asks for fla's kernel
        (``recemb.kernels.rwkv7.rwkv7``); run.chunk_size: the torch form's chunk length (None: the config's);
        workspace and deltas are not used.
        Return: the residual stream after the last layer (b, l, d), before ln_out, and the new states."""
        run = run if run is not None else ChunkRun()
        if run.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {run.backend!r}")
        if states is not None and len(states) != len(self.layers):
            raise ValueError(f"states has {len(states)} layers, the model {len(self.layers)}")
        chunk_size = run.chunk_size if run.chunk_size is not None else self.config.chunk_size
        h = self.embeddings(input_ids)  # (b, l, d)
        v_first = None
        new_states: RWKV7State = []
        for i, layer in enumerate(self.layers):
            h, s, v_first = layer(h, None if states is None else states[i], v_first, chunk_size, run.backend)
            new_states.append(s)
        return h, new_states

    def final_norm(self, h: torch.Tensor) -> torch.Tensor:
        return self.norm(h)

    def zero_states(self, batch: int, device=None) -> RWKV7State:
        c = self.config
        device = device or self.embeddings.weight.device
        return [RWKV7LayerState.zeros(batch, c.hidden_size, c.num_heads, c.head_dim, device,
                                      self.embeddings.weight.dtype) for _ in range(c.num_hidden_layers)]

    def save(self, folder, safe_serialization: bool = True) -> None:
        """``config.json`` + ``model.safetensors`` (``pytorch_model.bin`` with ``safe_serialization=False``) in
        flash-linear-attention's format (keys ``model.*``)."""
        state = {"model." + k: v for k, v in self.state_dict().items()}
        write_checkpoint(folder, self.config.to_dict(), state, "torch_dtype", self.embeddings.weight.dtype,
                         safetensors=safe_serialization)
