"""Reading xLSTM checkpoints: ``detect`` a folder's format, ``load`` it as an ``XLSTMEncoder``.

Formats: "transformers" (``config.json`` with ``model_type: "xlstm"``, what ``XLSTMEncoder.save`` writes) and
"xlstm" (the xlstm package's ``config.yaml`` + ``model.safetensors`` or ``model_N.safetensors`` shards).
"""

from __future__ import annotations

from pathlib import Path

import torch

from recemb.core.architectures.checkpoint import check_state_dict, config_json_fields
from recemb.core.architectures.xlstm.config import XLSTMConfig
from recemb.core.architectures.xlstm.model import XLSTMEncoder
from recemb.core.errors import ConfigError
from recemb.core.files import (
    HF_WEIGHT_FILES,
    checkpoint_dtype,
    default_dtype,
    meta_skeleton,
    read_json,
    read_weight_file,
    read_weights,
)

__all__ = ["FORMATS_HELP", "detect", "load", "read_config", "read_state_dict", "to_encoder_keys"]

FORMATS_HELP = (
    "recemb reads xLSTM checkpoints in transformers' format (config.json with model_type 'xlstm' + "
    "model.safetensors, a sharded model.safetensors.index.json, or pytorch_model.bin) and in the xlstm package's "
    "format (config.yaml + model.safetensors or model_0.safetensors, model_1.safetensors, ...)"
)


def detect(folder: Path) -> str | None:
    """"transformers" (config.json with model_type "xlstm"), "xlstm" (the xlstm package's config.yaml with
    ``embedding_dim`` and ``num_blocks``), or None when the folder holds no xLSTM checkpoint."""
    folder = Path(folder)
    fields = config_json_fields(folder)
    if fields is not None:
        return "transformers" if fields.get("model_type") == "xlstm" else None
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
    with meta_skeleton():
        model = XLSTMEncoder(config)
    check_state_dict(model, state, folder, lambda key: _shape_hint(model.config, key),
                     unexpected_note="(only mLSTM blocks with weight_mode 'single' are supported)")
    model.load_state_dict({k: v.to(device=device, dtype=dtype) for k, v in state.items()}, strict=True, assign=True)
    model.requires_grad_(False)
    return model.eval()


def _shape_hint(c: XLSTMConfig, key: str) -> str:
    """What the config says of a tensor's shape, for a shape error."""
    if key.endswith((".q.weight", ".k.weight")):
        return f" (qk_dim = int(hidden_size * qk_dim_factor) = int({c.hidden_size} * {c.qk_dim_factor}))"
    if key.endswith((".v.weight", ".ogate_preact.weight", "out_proj.weight", "multihead_norm.weight")):
        return f" (v_dim = int(hidden_size * v_dim_factor) = int({c.hidden_size} * {c.v_dim_factor}))"
    if ".ffn." in key:
        return (f" (FFN width = round_up(hidden_size * ffn_proj_factor, ffn_round_up_to_multiple_of) = "
                f"round_up({c.hidden_size} * {c.ffn_proj_factor}, {c.ffn_round_up_to_multiple_of}))")
    if "gate_preact" in key:
        return f" (one gate per head: num_heads = {c.num_heads})"
    return ""


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
