"""Mamba2 (SSD) as a recemb encoder, one vertical chunk at a time: the one architecture with context extension
(MambaExtend, LongMamba) and a mixed-precision / int8 CPU path.

The model is transformers' ``Mamba2Model`` (and mamba_ssm's ``Mamba2``) with explicit per-layer state:

    embeddings -> blocks (h + mixer(RMSNorm(h)), residual in fp32) -> norm_f (RMSNorm)
    mixer: in_proj -> (z, xBC, dt) -> causal conv1d -> SiLU -> (x, B, C) -> SSD scan (``recemb.kernels``)
        -> gated RMSNorm(y, z) -> out_proj

Modules: ``config`` (``Mamba2Config``, with the in_proj row layout ``in_proj_rows``), ``state``
(``LayerState``: conv state, SSM state), ``mixer`` (the mixer and block), ``model`` (``Mamba2Encoder``), ``load``
(``detect``, ``load``: transformers, mamba_ssm and mistral_inference checkpoints), ``memory`` (``chunk_memory``:
one chunk's peak bytes, for memory budgets), ``calibration`` (``calibrate``: the context-extension artifacts,
imported by the ``recemb calibrate`` command, not by this package); ``ARCHITECTURE`` is the registry's entry.
"""

from __future__ import annotations

from typing import Any

from recemb.core.architectures.descriptor import Architecture
from recemb.core.architectures.mamba2.config import Mamba2Config
from recemb.core.architectures.mamba2.load import FORMATS, detect, load, read_config, read_state_dict, to_encoder_keys
from recemb.core.architectures.mamba2.memory import chunk_memory
from recemb.core.architectures.mamba2.mixer import Mamba2Block, Mamba2Mixer
from recemb.core.architectures.mamba2.model import Mamba2Encoder
from recemb.core.architectures.mamba2.state import LayerState, ModelState

__all__ = ["ARCHITECTURE", "LayerState", "Mamba2Block", "Mamba2Config", "Mamba2Encoder", "Mamba2Mixer",
           "ModelState", "describe", "detect", "load", "read_config", "read_state_dict", "to_encoder_keys"]


def describe(config: Mamba2Config) -> dict[str, Any]:
    """``recemb info``'s shape fields: SSM heads, head dim p, state size n and B/C groups g."""
    return {"heads": config.num_heads, "head_dim": config.head_dim, "state_size": config.state_size,
            "n_groups": config.n_groups}


ARCHITECTURE = Architecture(
    name="mamba2",
    display_name="Mamba2",
    detect=detect,
    load=load,
    save_format="transformers",
    formats=FORMATS,
    backbone="a transformers `Mamba2Model` checkpoint (`transformers.Mamba2Model.from_pretrained` loads the "
             "backbone)",
    describe=describe,
    cpu_mixed_precision=True,
    chunk_memory=chunk_memory,
)
