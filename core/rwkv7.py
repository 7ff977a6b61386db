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
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from recemb.core.encoder import ChunkRun, RecurrentEncoder
from recemb.core.errors import CheckpointError, ConfigError
from recemb.core.files import (
    check_tensor_names,
    checkpoint_dtype,
    default_dtype,
    read_json,
    HF_WEIGHT_FILES,
    read_weight_file,
    read_weights,
    write_checkpoint,
)
from recemb.kernels import BACKENDS
from recemb.kernels.rwkv7 import DEFAULT_CHUNK_SIZE, rwkv7_chunked

FORMATS_HELP = (
    "recemb reads RWKV-7 checkpoints in flash-linear-attention's Hugging Face format (config.json with "
    "model_type 'rwkv7' + model.safetensors, a sharded model.safetensors.index.json, or pytorch_model.bin) "
    "and BlinkDL's original format (one *.pth in a folder without config.json)"
)
DECAY_SCALE = math.exp(-0.5)  # log decay = -DECAY_SCALE * sigmoid(...): the factor lies in [e^{-e^{-0.5}}, 1)
PTH_GROUP_NORM_EPS = 64e-5  # the rwkv package's (and RWKV-LM's) GroupNorm eps, for any head size
MIX_NAMES = ("r", "w", "k", "v", "a", "g")  # the time mix's token-shift coefficients x_r ... x_g, in order




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


# -------------------------------------------------------------------------------------------------- state
class RWKV7LayerState(NamedTuple):
    """What one layer carries from one vertical chunk to the next."""

    attn_shift: torch.Tensor  # (b, d): the time mix's input (attn_norm output) at the last token, model dtype
    wkv: torch.Tensor  # (b, h, n, n), fp32: the delta-rule state, value rows and key columns (rwkv's layout)
    ffn_shift: torch.Tensor  # (b, d): the channel mix's input (ffn_norm output) at the last token

    @staticmethod
    def zeros(batch: int, hidden_size: int, num_heads: int, head_dim: int,
              device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
              ) -> "RWKV7LayerState":
        return RWKV7LayerState(
            torch.zeros(batch, hidden_size, device=device, dtype=dtype),
            torch.zeros(batch, num_heads, head_dim, head_dim, device=device, dtype=torch.float32),
            torch.zeros(batch, hidden_size, device=device, dtype=dtype),
        )

    def keep_rows(self, n: int) -> "RWKV7LayerState":
        """The state of the first n sequences of the batch (finished sequences leave from the end)."""
        return RWKV7LayerState(self.attn_shift[:n], self.wkv[:n], self.ffn_shift[:n])


RWKV7State = list[RWKV7LayerState]  # one per layer


