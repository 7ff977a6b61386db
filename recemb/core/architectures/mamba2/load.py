"""Reading Mamba2 checkpoints: ``detect`` a folder's format, ``load`` it as a ``Mamba2Encoder``.

Formats:
- "transformers": ``config.json`` with ``model_type: "mamba2"``; ``model.safetensors`` (or sharded with
  ``model.safetensors.index.json``) or ``pytorch_model.bin`` (or sharded with its index). What
  ``Mamba2Encoder.save`` writes; recemb's sentence-transformers export is this format plus sentence-transformers
  files.
- "mamba_ssm": ``config.json`` with ``ssm_cfg`` (``layer: "Mamba2"``) and ``pytorch_model.bin``.
- "codestral": mistral_inference (Mamba-Codestral-7B native), ``params.json`` and ``consolidated.safetensors``.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from recemb.core.architectures.checkpoint import check_state_dict, config_json_fields
from recemb.core.architectures.mamba2.config import Mamba2Config
from recemb.core.architectures.mamba2.model import Mamba2Encoder
from recemb.core.context_extension import ContextExtension
from recemb.core.files import HF_WEIGHT_FILES, checkpoint_dtype, default_dtype, meta_skeleton, read_json, read_weights

__all__ = ["FORMATS", "FORMATS_HELP", "WEIGHT_FILES", "detect", "load", "read_config", "read_state_dict",
           "to_encoder_keys"]

FORMATS = (
    "transformers Mamba2 (config.json with model_type 'mamba2' + model.safetensors, a sharded "
    "model.safetensors.index.json, or pytorch_model.bin), mamba_ssm (config.json with ssm_cfg + pytorch_model.bin), "
    "mistral_inference (params.json + consolidated.safetensors)"
)
FORMATS_HELP = f"recemb reads Mamba2 checkpoints as {FORMATS}"
WEIGHT_FILES = {
    "transformers": HF_WEIGHT_FILES,
    "mamba_ssm": ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.safetensors",
                  "model.safetensors.index.json"),
    "codestral": ("consolidated.safetensors",),
}


def detect(folder: str | os.PathLike) -> str | None:
    """"transformers" (config.json with model_type "mamba2"), "mamba_ssm" (config.json with ``ssm_cfg``),
    "codestral" (params.json and no config.json), or None when the folder holds no Mamba2 checkpoint."""
    folder = Path(folder)
    fields = config_json_fields(folder)
    if fields is not None:
        if fields.get("model_type") == "mamba2":
            return "transformers"
        return "mamba_ssm" if "ssm_cfg" in fields else None
    return "codestral" if (folder / "params.json").is_file() else None


def read_config(folder: Path, fmt: str) -> Mamba2Config:
    folder = Path(folder)
    if fmt == "transformers":
        return Mamba2Config.from_transformers_dict(read_json(folder / "config.json", FORMATS_HELP))
    if fmt == "mamba_ssm":
        return Mamba2Config.from_mamba_ssm_dict(read_json(folder / "config.json", FORMATS_HELP))
    if fmt == "codestral":
        return Mamba2Config.from_codestral_params(read_json(folder / "params.json", FORMATS_HELP))
    raise ValueError(f"unknown format {fmt!r}")


def read_state_dict(folder: Path, fmt: str) -> dict[str, torch.Tensor]:
    """Raw tensors from the first weight file of ``fmt`` present in ``folder`` (on the CPU)."""
    return read_weights(Path(folder), WEIGHT_FILES[fmt], f"a {fmt} config", FORMATS_HELP)


def to_encoder_keys(state: dict[str, torch.Tensor], config: Mamba2Config) -> dict[str, torch.Tensor]:
    """Map any supported naming onto ``Mamba2Encoder`` keys (= transformers ``Mamba2Model``); drop the LM head."""
    out: dict[str, torch.Tensor] = {}
    lm_head = None
    for key, tensor in state.items():
        if key.startswith("model."):  # mistral_inference consolidated.safetensors
            key = key[len("model."):]
        if key.startswith("lm_head."):
            lm_head = tensor
            continue
        if key.startswith("backbone."):
            key = key[len("backbone."):]
        if key.startswith("embedding."):  # mamba_ssm's singular name
            key = "embeddings." + key[len("embedding."):]
        out[key] = tensor
    if "embeddings.weight" not in out and lm_head is not None and config.tie_word_embeddings:
        out["embeddings.weight"] = lm_head  # a tied checkpoint saved under the head's name
    return out


def load(folder: str | os.PathLike, fmt: str, device: str | torch.device, dtype: torch.dtype | None = None
         ) -> Mamba2Encoder:
    """A ``Mamba2Encoder`` from a folder in format ``fmt`` (``detect``'s answer), with the folder's calibrated
    context-extension artifacts attached (``context_extension.json``; which methods run is each caller's choice).

    dtype None: fp32 on the CPU, the checkpoint's dtype elsewhere. Mixed precision and int8 are applied to the
    fp32 model this returns (``recemb.core.loading.load_encoder``).
    """
    folder = Path(folder)
    device = torch.device(device)
    config = read_config(folder, fmt)
    state = to_encoder_keys(read_state_dict(folder, fmt), config)
    dtype = dtype or default_dtype(device) or checkpoint_dtype(config, state)
    with meta_skeleton():
        model = Mamba2Encoder(config)
    check_state_dict(model, state, folder, lambda key: _shape_hint(model.config, key),
                     unexpected_note="(hybrid or MLP checkpoints are not supported)")
    state = {k: v.to(device=device, dtype=dtype) for k, v in state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    model.requires_grad_(False)
    extension = ContextExtension.load(folder)
    if extension is not None:
        extension.check(config.num_hidden_layers, config.num_heads)
        model.context_extension = extension
    return model.eval()


def _shape_hint(c: Mamba2Config, key: str) -> str:
    """What the config says of a tensor's shape, for a shape error."""
    if key.endswith("in_proj.weight"):
        return f" ({c.describe_in_proj()}; check n_groups and state_size)"
    if key.endswith("conv1d.weight"):
        return f" (conv rows = I + 2*g*n = {c.intermediate_size} + 2*{c.n_groups}*{c.state_size})"
    return ""
