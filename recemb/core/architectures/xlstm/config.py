"""xLSTM settings: one dataclass, read from transformers' ``config.json`` or the xlstm package's ``config.yaml``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from recemb.core.errors import ConfigError
from recemb.kernels.mlstm import DEFAULT_CHUNK_SIZE

__all__ = ["NATIVE_KERNELS", "XLSTMConfig", "round_up"]

# The mLSTM kernels transformers runs without the xlstm package; its config rejects any other name (strict
# dataclass), so ``save`` writes these whatever the source checkpoint named (e.g. xLSTM-7B's Triton kernels).
NATIVE_KERNELS = {"chunkwise_kernel": "chunkwise--native_autograd", "sequence_kernel": "native_sequence__native",
                  "step_kernel": "native"}


def round_up(x: float, multiple: int) -> int:
    """The smallest multiple of ``multiple`` >= x (transformers' and xlstm's ``round_up_to_next_multiple_of``)."""
    return int(((x + multiple - 1) // multiple) * multiple)


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
