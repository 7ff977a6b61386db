"""xLSTM (the xLSTM-7B architecture, mLSTM blocks only) as a recemb encoder, one vertical chunk at a time.

The model is transformers' ``xLSTMModel`` (models/xlstm/modeling_xlstm.py, v5.24; ``model_type: "xlstm"``), which
is the ``xlstm`` package's ``xLSTMLarge`` (xlstm/xlstm_large/model.py, 2.0.6) under other key names:

    embeddings -> blocks (x + mLSTM(RMSNorm(x)); x + FFN(RMSNorm(x))) -> out_norm (RMSNorm)
    mLSTM layer: q, k (d -> qk_dim), v, o (d -> v_dim), i, f (d -> h, with bias) from the same normed input;
        i, f soft-capped (cap * tanh(x / cap)); the mLSTM cell (``recemb.kernels.mlstm``) per head;
        a LayerNorm per head (``multihead_norm``), times sigmoid(o); out_proj (v_dim -> d)
    FFN: proj_down(silu(proj_up_gate(x)) * proj_up(x)), width round_up(d * ffn_proj_factor, multiple)

State dict keys equal transformers' ``xLSTMModel`` (``embeddings.weight``, ``blocks.{i}.norm_mlstm.weight``,
``blocks.{i}.mlstm_layer.{q,k,v,ogate_preact,igate_preact,fgate_preact,multihead_norm,out_proj}.*``,
``blocks.{i}.norm_ffn.weight``, ``blocks.{i}.ffn.{proj_up_gate,proj_up,proj_down}.weight``, ``out_norm.weight``).

Shape glossary (as ``recemb.kernels.mlstm``): b batch, l tokens in this (vertical) chunk, d model width,
h heads, dk = qk_dim / h query/key head dim, dv = v_dim / h value head dim.

The state carried across vertical chunks is the mLSTM cell's (C, n, m) per layer (``XLSTMLayerState``); the
blocks have no convolution or other memory, so nothing else crosses a chunk boundary.

Formats read (``detect`` / ``load``):
- "transformers": ``config.json`` with ``model_type: "xlstm"`` and ``model.safetensors`` (or sharded with its
  index, or ``pytorch_model.bin``); ``xLSTMForCausalLM`` checkpoints too (``backbone.`` prefix, ``lm_head``
  dropped). ``save`` writes this format.
- "xlstm": the ``xlstm`` package's own (``xlstm.xlstm_large.from_pretrained``): ``config.yaml`` (the
  ``xLSTMLargeConfig`` fields) and ``model.safetensors`` or ``model_0.safetensors, model_1.safetensors, ...``,
  keys ``embedding.weight``, ``backbone.blocks.*``, ``backbone.out_norm.*``, ``lm_head.weight``.

Modules: ``config`` (``XLSTMConfig``), ``state`` (``XLSTMLayerState``), ``blocks`` (the layers), ``model``
(``XLSTMEncoder``), ``load`` (``detect``, ``load``), ``memory`` (``chunk_memory``, for ``max_memory`` budgets);
``ARCHITECTURE`` is the registry's entry.
"""

from __future__ import annotations

from typing import Any

from recemb.core.architectures.descriptor import Architecture
from recemb.core.architectures.xlstm.blocks import MLSTMLayer, XLSTMBlock
from recemb.core.architectures.xlstm.config import XLSTMConfig
from recemb.core.architectures.xlstm.load import detect, load, read_config, read_state_dict, to_encoder_keys
from recemb.core.architectures.xlstm.memory import chunk_memory
from recemb.core.architectures.xlstm.model import XLSTMEncoder
from recemb.core.architectures.xlstm.state import XLSTMLayerState, XLSTMState

__all__ = ["ARCHITECTURE", "MLSTMLayer", "XLSTMBlock", "XLSTMConfig", "XLSTMEncoder", "XLSTMLayerState",
           "XLSTMState", "describe", "detect", "load", "read_config", "read_state_dict", "to_encoder_keys"]


def describe(config: XLSTMConfig) -> dict[str, Any]:
    """``recemb info``'s shape fields: xLSTM has heads (its head sizes are qk_head_dim and v_head_dim)."""
    return {"heads": config.num_heads}


ARCHITECTURE = Architecture(
    name="xlstm",
    display_name="xLSTM",
    detect=detect,
    load=load,
    save_format="transformers",
    formats="xLSTM as transformers' (config.json with model_type 'xlstm') or the xlstm package's (config.yaml + "
            "model_N.safetensors)",
    backbone="a transformers `xLSTMModel` checkpoint (`transformers.xLSTMModel.from_pretrained` loads the backbone)",
    describe=describe,
    chunk_memory=chunk_memory,
)
