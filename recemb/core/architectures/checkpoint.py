"""What every architecture's loader (``<name>/load.py``) shares: a folder's ``config.json`` read for ``detect``, and
the check of a checkpoint's tensors against the model they load into."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from recemb.core.errors import CheckpointError
from recemb.core.files import check_tensor_names

__all__ = ["check_state_dict", "config_json_fields"]


def config_json_fields(folder: Path) -> dict | None:
    """The fields of ``folder/config.json``, for ``detect`` to read its ``model_type``: None when the folder has no
    config.json (other formats may claim it), {} when the file is not a JSON object (no architecture claims it;
    the registry's error then says why)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    try:
        fields = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return fields if isinstance(fields, dict) else {}


def check_state_dict(model: torch.nn.Module, state: dict[str, torch.Tensor], source: Path | str,
                     shape_hint: Callable[[str], str], unexpected_note: str = "", reshape_vectors: bool = False
                     ) -> dict[str, torch.Tensor]:
    """Every tensor ``model`` expects is in ``state`` with the shape its config implies, and nothing else is; a
    ``CheckpointError`` naming ``source`` otherwise.

    shape_hint(key): what the config says of that tensor's shape (" (...)", or ""), appended to a shape error.
    unexpected_note: appended to the error for unexpected tensors.
    reshape_vectors: a vector stored as (1, 1, d) or (d,) is reshaped to its parameter's shape (RWKV-7's .pth).
    Return: the tensors by the model's names, with those reshapes.
    """
    expected = model.state_dict()
    check_tensor_names(expected, state, source, unexpected_note)
    checked = {}
    for key, ref in expected.items():
        tensor = state[key]
        if reshape_vectors and tuple(tensor.shape) != tuple(ref.shape) and ref.dim() != 2 \
                and tensor.squeeze().shape == ref.squeeze().shape:
            tensor = tensor.reshape(ref.shape)
        if tuple(tensor.shape) != tuple(ref.shape):
            raise CheckpointError(f"{source}: tensor {key!r} has shape {tuple(state[key].shape)}, but the config "
                                  f"implies {tuple(ref.shape)}{shape_hint(key)}")
        checked[key] = tensor
    return checked
