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
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

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
from recemb.kernels.mlstm import DEFAULT_CHUNK_SIZE, mlstm_chunkwise

FORMATS_HELP = (
    "recemb reads xLSTM checkpoints in transformers' format (config.json with model_type 'xlstm' + "
    "model.safetensors, a sharded model.safetensors.index.json, or pytorch_model.bin) and in the xlstm package's "
    "format (config.yaml + model.safetensors or model_0.safetensors, model_1.safetensors, ...)"
)
# The mLSTM kernels transformers runs without the xlstm package; its config rejects any other name (strict
# dataclass), so ``save`` writes these whatever the source checkpoint named (e.g. xLSTM-7B's Triton kernels).
NATIVE_KERNELS = {"chunkwise_kernel": "chunkwise--native_autograd", "sequence_kernel": "native_sequence__native",
                  "step_kernel": "native"}


def round_up(x: float, multiple: int) -> int:
    """The smallest multiple of ``multiple`` >= x (transformers' and xlstm's ``round_up_to_next_multiple_of``)."""
    return int(((x + multiple - 1) // multiple) * multiple)


# ---------------------------------------------------------------------------------------------------- config
@dataclass
class XLSTMConfig:
    """Field names follow transformers' ``xLSTMConfig`` (so ``to_transformers_dict`` loads with ``xLSTMModel``).

    chunk_size: the chunk length of the chunkwise mLSTM form (numerics only; also the default V for batches).
    """

    vocab_size: int = 50304
    hidden_size: int = 4096  # d (transformers' embedding_dim too)
    num_hidden_layers: int = 32  # blocks (transformers' num_blocks, which is what xLSTMModel builds)
    num_heads: int = 8  # h
    use_bias: bool = False
    norm_reduction_force_float32: bool = True
    tie_word_embeddings: bool = False
    add_out_norm: bool = True  # kept for export; transformers' xLSTMModel always applies out_norm
    norm_eps: float = 1e-6  # RMSNorm and per-head LayerNorm eps
    qk_dim_factor: float = 0.5
    v_dim_factor: float = 1.0
    chunk_size: int = DEFAULT_CHUNK_SIZE
    eps: float = 1e-6  # the mLSTM normaliser's eps
    ffn_proj_factor: float = 2.667
    ffn_round_up_to_multiple_of: int = 64
    gate_soft_cap: float | None = 15.0
    output_logit_soft_cap: float | None = 30.0
    weight_mode: str = "single"
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 2
    torch_dtype: str | None = None  # the dtype the checkpoint was saved in
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # unknown keys, kept for export

    model_type = "xlstm"  # class attribute, not a field

    def __post_init__(self) -> None:
        if self.weight_mode != "single":
            raise ConfigError(
                f"weight_mode {self.weight_mode!r} is not supported (only 'single': the xlstm package's "
                "from_pretrained loads single weights only, and transformers' xLSTMModel cannot build 'fused')")
        for name in ("hidden_size", "num_hidden_layers", "num_heads", "vocab_size", "chunk_size"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.qk_dim % self.num_heads or self.v_dim % self.num_heads:
            raise ConfigError(
                f"num_heads {self.num_heads} must divide qk_dim = int(hidden_size * qk_dim_factor) = {self.qk_dim} "
                f"and v_dim = int(hidden_size * v_dim_factor) = {self.v_dim}")
        if self.qk_dim < 1 or self.v_dim < 1:
            raise ConfigError(f"qk_dim {self.qk_dim} and v_dim {self.v_dim} must be >= 1")

    # Widths as the layers compute them (int(), not transformers' config.qk_dim, which rounds up to 64).
    @property
    def qk_dim(self) -> int:
        return int(self.hidden_size * self.qk_dim_factor)

    @property
    def v_dim(self) -> int:
        return int(self.hidden_size * self.v_dim_factor)

    @property
    def qk_head_dim(self) -> int:  # dk
        return self.qk_dim // self.num_heads

    @property
    def v_head_dim(self) -> int:  # dv
        return self.v_dim // self.num_heads

    @property
    def up_proj_dim(self) -> int:
        return round_up(self.hidden_size * self.ffn_proj_factor, self.ffn_round_up_to_multiple_of)

    # ------------------------------------------------------------------ formats
    @classmethod
    def from_transformers_dict(cls, d: dict[str, Any]) -> "XLSTMConfig":
        """transformers ``config.json`` (``model_type: "xlstm"``)."""
        if d.get("model_type") not in (None, "xlstm"):
            raise ConfigError(f"model_type {d.get('model_type')!r} is not 'xlstm'")
        d = dict(d)
        hidden, emb = d.pop("hidden_size", None), d.pop("embedding_dim", None)
        if hidden is not None and emb is not None and int(hidden) != int(emb):
            raise ConfigError(f"hidden_size {hidden} and embedding_dim {emb} differ (xLSTMModel would build "
                              "embeddings and blocks of different widths)")
        layers, blocks = d.pop("num_hidden_layers", None), d.pop("num_blocks", None)
        kwargs: dict[str, Any] = {}
        if hidden is not None or emb is not None:
            kwargs["hidden_size"] = int(hidden if hidden is not None else emb)
        if blocks is not None or layers is not None:
            kwargs["num_hidden_layers"] = int(blocks if blocks is not None else layers)  # xLSTMModel builds num_blocks
        if "torch_dtype" not in d and isinstance(d.get("dtype"), str):
            d["torch_dtype"] = d.pop("dtype")
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        kwargs.update({k: v for k, v in d.items() if k in known})
        extra = {k: v for k, v in d.items() if k not in known and k not in ("model_type", "dtype")}
        return cls(**kwargs, extra=extra)

    @classmethod
    def from_xlstm_dict(cls, d: dict[str, Any]) -> "XLSTMConfig":
        """The xlstm package's ``config.yaml`` (``xLSTMLargeConfig`` fields)."""
        missing = [k for k in ("embedding_dim", "num_heads", "num_blocks", "vocab_size") if k not in d]
        if missing:
            raise ConfigError(f"config.yaml lacks {missing} (xLSTMLargeConfig's required fields)")
        # xLSTMLarge's final norm follows add_out_norm, use_bias and norm_reduction_force_float32; transformers'
        # xLSTMModel (and so this encoder and its export) always has a weight-only fp32 RMSNorm there.
        if not d.get("add_out_norm", True) or d.get("use_bias", False) or not d.get(
                "norm_reduction_force_float32", True):
            raise ConfigError("xlstm checkpoints with add_out_norm=false, use_bias=true or "
                              "norm_reduction_force_float32=false are not supported (transformers' xLSTMModel "
                              "has no equivalent final norm)")
        known = {f for f in cls.__dataclass_fields__ if f != "extra"} - {"hidden_size", "num_hidden_layers"}
        kwargs = {k: v for k, v in d.items() if k in known}
        kwargs.setdefault("ffn_proj_factor", 2.6667)  # xLSTMLargeConfig's default (transformers': 2.667)
        # config.yaml has no token ids: xLSTM-7B's tokenizer (GPT-NeoX) has bos 0, pad 1, eos 2, the defaults here.
        return cls(hidden_size=int(d["embedding_dim"]), num_hidden_layers=int(d["num_blocks"]), **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The config as written to config.json (the protocol's name; for xLSTM, transformers' dict)."""
        return self.to_transformers_dict()

    def to_transformers_dict(self) -> dict[str, Any]:
        """``config.json`` contents loadable by transformers' ``xLSTMConfig`` / ``xLSTMModel``."""
        d = {k: v for k, v in asdict(self).items() if k not in ("extra", "torch_dtype")}
        d = {**self.extra, **d, **NATIVE_KERNELS}
        d.update(model_type="xlstm", architectures=["xLSTMModel"], embedding_dim=self.hidden_size,
                 num_blocks=self.num_hidden_layers, mode="inference")
        d.pop("torch_dtype", None)
        if self.torch_dtype is not None:
            d["dtype"] = self.torch_dtype
        return d


# ---------------------------------------------------------------------------------------------------- state
class XLSTMLayerState(NamedTuple):
    """One layer's mLSTM cell state, in the kernel's compute dtype (fp32; fp64 for an fp64 model).

    transformers' ``xLSTMCache.rnn_state[layer]`` holds the same three tensors, with m as (b, h, 1).
    """

    C: torch.Tensor  # (b, h, dk, dv) the matrix memory, divided by exp(m)
    n: torch.Tensor  # (b, h, dk) the normaliser, divided by exp(m)
    m: torch.Tensor  # (b, h) the stabiliser (log scale)

    @staticmethod
    def zeros(batch: int, nheads: int, dk: int, dv: int, device: torch.device | str | None = None,
              dtype: torch.dtype = torch.float32) -> "XLSTMLayerState":
        return XLSTMLayerState(torch.zeros(batch, nheads, dk, dv, device=device, dtype=dtype),
                               torch.zeros(batch, nheads, dk, device=device, dtype=dtype),
                               torch.zeros(batch, nheads, device=device, dtype=dtype))

    def keep_rows(self, rows: int) -> "XLSTMLayerState":
        """The state of the first ``rows`` sequences of the batch (finished sequences leave from the end)."""
        return XLSTMLayerState(self.C[:rows], self.n[:rows], self.m[:rows])


XLSTMState = list[XLSTMLayerState]  # one per block


# ---------------------------------------------------------------------------------------------------- layers
# Both norms reduce in at least fp32 when forced (norm_reduction_force_float32, the default). transformers and the
# xlstm package call x.float(), which also drops an fp64 model's activations to fp32; here fp64 stays fp64.
class XLSTMRMSNorm(nn.Module):
    """RMSNorm over the last dim; the reduction in fp32 (when forced), cast back, then weight (and bias)."""

    def __init__(self, d: int, eps: float = 1e-6, bias: bool = False, force_float32: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None
        self.eps, self.force_float32 = eps, force_float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        in_dtype = x.dtype
        xf = x.to(torch.promote_types(in_dtype, torch.float32)) if self.force_float32 else x
        x = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(in_dtype) * self.weight
        return x if self.bias is None else x + self.bias


class XLSTMMultiHeadLayerNorm(nn.Module):
    """LayerNorm (no affine) over each head's dv features, then one weight (and bias) over all h·dv."""

    def __init__(self, nheads: int, head_dim: int, eps: float = 1e-6, bias: bool = False,
                 force_float32: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(nheads * head_dim))
        self.bias = nn.Parameter(torch.zeros(nheads * head_dim)) if bias else None
        self.eps, self.force_float32 = eps, force_float32

    def forward(self, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        """x (b, l, h, dv) -> (b, l, h·dv) in ``out_dtype``."""
        xf = x.to(torch.promote_types(x.dtype, torch.float32)) if self.force_float32 else x
        mean = xf.mean(-1, keepdim=True)
        var = xf.var(-1, keepdim=True, unbiased=False)
        y = ((xf - mean) * torch.rsqrt(var + self.eps)).to(out_dtype).flatten(-2) * self.weight
        return y if self.bias is None else y + self.bias


class MLSTMLayer(nn.Module):
    """q, k, v, o, i, f projections -> soft-capped gates -> mLSTM cell (carried state) -> per-head LayerNorm
    -> times sigmoid(o) -> out_proj. Parameter names equal transformers' ``xLSTMLayer`` (weight_mode single)."""

    def __init__(self, config: XLSTMConfig):
        super().__init__()
        c = config
        self.config = c
        d, bias = c.hidden_size, c.use_bias
        self.q = nn.Linear(d, c.qk_dim, bias=bias)
        self.k = nn.Linear(d, c.qk_dim, bias=bias)
        self.v = nn.Linear(d, c.v_dim, bias=bias)
        self.ogate_preact = nn.Linear(d, c.v_dim, bias=bias)
        self.igate_preact = nn.Linear(d, c.num_heads, bias=True)
        self.fgate_preact = nn.Linear(d, c.num_heads, bias=True)
        self.multihead_norm = XLSTMMultiHeadLayerNorm(c.num_heads, c.v_head_dim, c.norm_eps, bias,
                                                      c.norm_reduction_force_float32)
        self.out_proj = nn.Linear(c.v_dim, d, bias=bias)

    def forward(self, x: torch.Tensor, state: XLSTMLayerState | None, chunk_size: int
                ) -> tuple[torch.Tensor, XLSTMLayerState]:
        """x (b, l, d) normed input; state before token 0 of x (None: start of the sequence).
        Return (b, l, d) in x.dtype and the state after the last token."""
        b, l, _ = x.shape
        c = self.config
        nh = c.num_heads
        cap = c.gate_soft_cap
        i, f = self.igate_preact(x), self.fgate_preact(x)  # (b, l, h)
        if cap is not None:
            i, f = cap * torch.tanh(i / cap), cap * torch.tanh(f / cap)
        y, (C, n, m) = mlstm_chunkwise(
            self.q(x).view(b, l, nh, c.qk_head_dim), self.k(x).view(b, l, nh, c.qk_head_dim),
            self.v(x).view(b, l, nh, c.v_head_dim), i, f, chunk_size=chunk_size,
            initial_state=None if state is None else tuple(state), eps=c.eps,
        )  # y (b, l, h, dv) in fp32 (fp64 for an fp64 model)
        y = self.multihead_norm(y, x.dtype)  # (b, l, v_dim)
        return self.out_proj(torch.sigmoid(self.ogate_preact(x)) * y), XLSTMLayerState(C, n, m)


class XLSTMFeedForward(nn.Module):
    """proj_down(silu(proj_up_gate(x)) * proj_up(x))."""

    def __init__(self, config: XLSTMConfig):
        super().__init__()
        d, up, bias = config.hidden_size, config.up_proj_dim, config.use_bias
        self.proj_up_gate = nn.Linear(d, up, bias=bias)
        self.proj_up = nn.Linear(d, up, bias=bias)
        self.proj_down = nn.Linear(up, d, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj_down(F.silu(self.proj_up_gate(x)) * self.proj_up(x))


class XLSTMBlock(nn.Module):
    """x + mLSTM(RMSNorm(x)), then x + FFN(RMSNorm(x)); the residual stream in the model's dtype."""

    def __init__(self, config: XLSTMConfig):
        super().__init__()
        c = config
        self.norm_mlstm = XLSTMRMSNorm(c.hidden_size, c.norm_eps, c.use_bias, c.norm_reduction_force_float32)
        self.mlstm_layer = MLSTMLayer(c)
        self.norm_ffn = XLSTMRMSNorm(c.hidden_size, c.norm_eps, c.use_bias, c.norm_reduction_force_float32)
        self.ffn = XLSTMFeedForward(c)

    def forward(self, x: torch.Tensor, state: XLSTMLayerState | None, chunk_size: int
                ) -> tuple[torch.Tensor, XLSTMLayerState]:
        out, state = self.mlstm_layer(self.norm_mlstm(x), state, chunk_size)
        x = x + out
        return x + self.ffn(self.norm_ffn(x)), state


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

        run.backend: "auto" and "torch" run the torch chunkwise form on any device; "triton" is an error (no
        Triton kernels for xLSTM). run.chunk_size: the chunkwise form's chunk length (None: config.chunk_size).
        run.workspace is not used; run.deltas must be None (no context extension).
        """
        run = run or ChunkRun()
        if run.backend == "triton":
            raise ValueError("xLSTM has no Triton kernels: use backend='auto' or 'torch' (its chunkwise torch form "
                             "runs on every device)")
        if run.backend not in ("auto", "torch"):
            raise ValueError(f"backend must be one of ('auto', 'torch', 'triton'), got {run.backend!r}")
        if run.deltas is not None and any(d is not None for d in run.deltas):
            raise ValueError("xLSTM has no context extension (deltas must be None)")
        chunk_size = self.config.chunk_size if run.chunk_size is None else int(run.chunk_size)
        if states is not None and len(states) != len(self.blocks):
            raise ValueError(f"expected {len(self.blocks)} layer states, got {len(states)}")
        h = self.embeddings(input_ids)  # (b, l, d)
        new_states: XLSTMState = []
        for i, block in enumerate(self.blocks):
            h, s = block(h, None if states is None else states[i], chunk_size)
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

    def save(self, folder) -> None:
        """``config.json`` (transformers' xLSTMConfig) + ``model.safetensors`` in ``xLSTMModel`` naming."""
        write_checkpoint(folder, self.config.to_transformers_dict(), self.state_dict(), "dtype",
                         self.embeddings.weight.dtype)


# ---------------------------------------------------------------------------------------------------- loading
def detect(folder: Path) -> str | None:
    """"transformers" (config.json with model_type "xlstm"), "xlstm" (the xlstm package's config.yaml with
    ``embedding_dim`` and ``num_blocks``), or None when the folder holds no xLSTM checkpoint."""
    folder = Path(folder)
    config_json = folder / "config.json"
    if config_json.is_file():
        try:
            d = json.loads(config_json.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        return "transformers" if isinstance(d, dict) and d.get("model_type") == "xlstm" else None
    config_yaml = folder / "config.yaml"
    if config_yaml.is_file():
        try:
            d = _read_yaml(config_yaml)
        except ValueError:  # not YAML, or not a mapping
            return None
        if "embedding_dim" in d and "num_blocks" in d:  # xLSTMLargeConfig's required fields
            return "xlstm"
    return None


def read_config(folder: Path, fmt: str) -> XLSTMConfig:
    folder = Path(folder)
    if fmt == "transformers":
        return XLSTMConfig.from_transformers_dict(read_json(folder / "config.json", FORMATS_HELP))
    if fmt == "xlstm":
        return XLSTMConfig.from_xlstm_dict(_read_yaml(folder / "config.yaml"))
    raise ValueError(f"unknown xLSTM format {fmt!r} (expected 'transformers' or 'xlstm')")


def read_state_dict(folder: Path, fmt: str) -> dict[str, torch.Tensor]:
    """The raw tensors of the folder's weight files (on the CPU), under the file's own key names."""
    folder = Path(folder)
    if fmt == "xlstm":
        if (folder / "model.safetensors").is_file():
            return read_weight_file(folder / "model.safetensors")
        shards = []
        while (folder / f"model_{len(shards)}.safetensors").is_file():
            shards.append(folder / f"model_{len(shards)}.safetensors")
        if not shards:
            raise FileNotFoundError(f"{folder} has an xlstm config.yaml but no weights: expected model.safetensors "
                                    f"or model_0.safetensors, model_1.safetensors, ... {FORMATS_HELP}")
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(read_weight_file(shard))
        return state
    return read_weights(folder, HF_WEIGHT_FILES, "an xLSTM config.json", FORMATS_HELP)


def to_encoder_keys(state: dict[str, torch.Tensor], config: XLSTMConfig) -> dict[str, torch.Tensor]:
    """Map xLSTMForCausalLM (``backbone.*``, ``lm_head``) and xlstm-package (``embedding.weight``,
    ``backbone.blocks.*``, ``backbone.out_norm.*``) names onto ``XLSTMEncoder`` keys; drop the LM head."""
    out: dict[str, torch.Tensor] = {}
    lm_head = None
    for key, tensor in state.items():
        if key.startswith("lm_head."):
            lm_head = tensor
            continue
        if key.startswith("backbone."):
            key = key[len("backbone."):]
        if key == "embedding.weight":  # the xlstm package's singular name
            key = "embeddings.weight"
        out[key] = tensor
    if "embeddings.weight" not in out and lm_head is not None and config.tie_word_embeddings:
        out["embeddings.weight"] = lm_head  # a tied checkpoint saved under the head's name
    return out


def load(folder: Path, fmt: str, device: torch.device, dtype: torch.dtype | None = None) -> XLSTMEncoder:
    """An ``XLSTMEncoder`` from a folder in format ``fmt`` (``detect``'s answer).

    dtype None: fp32 on the CPU, the checkpoint's dtype elsewhere.
    """
    folder = Path(folder)
    device = torch.device(device)
    config = read_config(folder, fmt)
    state = to_encoder_keys(read_state_dict(folder, fmt), config)
    dtype = dtype or default_dtype(device) or checkpoint_dtype(config, state)
    with torch.device("meta"):
        model = XLSTMEncoder(config)
    check_state_dict(model, state, folder)
    model.load_state_dict({k: v.to(device=device, dtype=dtype) for k, v in state.items()}, strict=True, assign=True)
    model.requires_grad_(False)
    return model.eval()


def check_state_dict(model: XLSTMEncoder, state: dict[str, torch.Tensor], source: Path | str) -> None:
    """Every expected tensor present with the shape the config implies; nothing unexpected."""
    expected = model.state_dict()
    check_tensor_names(expected, state, source, "(only mLSTM blocks with weight_mode 'single' are supported)")
    c = model.config
    for key, ref in expected.items():
        got = tuple(state[key].shape)
        if got != tuple(ref.shape):
            hint = ""
            if key.endswith((".q.weight", ".k.weight")):
                hint = f" (qk_dim = int(hidden_size * qk_dim_factor) = int({c.hidden_size} * {c.qk_dim_factor}))"
            elif key.endswith((".v.weight", ".ogate_preact.weight", "out_proj.weight", "multihead_norm.weight")):
                hint = f" (v_dim = int(hidden_size * v_dim_factor) = int({c.hidden_size} * {c.v_dim_factor}))"
            elif ".ffn." in key:
                hint = (f" (FFN width = round_up(hidden_size * ffn_proj_factor, ffn_round_up_to_multiple_of) = "
                        f"round_up({c.hidden_size} * {c.ffn_proj_factor}, {c.ffn_round_up_to_multiple_of}))")
            elif "gate_preact" in key:
                hint = f" (one gate per head: num_heads = {c.num_heads})"
            raise CheckpointError(
                f"{source}: tensor {key!r} has shape {got}, but the config implies {tuple(ref.shape)}{hint}")





def _read_yaml(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing. {FORMATS_HELP}")
    import yaml

    try:
        d = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {e}") from e
    if not isinstance(d, dict):
        raise ConfigError(f"{path} does not hold a mapping of config fields")
    return d


__all__ = ["XLSTMBlock", "XLSTMConfig", "XLSTMEncoder", "XLSTMLayerState", "XLSTMState", "MLSTMLayer", "detect",
           "load", "read_config", "read_state_dict", "to_encoder_keys"]