# ------------------------------------------------------------------------------------------------- blocks
class LoRA(nn.Module):
    """x -> lora.2(act(lora.0(x))): fla's LoRA (keys ``lora.0.weight``, ``lora.2.weight``,
    ``lora.2.bias``)."""

    def __init__(self, d_in: int, d_out: int, rank: int, activation: str | None, bias: bool = True):
        super().__init__()
        act = {None: nn.Identity(), "tanh": nn.Tanh(), "sigmoid": nn.Sigmoid()}[activation]
        self.lora = nn.Sequential(nn.Linear(d_in, rank, bias=False), act, nn.Linear(rank, d_out, bias=bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lora(x)


def _token_shift(x: torch.Tensor, last: torch.Tensor | None) -> torch.Tensor:
    """(b, l, d) -> the previous token's x at every position (the carried ``last`` (b, d), zeros at the
    start)."""
    first = x.new_zeros(x.shape[0], 1, x.shape[2]) if last is None else last[:, None].to(x.dtype)
    return torch.cat([first, x[:, :-1]], dim=1)


class RWKV7TimeMix(nn.Module):
    def __init__(self, config: RWKV7Config, layer_idx: int):
        super().__init__()
        c = config
        d, h, n = c.hidden_size, c.num_heads, c.head_dim
        self.layer_idx = layer_idx
        self.num_heads, self.head_dim = h, n
        self.group_norm_eps = c.group_norm_eps
        for name in MIX_NAMES:
            setattr(self, f"x_{name}", nn.Parameter(torch.zeros(1, 1, d)))
        self.k_k = nn.Parameter(torch.zeros(d))
        self.k_a = nn.Parameter(torch.zeros(d))
        self.r_k = nn.Parameter(torch.zeros(h, n))
        self.r_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.w_lora = LoRA(d, d, c.decay_low_rank_dim, "tanh")
        if layer_idx != 0:  # layer 0 defines v_first; the others mix towards it
            self.v_lora = LoRA(d, d, c.v_low_rank_dim, None)
        self.a_lora = LoRA(d, d, c.a_low_rank_dim, None)
        self.g_lora = LoRA(d, d, c.gate_low_rank_dim, "sigmoid", bias=False)
        self.g_norm = nn.GroupNorm(h, d, eps=c.group_norm_eps)

    def forward(self, x: torch.Tensor, shift: torch.Tensor | None, wkv: torch.Tensor | None,
                v_first: torch.Tensor | None, chunk_size: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: (b, l, d) the normed input; shift (b, d) and wkv (b, h, n, n) the carried state (None: start);
        v_first (b, l, d): layer 0's values (None at layer 0).
        Return: out (b, l, d), the new wkv state, v_first."""
        bsz, l, d = x.shape
        h, n = self.num_heads, self.head_dim
        delta = _token_shift(x, shift) - x  # x_{t-1} - x_t
        xr, xw, xk, xv, xa, xg = (x + delta * getattr(self, f"x_{name}") for name in MIX_NAMES)

        r = self.r_proj(xr)
        fp = torch.promote_types(x.dtype, torch.float32)  # the decay, the delta rule and ln_x: fp32 at least
        w = -DECAY_SCALE * torch.sigmoid(self.w_lora(xw).to(fp))  # (b, l, d) log decay
        k = self.k_proj(xk)
        v = self.v_proj(xv)
        if v_first is None:
            v_first = v
        else:  # value residual: v + (v_first - v) * sigmoid(v0 + xv v1 v2)
            v = v + (v_first - v) * torch.sigmoid(self.v_lora(xv))
        a = torch.sigmoid(self.a_lora(xa))
        g = self.g_lora(xg)
        kk = F.normalize((k * self.k_k).view(bsz, l, h, n), dim=-1, p=2.0)  # (b, l, h, n)
        k = k * (1 + (a - 1) * self.k_a)

        heads = lambda t: t.view(bsz, l, h, n)  # noqa: E731
        o, wkv = rwkv7_chunked(heads(r), heads(w), heads(k), heads(v), -kk, kk * heads(a), initial_state=wkv,
                               chunk_size=chunk_size)  # o (b, l, h, n), wkv (b, h, n, n): fp32 (fp64)
        o = F.group_norm(o.reshape(bsz * l, d), h, self.g_norm.weight.to(fp), self.g_norm.bias.to(fp),
                         self.group_norm_eps).view(bsz, l, h, n).to(x.dtype)
        o = o + (heads(r) * heads(k) * self.r_k).sum(-1, keepdim=True) * heads(v)  # the per-head "bonus"
        return self.o_proj(o.reshape(bsz, l, d) * g), wkv, v_first


class RWKV7ChannelMix(nn.Module):
    def __init__(self, config: RWKV7Config):
        super().__init__()
        d = config.hidden_size
        self.x_k = nn.Parameter(torch.zeros(d))
        self.key = nn.Linear(d, config.intermediate_size, bias=False)
        self.value = nn.Linear(config.intermediate_size, d, bias=False)

    def forward(self, x: torch.Tensor, shift: torch.Tensor | None) -> torch.Tensor:
        k = x + (_token_shift(x, shift) - x) * self.x_k
        return self.value(torch.relu(self.key(k)).square())


class RWKV7Block(nn.Module):
    def __init__(self, config: RWKV7Config, layer_idx: int):
        super().__init__()
        d, eps, bias = config.hidden_size, config.norm_eps, config.norm_bias
        if config.norm_first and layer_idx == 0:
            self.pre_norm = nn.LayerNorm(d, eps=eps, bias=bias)  # ln0 on the embeddings
        self.attn_norm = nn.LayerNorm(d, eps=eps, bias=bias)  # ln1
        self.attn = RWKV7TimeMix(config, layer_idx)
        self.ffn_norm = nn.LayerNorm(d, eps=eps, bias=bias)  # ln2
        self.ffn = RWKV7ChannelMix(config)

    def forward(self, h: torch.Tensor, state: RWKV7LayerState | None, v_first: torch.Tensor | None,
                chunk_size: int) -> tuple[torch.Tensor, RWKV7LayerState, torch.Tensor]:
        if hasattr(self, "pre_norm"):
            h = self.pre_norm(h)
        x = self.attn_norm(h)
        out, wkv, v_first = self.attn(x, None if state is None else state.attn_shift,
                                      None if state is None else state.wkv, v_first, chunk_size)
        h = h + out
        y = self.ffn_norm(h)
        h = h + self.ffn(y, None if state is None else state.ffn_shift)
        return h, RWKV7LayerState(x[:, -1].clone(), wkv, y[:, -1].clone()), v_first


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
        run.backend: "auto" and "torch" run the chunked torch form on any device (there are no Triton kernels
        for RWKV-7); run.chunk_size: its chunk length (None: the config's); workspace and deltas are not
        used.
        Return: the residual stream after the last layer (b, l, d), before ln_out, and the new states."""
        run = run if run is not None else ChunkRun()
        if run.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {run.backend!r}")
        if run.backend == "triton":
            raise ValueError('RWKV-7 has no Triton kernels in recemb: use backend="torch" or "auto" (both '
                             "run the chunked torch form, on any device)")
        if states is not None and len(states) != len(self.layers):
            raise ValueError(f"states has {len(states)} layers, the model {len(self.layers)}")
        chunk_size = run.chunk_size if run.chunk_size is not None else self.config.chunk_size
        h = self.embeddings(input_ids)  # (b, l, d)
        v_first = None
        new_states: RWKV7State = []
        for i, layer in enumerate(self.layers):
            h, s, v_first = layer(h, None if states is None else states[i], v_first, chunk_size)
            new_states.append(s)
        return h, new_states

    def final_norm(self, h: torch.Tensor) -> torch.Tensor:
        return self.norm(h)

    def zero_states(self, batch: int, device=None) -> RWKV7State:
        c = self.config
        device = device or self.embeddings.weight.device
        return [RWKV7LayerState.zeros(batch, c.hidden_size, c.num_heads, c.head_dim, device,
                                      self.embeddings.weight.dtype) for _ in range(c.num_hidden_layers)]

    def save(self, folder) -> None:
        """``config.json`` + ``model.safetensors`` in flash-linear-attention's format (keys ``model.*``)."""
        state = {"model." + k: v for k, v in self.state_dict().items()}
        write_checkpoint(folder, self.config.to_dict(), state, "torch_dtype", self.embeddings.weight.dtype)


# ---------------------------------------------------------------------------------------------------- loading
def detect(folder: Path) -> str | None:
    """"fla" (config.json with model_type "rwkv7"), "rwkv_pth" (no config.json or params.json, and a
    ``*.pth``), or None when the folder holds no RWKV-7 checkpoint."""
    folder = Path(folder)
    config_json = folder / "config.json"
    if config_json.is_file():
        try:
            d = json.loads(config_json.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        return "fla" if isinstance(d, dict) and d.get("model_type") == "rwkv7" else None
    if (folder / "params.json").is_file():
        return None
    return "rwkv_pth" if any(folder.glob("*.pth")) else None


def read_config(folder: Path, fmt: str, state: dict[str, torch.Tensor] | None = None) -> RWKV7Config:
    """The config of a folder; "rwkv_pth" reads it off the raw tensors (``state``, read when not given)."""
    folder = Path(folder)
    if fmt == "fla":
        return RWKV7Config.from_fla_dict(read_json(folder / "config.json", FORMATS_HELP))
    if fmt == "rwkv_pth":
        return RWKV7Config.from_pth_state(read_state_dict(folder, fmt) if state is None else state,
                                          _pth_file(folder))
    raise ValueError(f"unknown RWKV-7 format {fmt!r} (expected 'fla' or 'rwkv_pth')")


def read_state_dict(folder: Path, fmt: str) -> dict[str, torch.Tensor]:
    """The raw tensors of the folder's weight file(s) (on the CPU), under the file's own key names."""
    folder = Path(folder)
    if fmt == "rwkv_pth":
        return read_weight_file(_pth_file(folder))
    return read_weights(folder, HF_WEIGHT_FILES, "an RWKV-7 config.json", FORMATS_HELP)


def _pth_file(folder: Path) -> Path:
    files = sorted(Path(folder).glob("*.pth"))
    if len(files) != 1:
        raise FileNotFoundError(f"{folder}: an RWKV-7 .pth folder must hold exactly one *.pth file, found "
                                f"{[f.name for f in files] or 'none'}. {FORMATS_HELP}")
    return files[0]


# BlinkDL names inside a block -> fla names (the part after "layers.{i}.").
_PTH_BLOCK = {"ln0": "pre_norm", "ln1": "attn_norm", "ln2": "ffn_norm"}
_PTH_ATT = {"receptance.weight": "r_proj.weight", "key.weight": "k_proj.weight",
            "value.weight": "v_proj.weight", "output.weight": "o_proj.weight", "ln_x.weight": "g_norm.weight",
            "ln_x.bias": "g_norm.bias"}
# w0 the bias; w1 (d, D) and w2 (D, d) multiply from the right (x @ w1), so they are nn.Linear's transposes
_PTH_LORA = {"0": "lora.2.bias", "1": "lora.0.weight", "2": "lora.2.weight"}


def pth_to_encoder_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """BlinkDL ``.pth`` names onto ``RWKV7Encoder`` keys: LoRA matrices transposed (the .pth multiplies
    x @ w1, nn.Linear stores the transpose), (1, 1, d) vectors kept as they are (the loader reshapes them to
    the parameter's shape); ``head.weight`` and layer 0's unused v0/v1/v2 dropped."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        if key == "head.weight" or re.fullmatch(r"blocks\.0\.att\.v[012]", key):
            continue
        if key == "emb.weight":
            out["embeddings.weight"] = tensor
            continue
        if key.startswith("ln_out."):
            out["norm." + key[len("ln_out."):]] = tensor
            continue
        m = re.fullmatch(r"blocks\.(\d+)\.(\w+)\.(.+)", key)
        if m is None:
            out[key] = tensor  # unexpected: reported by check_state_dict under its own name
            continue
        i, part, rest = m.groups()
        prefix = f"layers.{i}."
        if part in _PTH_BLOCK:
            out[prefix + _PTH_BLOCK[part] + "." + rest] = tensor
        elif part == "att":
            lora = re.fullmatch(r"([wavg])([012])", rest)
            if lora:
                name, num = lora.groups()
                out[f"{prefix}attn.{name}_lora.{_PTH_LORA[num]}"] = tensor.t() if num != "0" else tensor
            else:
                out[prefix + "attn." + _PTH_ATT.get(rest, rest)] = tensor
        elif part == "ffn":
            out[prefix + "ffn." + rest] = tensor
        else:
            out[key] = tensor
    return out


def fla_to_encoder_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """fla names (``model.*``; ``lm_head`` dropped) onto ``RWKV7Encoder`` keys; version-1 fla checkpoints'
    stacked token-shift coefficients ``attn.x_x`` (6, d) are split into x_r ... x_g as fla's own loader
    does."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        if key.startswith("lm_head."):
            continue
        key = key[len("model."):] if key.startswith("model.") else key
        if key.endswith(".attn.x_x"):
            for j, name in enumerate(MIX_NAMES):
                out[key[: -len("x_x")] + f"x_{name}"] = tensor[j]
            continue
        out[key] = tensor
    return out


def to_encoder_keys(state: dict[str, torch.Tensor], fmt: str) -> dict[str, torch.Tensor]:
    if fmt == "rwkv_pth":
        return pth_to_encoder_keys(state)
    if fmt == "fla":
        return fla_to_encoder_keys(state)
    raise ValueError(f"unknown RWKV-7 format {fmt!r} (expected 'fla' or 'rwkv_pth')")


def load(folder: Path, fmt: str, device: torch.device, dtype: torch.dtype | None = None) -> RWKV7Encoder:
    """An ``RWKV7Encoder`` from a folder in format ``fmt`` (``detect``'s answer).

    dtype None: fp32 on the CPU, the checkpoint's dtype elsewhere.
    """
    folder = Path(folder)
    device = torch.device(device)
    raw = read_state_dict(folder, fmt)
    config = read_config(folder, fmt, raw if fmt == "rwkv_pth" else None)
    state = to_encoder_keys(raw, fmt)
    dtype = dtype or default_dtype(device) or checkpoint_dtype(config, state)
    with torch.device("meta"):
        model = RWKV7Encoder(config)
    source = _pth_file(folder) if fmt == "rwkv_pth" else folder
    state = check_state_dict(model, state, source)
    # contiguous: the .pth's LoRA matrices arrive transposed
    model.load_state_dict({k: v.to(device=device, dtype=dtype).contiguous() for k, v in state.items()},
                          strict=True, assign=True)
    model.requires_grad_(False)
    return model.eval()


def check_state_dict(model: RWKV7Encoder, state: dict[str, torch.Tensor], source: Path | str
                     ) -> dict[str, torch.Tensor]:
    """Every expected tensor present with the shape the config implies (vectors stored as (1, 1, d) or (d,)
    are reshaped to the parameter's shape), nothing unexpected; the state with those reshapes."""
    expected = model.state_dict()
    check_tensor_names(expected, state, source)
    c = model.config
    out = {}
    for key, ref in expected.items():
        t = state[key]
        if tuple(t.shape) != tuple(ref.shape) and ref.dim() != 2 and t.squeeze().shape == ref.squeeze().shape:
            t = t.reshape(ref.shape)  # a vector as (1, 1, d) or (d,)
        if tuple(t.shape) != tuple(ref.shape):
            hint = ""
            if "_lora." in key:
                hint = (f" (LoRA widths: decay {c.decay_low_rank_dim}, a {c.a_low_rank_dim}, "
                        f"v {c.v_low_rank_dim}, gate {c.gate_low_rank_dim})")
            elif ".ffn." in key:
                hint = f" (channel-mix width intermediate_size = {c.intermediate_size})"
            elif key.endswith("r_k"):
                hint = f" (heads x head size = {c.num_heads} x {c.head_dim})"
            raise CheckpointError(
                f"{source}: tensor {key!r} has shape {tuple(state[key].shape)}, but the config implies "
                f"{tuple(ref.shape)}{hint}")
        out[key] = t
    return out




