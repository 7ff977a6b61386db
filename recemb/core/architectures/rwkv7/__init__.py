"""RWKV-7 ("Goose", x070) as a recemb encoder, one vertical chunk at a time.

The model is the ``rwkv`` package's ``RWKV_x070`` (rwkv/model.py with RWKV_V7_ON=1, 0.8.x; BlinkDL's RWKV-LM
RWKV-v7), which flash-linear-attention's ``RWKV7Model`` (fla/models/rwkv7, 0.6) implements under other key
names:

    embeddings -> LayerNorm ln0 (layer 0 only) -> blocks -> final LayerNorm (ln_out)
    block: x + TimeMix(LayerNorm(x)), then x + ChannelMix(LayerNorm(x))
    TimeMix: token shift (each of r, w, k, v, a, g mixes the token with the one before, per channel);
        r, k, v full projections; w = -e^{-0.5} sigmoid(w0 + tanh(x w1) w2) the log decay;
        a = sigmoid(a0 + x a1 a2) the in-context learning rate; g = sigmoid(x g1) g2 the output gate;
        value residual: layer 0's v is "v_first", later layers move v towards it by sigmoid(v0 + x v1 v2);
        kk = L2-normalised (k * k_k) per head, k <- k (1 + (a - 1) k_a);
        the generalised delta rule (``recemb.kernels.rwkv7``) with a = -kk, b = kk * a;
        per-head GroupNorm (ln_x), + ((r * k * r_k) summed per head) * v, times g, output projection
    ChannelMix: token shift (x_k), value(relu(key(x))^2)

Shape glossary: b batch, l tokens in this (vertical) chunk, d model width, h heads, n head size (d = h n),
I the channel mix's width.

The state carried across vertical chunks (``RWKV7LayerState``, per layer): the time mix's token-shift input
(the last token's attn_norm output), the wkv state S (b, h, n, n) (value rows, key columns: the ``rwkv``
package's layout), and the channel mix's token-shift input (the last token's ffn_norm output). v_first is
*not* carried: layer 0 computes it for each token from that same token, so a chunk has it for all of its
tokens.

Parameter names are flash-linear-attention's ``RWKV7Model`` (``embeddings.weight``, ``layers.{i}.pre_norm``
(layer 0), ``layers.{i}.attn_norm``, ``layers.{i}.attn.{x_r,...,x_g,k_k,k_a,r_k}``,
``layers.{i}.attn.{r,k,v,o}_proj.weight``, ``layers.{i}.attn.{w,a,v,g}_lora.lora.{0,2}.*``,
``layers.{i}.attn.g_norm``, ``layers.{i}.ffn_norm``, ``layers.{i}.ffn.{x_k,key,value}``, ``norm``).

Formats read (``detect`` / ``load``):
- "fla": flash-linear-attention's Hugging Face format, ``config.json`` with ``model_type: "rwkv7"`` and
  ``model.safetensors`` (or sharded with its index, or ``pytorch_model.bin``), keys ``model.*`` (``lm_head``
  dropped). ``save`` writes this format.
- "rwkv_pth": BlinkDL's original checkpoint, the one ``*.pth`` of a folder without config.json (what the
  ``rwkv`` package loads), keys ``emb.weight``, ``blocks.{i}.{ln0,ln1,ln2,att.*,ffn.*}``, ``ln_out.*``,
  ``head.weight`` (dropped); the config is read off the tensor shapes.

Numerics that differ between the two sources: the GroupNorm eps is 64e-5 in the rwkv package whatever the
head size, head_dim * norm_eps in fla (equal for n = 64, every released model); a ``.pth`` loads with 64e-5
and ``save`` records it as ``group_norm_eps`` (a key fla ignores). The log-decay scale is e^{-0.5} exactly
(the training code's -softplus(-x) - 0.5); the rwkv package's one-token path rounds it to 0.606531 (5.6e-7
relative).

Modules: ``config`` (``RWKV7Config``), ``state`` (``RWKV7LayerState``), ``blocks`` (the layers), ``model``
(``RWKV7Encoder``), ``load`` (``detect``, ``load`` and the key mappings), ``memory`` (``chunk_memory``, for
``max_memory`` budgets); ``ARCHITECTURE`` is the registry's entry.
"""

from __future__ import annotations

from typing import Any

from recemb.core.architectures.descriptor import Architecture
from recemb.core.architectures.rwkv7.blocks import RWKV7Block, RWKV7ChannelMix, RWKV7TimeMix
from recemb.core.architectures.rwkv7.config import RWKV7Config
from recemb.core.architectures.rwkv7.load import (
    detect,
    fla_to_encoder_keys,
    load,
    pth_to_encoder_keys,
    read_config,
    read_state_dict,
    to_encoder_keys,
)
from recemb.core.architectures.rwkv7.memory import chunk_memory
from recemb.core.architectures.rwkv7.model import RWKV7Encoder
from recemb.core.architectures.rwkv7.state import RWKV7LayerState, RWKV7State

__all__ = ["ARCHITECTURE", "RWKV7Block", "RWKV7ChannelMix", "RWKV7Config", "RWKV7Encoder", "RWKV7LayerState",
           "RWKV7State", "RWKV7TimeMix", "describe", "detect", "fla_to_encoder_keys", "load", "pth_to_encoder_keys",
           "read_config", "read_state_dict", "to_encoder_keys"]


def describe(config: RWKV7Config) -> dict[str, Any]:
    """``recemb info``'s shape fields: RWKV-7 has heads and a head size (its state is n x n per head)."""
    return {"heads": config.num_heads, "head_dim": config.head_dim}


ARCHITECTURE = Architecture(
    name="rwkv7",
    display_name="RWKV-7",
    detect=detect,
    load=load,
    save_format="fla",
    formats="RWKV-7 as the rwkv package's .pth or flash-linear-attention's format (model_type 'rwkv7')",
    backbone="an RWKV-7 checkpoint in flash-linear-attention's format (`fla.models.RWKV7Model`)",
    describe=describe,
    chunk_memory=chunk_memory,
)
