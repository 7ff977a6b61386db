"""RWKV-7 settings: one dataclass (flash-linear-attention's ``RWKV7Config`` field names), read from fla's
``config.json`` or off a BlinkDL ``.pth``'s tensor shapes."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from recemb.core.errors import CheckpointError, ConfigError
from recemb.kernels.rwkv7 import DEFAULT_CHUNK_SIZE

__all__ = ["FORMATS_HELP", "PTH_GROUP_NORM_EPS", "RWKV7Config"]

FORMATS_HELP = (
    "recemb reads RWKV-7 checkpoints in flash-linear-attention's Hugging Face format (config.json with "
    "model_type 'rwkv7' + model.safetensors, a sharded model.safetensors.index.json, or pytorch_model.bin) "
    "and BlinkDL's original format (one *.pth in a folder without config.json)"
)
PTH_GROUP_NORM_EPS = 64e-5  # the rwkv package's (and RWKV-LM's) GroupNorm eps, for any head size


def _round_up(x: float, multiple: int) -> int:
    return multiple * math.ceil(x / multiple)


@dataclass
class RWKV7Config:
    """RWKV-7 settings; field names follow flash-linear-attention's ``RWKV7Config``."""

    vocab_size: int = 65536
    hidden_size: int = 768  # d
    num_hidden_layers: int = 12
    head_dim: int = 64  # n, the head size (key = value size); num_heads = hidden_size / head_dim
    decay_low_rank_dim: int = 64  # w LoRA (w1: d -> D_w, tanh, w2: D_w -> d, bias w0)
    a_low_rank_dim: int = 64  # in-context learning rate LoRA (a1, a2, bias a0)
    v_low_rank_dim: int = 32  # value residual LoRA (v1, v2, bias v0), layers >= 1
    gate_low_rank_dim: int = 128  # gate LoRA (g1, sigmoid, g2), no bias
    intermediate_size: int | None = None  # I, the channel mix; None: 4 d rounded up to a multiple of 32 (fla)
    norm_eps: float = 1e-5  # the LayerNorms (ln0, ln1, ln2, ln_out)
    group_norm_eps: float | None = None  # ln_x; None: head_dim * norm_eps (fla); the rwkv package: 64e-5
    norm_bias: bool = True  # LayerNorms with a bias
    norm_first: bool = True  # layer 0 normalises the embeddings (ln0 / pre_norm)
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    chunk_size: int = DEFAULT_CHUNK_SIZE  # q of the chunked time mix (numerics and speed only)
    torch_dtype: str | None = None  # the dtype the checkpoint was saved in
    model_type: ClassVar[str] = "rwkv7"

    def __post_init__(self) -> None:
        if self.head_dim < 1 or self.hidden_size % self.head_dim:
            raise ConfigError(f"head_dim {self.head_dim} must divide hidden_size {self.hidden_size}")
        if self.intermediate_size is None:
            self.intermediate_size = _round_up(4 * self.hidden_size, 32)
        if self.group_norm_eps is None:
            self.group_norm_eps = self.head_dim * self.norm_eps
        if self.chunk_size < 1:
            raise ConfigError(f"chunk_size must be >= 1, got {self.chunk_size}")

    @property
    def num_heads(self) -> int:  # h
        return self.hidden_size // self.head_dim

    @property
    def head_size(self) -> int:  # n (the rwkv package's name)
        return self.head_dim

    # ------------------------------------------------------------------ formats
    @classmethod
    def from_fla_dict(cls, d: dict[str, Any]) -> "RWKV7Config":
        """flash-linear-attention's ``config.json`` (``model_type: "rwkv7"``), defaults as its RWKV7Config."""
        if d.get("model_type") not in (None, "rwkv7"):
            raise ConfigError(f"model_type {d.get('model_type')!r} is not 'rwkv7'")
        if d.get("attn"):
            raise ConfigError("hybrid RWKV-7 / attention checkpoints (config 'attn') are not supported")
        if d.get("hidden_act", "sqrelu") != "sqrelu":
            raise ConfigError(f"hidden_act {d['hidden_act']!r} is not supported (only 'sqrelu')")
        hidden = int(d.get("hidden_size", 2048))
        layers = int(d.get("num_hidden_layers", 24))
        head_dim, num_heads = d.get("head_dim", 64), d.get("num_heads")
        if head_dim is None:
            if num_heads is None:
                raise ConfigError("the config sets neither head_dim nor num_heads")
            head_dim = hidden // int(num_heads)
        head_dim = int(head_dim)
        value_dim = d.get("value_dim")
        values = [value_dim] * layers if not isinstance(value_dim, list) else value_dim
        if any(v is not None and int(v) != hidden for v in values):
            raise ConfigError(f"value_dim {value_dim} != hidden_size {hidden} is not supported")
        # fla's RWKV7Attention derives unset LoRA widths from the model width (factor: head sizes above 64).
        factor = head_dim / 64

        def lora(name: str, scale: float, use_factor: bool) -> int:
            value = d.get(name)
            if value is not None:
                return int(value)
            return max(32, int(round(scale * hidden ** 0.5 * (factor if use_factor else 1) / 32) * 32))

        intermediate = d.get("intermediate_size")
        if intermediate is None:
            ratio = d.get("hidden_ratio") or 4
            intermediate = _round_up(int(hidden * ratio), 32)
        norm_eps = float(d.get("norm_eps", 1e-5))
        dtype = d.get("torch_dtype", d.get("dtype"))
        return cls(
            vocab_size=int(d.get("vocab_size", 32000)), hidden_size=hidden, num_hidden_layers=layers,
            head_dim=head_dim, decay_low_rank_dim=lora("decay_low_rank_dim", 2.5, True),
            a_low_rank_dim=lora("a_low_rank_dim", 2.5, True),
            v_low_rank_dim=lora("v_low_rank_dim", 1.7, True),
            gate_low_rank_dim=lora("gate_low_rank_dim", 5, False), intermediate_size=int(intermediate),
            norm_eps=norm_eps, group_norm_eps=float(d.get("group_norm_eps", head_dim * norm_eps)),
            norm_bias=bool(d.get("norm_bias", True)), norm_first=bool(d.get("norm_first", True)),
            pad_token_id=d.get("pad_token_id"), bos_token_id=d.get("bos_token_id"),
            eos_token_id=d.get("eos_token_id"), chunk_size=int(d.get("chunk_size", DEFAULT_CHUNK_SIZE)),
            torch_dtype=dtype if isinstance(dtype, str) else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The config as written to config.json (the protocol's name; for RWKV-7, fla's dict)."""
        return self.to_fla_dict()

    def to_fla_dict(self) -> dict[str, Any]:
        """``config.json`` for flash-linear-attention's RWKV7ForCausalLM / RWKV7Model (plus ``group_norm_eps``
        and ``chunk_size``, which fla ignores)."""
        return {
            "model_type": "rwkv7", "architectures": ["RWKV7ForCausalLM"], "attn_mode": "chunk", "attn": None,
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers, "head_dim": self.head_dim,
            "num_heads": self.num_heads,
            "decay_low_rank_dim": self.decay_low_rank_dim, "a_low_rank_dim": self.a_low_rank_dim,
            "v_low_rank_dim": self.v_low_rank_dim, "gate_low_rank_dim": self.gate_low_rank_dim,
            "intermediate_size": self.intermediate_size,
            "hidden_ratio": self.intermediate_size / self.hidden_size,
            "hidden_act": "sqrelu", "norm_eps": self.norm_eps, "norm_bias": self.norm_bias,
            "norm_first": self.norm_first, "value_dim": [self.hidden_size] * self.num_hidden_layers,
            "tie_word_embeddings": False, "pad_token_id": self.pad_token_id,
            "bos_token_id": self.bos_token_id, "eos_token_id": self.eos_token_id,
            "group_norm_eps": self.group_norm_eps, "chunk_size": self.chunk_size,
            "torch_dtype": self.torch_dtype,
        }

    @classmethod
    def from_pth_state(cls, state: dict[str, torch.Tensor], source: Path | str = "checkpoint"
                       ) -> "RWKV7Config":
        """The config of a BlinkDL ``.pth``, read off its tensor shapes (it has no config file)."""
        needed = ("emb.weight", "blocks.0.att.r_k", "blocks.0.att.w1", "blocks.0.att.a1", "blocks.0.att.g1",
                  "blocks.0.ffn.key.weight")
        missing = [k for k in needed if k not in state]
        if missing:
            raise CheckpointError(
                f"{source}: not an RWKV-7 checkpoint, tensor(s) {missing} missing. {FORMATS_HELP}")
        if any(re.fullmatch(r"blocks\.\d+\.ffn\.(s_emb.*|s[012])", k) for k in state):
            raise ConfigError(
                f"{source}: the DeepEmbed variant of RWKV-7 (ffn.s_emb, s0/s1/s2) is not supported")
        vocab, hidden = state["emb.weight"].shape
        heads, head_size = state["blocks.0.att.r_k"].shape
        if heads * head_size != hidden:
            raise CheckpointError(f"{source}: blocks.0.att.r_k has shape {(heads, head_size)}, but heads x "
                                    f"head size must equal the embedding width {hidden}")
        layers = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"blocks\.(\d+)\.", k)))
        v1 = state.get("blocks.1.att.v1")
        return cls(
            vocab_size=int(vocab), hidden_size=int(hidden), num_hidden_layers=layers, head_dim=int(head_size),
            decay_low_rank_dim=int(state["blocks.0.att.w1"].shape[1]),
            a_low_rank_dim=int(state["blocks.0.att.a1"].shape[1]),
            v_low_rank_dim=int(v1.shape[1]) if v1 is not None else 32,
            gate_low_rank_dim=int(state["blocks.0.att.g1"].shape[1]),
            intermediate_size=int(state["blocks.0.ffn.key.weight"].shape[0]), norm_eps=1e-5,
            group_norm_eps=PTH_GROUP_NORM_EPS, norm_bias="ln_out.bias" in state,
            norm_first=True, pad_token_id=0,  # ln0 is required (the rwkv package reads it too)
            torch_dtype=str(state["emb.weight"].dtype).replace("torch.", ""),
        )
