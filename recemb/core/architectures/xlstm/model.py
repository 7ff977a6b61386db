"""xLSTM as a ``RecurrentEncoder``: embeddings -> blocks -> out_norm, one vertical chunk at a time.

State dict keys equal transformers' ``xLSTMModel`` (``embeddings.weight``, ``blocks.{i}.norm_mlstm.weight``,
``blocks.{i}.mlstm_layer.{q,k,v,ogate_preact,igate_preact,fgate_preact,multihead_norm,out_proj}.*``,
``blocks.{i}.norm_ffn.weight``, ``blocks.{i}.ffn.{proj_up_gate,proj_up,proj_down}.weight``, ``out_norm.weight``).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from recemb.core.architectures.xlstm.blocks import XLSTMBlock, XLSTMRMSNorm
from recemb.core.architectures.xlstm.config import XLSTMConfig
from recemb.core.architectures.xlstm.state import XLSTMLayerState, XLSTMState
from recemb.core.encoder import ChunkRun, RecurrentEncoder
from recemb.core.files import write_checkpoint

__all__ = ["XLSTMEncoder"]


class XLSTMEncoder(RecurrentEncoder):
    """embeddings -> blocks -> out_norm (applied by ``final_norm`` at pooled positions only)."""

    def __init__(self, config: XLSTMConfig):
        super().__init__()
        self.config = config
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.blocks = nn.ModuleList(XLSTMBlock(config) for _ in range(config.num_hidden_layers))
        # transformers' xLSTMModel: always there, weight only, fp32 reduction (whatever add_out_norm / use_bias say).
        self.out_norm = XLSTMRMSNorm(config.hidden_size, config.norm_eps)

    def forward_chunk(self, input_ids: torch.Tensor, states: XLSTMState | None = None, run: ChunkRun | None = None
                      ) -> tuple[torch.Tensor, XLSTMState]:
        """input_ids (b, l); states: one ``XLSTMLayerState`` per block before this chunk (None: the start).
        Return the residual stream after the last block (b, l, d), before the final norm, and the new states.

        run.backend: "torch" runs the chunkwise torch form on any device; "auto" runs the mlstm_kernels package's
        Triton kernel on CUDA when it is installed, the torch form otherwise; "triton" asks for that kernel
        (``recemb.kernels.mlstm.mlstm``). run.chunk_size: the torch form's chunk length (None: config.chunk_size).
        run.workspace is not used; run.deltas must be None (no context extension).
        """
        run = run or ChunkRun()
        if run.backend not in ("auto", "torch", "triton"):
            raise ValueError(f"backend must be one of ('auto', 'torch', 'triton'), got {run.backend!r}")
        if run.deltas is not None and any(d is not None for d in run.deltas):
            raise ValueError("xLSTM has no context extension (deltas must be None)")
        chunk_size = self.config.chunk_size if run.chunk_size is None else int(run.chunk_size)
        if states is not None and len(states) != len(self.blocks):
            raise ValueError(f"expected {len(self.blocks)} layer states, got {len(states)}")
        h = self.embeddings(input_ids)  # (b, l, d)
        new_states: XLSTMState = []
        for i, block in enumerate(self.blocks):
            h, s = block(h, None if states is None else states[i], chunk_size, run.backend)
            new_states.append(s)
        return h, new_states

    def final_norm(self, h: torch.Tensor) -> torch.Tensor:
        return self.out_norm(h)

    def zero_states(self, batch: int, device=None) -> XLSTMState:
        """The states at the start of a sequence (what ``states=None`` means), fp32."""
        c = self.config
        device = device or self.embeddings.weight.device
        return [XLSTMLayerState.zeros(batch, c.num_heads, c.qk_head_dim, c.v_head_dim, device)
                for _ in range(c.num_hidden_layers)]

    def save(self, folder, safe_serialization: bool = True) -> None:
        """``config.json`` (transformers' xLSTMConfig) + ``model.safetensors`` (``pytorch_model.bin`` with
        ``safe_serialization=False``) in ``xLSTMModel`` naming."""
        write_checkpoint(folder, self.config.to_transformers_dict(), self.state_dict(), "dtype",
                         self.embeddings.weight.dtype, safetensors=safe_serialization)
