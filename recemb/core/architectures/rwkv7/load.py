"""Reading RWKV-7 checkpoints: ``detect`` a folder's format, ``load`` it as an ``RWKV7Encoder``.

Formats: "fla" (flash-linear-attention's ``config.json`` with ``model_type: "rwkv7"``, what
``RWKV7Encoder.save`` writes) and "rwkv_pth" (BlinkDL's one ``*.pth``, its names mapped onto fla's here).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from recemb.core.architectures.checkpoint import check_state_dict, config_json_fields
from recemb.core.architectures.rwkv7.blocks import MIX_NAMES
from recemb.core.architectures.rwkv7.config import FORMATS_HELP, RWKV7Config
from recemb.core.architectures.rwkv7.model import RWKV7Encoder
from recemb.core.files import (
    HF_WEIGHT_FILES,
    checkpoint_dtype,
    default_dtype,
    meta_skeleton,
    read_json,
    read_weight_file,
    read_weights,
)

__all__ = ["detect", "fla_to_encoder_keys", "load", "pth_to_encoder_keys", "read_config", "read_state_dict",
           "to_encoder_keys"]


def detect(folder: Path) -> str | None:
    """"fla" (config.json with model_type "rwkv7"), "rwkv_pth" (no config.json or params.json, and a
    ``*.pth``), or None when the folder holds no RWKV-7 checkpoint."""
    folder = Path(folder)
    fields = config_json_fields(folder)
    if fields is not None:
        return "fla" if fields.get("model_type") == "rwkv7" else None
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
    with meta_skeleton():
        model = RWKV7Encoder(config)
    source = _pth_file(folder) if fmt == "rwkv_pth" else folder
    state = check_state_dict(model, state, source, lambda key: _shape_hint(model.config, key), reshape_vectors=True)
    # contiguous: the .pth's LoRA matrices arrive transposed
    model.load_state_dict({k: v.to(device=device, dtype=dtype).contiguous() for k, v in state.items()},
                          strict=True, assign=True)
    model.requires_grad_(False)
    return model.eval()


def _shape_hint(c: RWKV7Config, key: str) -> str:
    """What the config says of a tensor's shape, for a shape error."""
    if "_lora." in key:
        return (f" (LoRA widths: decay {c.decay_low_rank_dim}, a {c.a_low_rank_dim}, v {c.v_low_rank_dim}, "
                f"gate {c.gate_low_rank_dim})")
    if ".ffn." in key:
        return f" (channel-mix width intermediate_size = {c.intermediate_size})"
    if key.endswith("r_k"):
        return f" (heads x head size = {c.num_heads} x {c.head_dim})"
    return ""
