"""Mamba2 architecture settings: one dataclass, read from either checkpoint format.

Field names follow transformers' ``Mamba2Config`` so the exported ``config.json`` loads with ``Mamba2Model``;
the paper/kernel symbol of each field is in its comment.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from recemb.core.errors import ConfigError

__all__ = ["Mamba2Config"]


def _json_float(v: Any) -> float:
    """A float from config JSON: a number, a bare Infinity (Codestral), or transformers 5's
    {"__float__": "Infinity"}."""
    if isinstance(v, dict) and "__float__" in v:
        v = v["__float__"]
    return float(v)


@dataclass
class Mamba2Config:
    hidden_size: int = 768  # d_model (d)
    num_hidden_layers: int = 24  # layers (L)
    num_heads: int = 24  # SSM heads (h)
    head_dim: int = 64  # head dimension (p)
    n_groups: int = 1  # B/C groups, also the gated-norm groups (g)
    state_size: int = 128  # SSM state size (n)
    expand: int = 2  # intermediate size I = expand * d_model = h * p
    conv_kernel: int = 4  # depthwise conv width (k)
    chunk_size: int = 256  # SSD chunk length (q); numerics only
    vocab_size: int = 50288
    layer_norm_epsilon: float = 1e-5  # block RMSNorm, gated norm and final norm
    use_bias: bool = False  # bias on in_proj and out_proj
    use_conv_bias: bool = True
    hidden_act: str = "silu"
    residual_in_fp32: bool = True
    time_step_limit: tuple[float, float] = (0.0, math.inf)  # clamp on dt after softplus
    tie_word_embeddings: bool = True
    bos_token_id: int | None = 0
    eos_token_id: int | None = 0
    pad_token_id: int | None = 0
    torch_dtype: str | None = None  # the dtype the checkpoint was saved in
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # unknown keys, kept for export

    def __post_init__(self) -> None:
        self.time_step_limit = tuple(_json_float(v) for v in self.time_step_limit)
        if self.hidden_act != "silu":
            raise ConfigError(f"hidden_act {self.hidden_act!r} is not supported (only 'silu')")
        if self.num_heads * self.head_dim != self.intermediate_size:
            raise ConfigError(
                f"num_heads * head_dim = {self.num_heads} * {self.head_dim} must equal "
                f"expand * hidden_size = {self.expand} * {self.hidden_size}"
            )
        if self.num_heads % self.n_groups != 0:
            raise ConfigError(f"n_groups {self.n_groups} must divide num_heads {self.num_heads}")

    @property
    def intermediate_size(self) -> int:  # I
        return int(self.expand * self.hidden_size)

    @property
    def conv_dim(self) -> int:  # channels through the conv: x, B, C
        return self.intermediate_size + 2 * self.n_groups * self.state_size

    @property
    def in_proj_size(self) -> int:  # rows of in_proj: z, xBC, dt
        return self.intermediate_size + self.conv_dim + self.num_heads

    @property
    def in_proj_rows(self) -> dict[str, slice]:
        """Where each part of in_proj's output lives, in order: z (I), then xBC (the conv's input: x (I), B (g·n),
        C (g·n)), then dt (h). The one definition of the layout: the mixer, calibration, the mini-model
        initialiser and the loader's shape errors read it here."""
        inner, gn = self.intermediate_size, self.n_groups * self.state_size
        return {"z": slice(0, inner), "xBC": slice(inner, inner + self.conv_dim), "x": slice(inner, 2 * inner),
                "B": slice(2 * inner, 2 * inner + gn), "C": slice(2 * inner + gn, 2 * inner + 2 * gn),
                "dt": slice(inner + self.conv_dim, self.in_proj_size)}

    def describe_in_proj(self) -> str:
        """The layout as a sentence for error messages."""
        return (f"in_proj rows = z I + x I + B g*n + C g*n + dt h = {self.intermediate_size} + "
                f"{self.intermediate_size} + {self.n_groups}*{self.state_size} + {self.n_groups}*{self.state_size} "
                f"+ {self.num_heads}")

    @property
    def model_type(self) -> str:
        return "mamba2"

    # ------------------------------------------------------------------ formats
    @classmethod
    def from_transformers_dict(cls, d: dict[str, Any]) -> "Mamba2Config":
        """transformers ``config.json`` (``model_type: "mamba2"``)."""
        if d.get("model_type") not in (None, "mamba2"):
            raise ConfigError(f"model_type {d.get('model_type')!r} is not 'mamba2'")
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        kwargs = {k: v for k, v in d.items() if k in known}
        if "torch_dtype" not in kwargs and isinstance(d.get("dtype"), str):
            kwargs["torch_dtype"] = d["dtype"]
        extra = {k: v for k, v in d.items() if k not in known}
        if "head_dim" not in d and "num_heads" in d:
            kwargs["head_dim"] = int(d.get("expand", 2) * d.get("hidden_size", 768)) // int(d["num_heads"])
        return cls(**kwargs, extra=extra)

    @classmethod
    def from_mamba_ssm_dict(cls, d: dict[str, Any]) -> "Mamba2Config":
        """mamba_ssm ``config.json`` (``MambaConfig`` with ``ssm_cfg.layer == "Mamba2"``)."""
        ssm = dict(d.get("ssm_cfg") or {})
        if ssm.get("layer", "Mamba1") != "Mamba2":
            raise ConfigError("mamba_ssm config is not a Mamba2 model (ssm_cfg.layer must be 'Mamba2')")
        if d.get("attn_layer_idx"):
            raise ConfigError("hybrid Mamba2/attention checkpoints (attn_layer_idx) are not supported")
        if d.get("d_intermediate", 0):
            raise ConfigError("checkpoints with MLP blocks (d_intermediate > 0) are not supported")
        if not d.get("rms_norm", True):
            raise ConfigError("checkpoints with LayerNorm (rms_norm=false) are not supported")
        if ssm.get("norm_before_gate", False):
            raise ConfigError("norm_before_gate=True is not supported (every public Mamba2 checkpoint uses False)")
        if not ssm.get("rmsnorm", True):
            raise ConfigError("Mamba2 without the gated RMSNorm (ssm_cfg.rmsnorm=false) is not supported")
        d_model = int(d["d_model"])
        expand = int(ssm.get("expand", 2))
        headdim = int(ssm.get("headdim", 64))
        d_ssm = ssm.get("d_ssm")
        if d_ssm is not None and int(d_ssm) != expand * d_model:
            raise ConfigError("partial SSM (d_ssm != expand * d_model) is not supported")
        vocab = int(d.get("vocab_size", 50277))
        multiple = int(d.get("pad_vocab_size_multiple", 8))
        if vocab % multiple:
            vocab += multiple - vocab % multiple
        dt_limit = tuple(ssm.get("dt_limit", (0.0, math.inf)))
        return cls(
            hidden_size=d_model,
            num_hidden_layers=int(d["n_layer"]),
            num_heads=expand * d_model // headdim,
            head_dim=headdim,
            n_groups=int(ssm.get("ngroups", 1)),
            state_size=int(ssm.get("d_state", 128)),
            expand=expand,
            conv_kernel=int(ssm.get("d_conv", 4)),
            chunk_size=int(ssm.get("chunk_size", 256)),
            vocab_size=vocab,
            use_bias=bool(ssm.get("bias", False)),
            use_conv_bias=bool(ssm.get("conv_bias", True)),
            residual_in_fp32=bool(d.get("residual_in_fp32", True)),
            time_step_limit=dt_limit,
            tie_word_embeddings=bool(d.get("tie_embeddings", True)),
            # GPT-NeoX, the tokenizer of state-spaces/mamba2-*: <|endoftext|> = 0 is bos and eos.
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=0,
        )

    @classmethod
    def from_codestral_params(cls, d: dict[str, Any]) -> "Mamba2Config":
        """mistral_inference ``params.json`` (Mamba-Codestral-7B native format)."""
        if d.get("model_type", "mamba") != "mamba":
            raise ConfigError(f"params.json model_type {d.get('model_type')!r} is not 'mamba'")
        ssm = {"layer": "Mamba2", "ngroups": int(d.get("n_groups", 1))}
        return cls.from_mamba_ssm_dict(
            {
                "d_model": d["dim"],
                "n_layer": d["n_layers"],
                "vocab_size": d["vocab_size"],
                "ssm_cfg": ssm,
                "rms_norm": d.get("rms_norm", True),
                "residual_in_fp32": d.get("residual_in_fp32", True),
                "pad_vocab_size_multiple": d.get("pad_vocab_size_multiple", 1),
                "tie_embeddings": d.get("tie_embeddings", False),
            }
        )

    def to_dict(self) -> dict[str, Any]:
        """The config as written to config.json (the protocol's name; for Mamba2, transformers' dict)."""
        return self.to_transformers_dict()

    def to_transformers_dict(self) -> dict[str, Any]:
        """``config.json`` contents loadable by ``transformers.Mamba2Config``."""
        d = {k: v for k, v in asdict(self).items() if k != "extra"}
        d = {**self.extra, **d}
        d["time_step_limit"] = list(self.time_step_limit)
        d["model_type"] = "mamba2"
        d["architectures"] = ["Mamba2Model"]
        d["intermediate_size"] = self.intermediate_size
        if d.get("torch_dtype") is None:
            d.pop("torch_dtype")
        return d
