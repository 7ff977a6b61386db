"""Reading checkpoint files: shared by every architecture's loader (``loading.py``, ``xlstm.py``, ``rwkv7.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from recemb.core.errors import ConfigError


def read_weight_file(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of one safetensors or torch file, on the CPU (torch files memory-mapped, weights only)."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path), device="cpu")
    return torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)


def read_json(path: Path, formats_help: str = "") -> dict:
    """A JSON file (Python's json accepts the bare Infinity in Codestral's config); clear errors otherwise."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing. {formats_help}".strip())
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON: {e}") from e


def checkpoint_dtype(config, state: dict[str, torch.Tensor]) -> torch.dtype:
    """The dtype a checkpoint was saved in: its config's torch_dtype, else its embedding's."""
    if config.torch_dtype:
        dtype = getattr(torch, str(config.torch_dtype).replace("torch.", ""), None)
        if isinstance(dtype, torch.dtype):
            return dtype
    return state["embeddings.weight"].dtype
