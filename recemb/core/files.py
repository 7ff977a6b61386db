"""Reading and writing checkpoint files: shared by every architecture's loader and ``save``
(``recemb/core/architectures/<name>/``)."""

from __future__ import annotations

import json
import struct
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from recemb.core.errors import CheckpointError, ConfigError, DamagedCheckpointError

__all__ = ["HF_WEIGHT_FILES", "MODEL_FOLDER_MARKERS", "check_model_destination", "check_tensor_names",
           "checkpoint_dtype", "default_dtype", "meta_skeleton", "read_json", "read_weight_file", "read_weights",
           "write_checkpoint"]


class _SkipInitialisers(TorchFunctionMode):
    """``torch.nn.init``'s functions return their tensor untouched."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


@contextmanager
def meta_skeleton():
    """Modules built inside have their parameters on the meta device and no initial values: a loader replaces them
    with a checkpoint's (``load_state_dict(..., assign=True)``). Initialising a meta tensor at random runs through
    torch's Python decompositions, which import ``torch._dynamo`` (tens of MB of a process that never compiles)."""
    with torch.device("meta"), _SkipInitialisers():
        yield


def read_weight_file(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of one safetensors or torch file, on the CPU (torch files memory-mapped, weights only).

    A file cut short (an interrupted download or copy) or otherwise damaged is a ``DamagedCheckpointError`` that
    names it, not the reader's own error."""
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path), device="cpu")
        except SafetensorError as e:
            raise DamagedCheckpointError(_damaged(path, _safetensors_shortfall(path), str(e))) from None
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except (RuntimeError, EOFError, OSError) as e:
        if isinstance(e, (FileNotFoundError, PermissionError)) or not _cut_torch_file(path, e):
            raise
        raise DamagedCheckpointError(_damaged(path, None, str(e).split(". ")[0])) from None


def _cut_torch_file(path: Path, error: Exception) -> bool:
    """Whether a torch file that failed to load is cut short or damaged: empty, a zip archive (torch's format since
    1.6) whose central directory at its end is missing, or one torch's zip reader calls damaged."""
    import zipfile

    try:
        with open(path, "rb") as f:
            head = f.read(4)
        return not head or (head == b"PK\x03\x04" and not zipfile.is_zipfile(path)) or \
            "PytorchStreamReader" in str(error)
    except OSError:
        return False


def _damaged(path: Path, shortfall: str | None, reason: str) -> str:
    size = path.stat().st_size
    what = "it is empty" if size == 0 else \
        f"{shortfall or f'{size:,} bytes that do not read as weights'}; {' '.join(reason.split())}"
    return f"{path}: the weight file is truncated or damaged ({what}); download or export the model again"


def _safetensors_shortfall(path: Path) -> str | None:
    """"it has N of the M bytes its header describes" for a safetensors file cut short, read from its header (an
    8-byte length, then JSON with each tensor's byte range); None where the header itself cannot be read."""
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length)) if length < (100 << 20) else None
        ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    except (OSError, ValueError, struct.error, TypeError, KeyError, IndexError, AttributeError):
        return None
    expected, size = 8 + length + max(ends, default=0), path.stat().st_size
    return f"it has {size:,} of the {expected:,} bytes its header describes" if size < expected else None


# transformers-style weight files, in the order they are looked for
HF_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                   "pytorch_model.bin.index.json")


def read_weights(folder: Path, names: tuple[str, ...], what: str, formats_help: str = "") -> dict[str, torch.Tensor]:
    """The tensors of the first of ``names`` present in ``folder`` (an ``*.index.json`` reads every shard it
    lists); a clear error naming what was expected otherwise. ``what``: the folder's kind, for that error."""
    for name in names:
        path = folder / name
        if not path.is_file():
            continue
        if not name.endswith(".index.json"):
            return read_weight_file(path)
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(read_json(path, formats_help).get("weight_map", {}).values())):
            if not (folder / shard).is_file():
                raise FileNotFoundError(f"{path} lists shard {shard!r}, which is missing from {folder}")
            state.update(read_weight_file(folder / shard))
        return state
    raise FileNotFoundError(f"{folder} has {what} but no weights: expected one of {', '.join(names)}. "
                            f"{formats_help}".strip())


def read_json(path: Path, formats_help: str = "") -> dict:
    """A JSON file (Python's json accepts the bare Infinity in Codestral's config); clear errors otherwise."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing. {formats_help}".strip())
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON: {e}") from e


def default_dtype(device: torch.device) -> torch.dtype | None:
    """The weights' dtype when none is asked for: fp32 on the CPU; None elsewhere, meaning the checkpoint's."""
    return torch.float32 if device.type == "cpu" else None


def checkpoint_dtype(config, state: dict[str, torch.Tensor]) -> torch.dtype:
    """The dtype a checkpoint was saved in: its config's torch_dtype, else its embedding's."""
    if config.torch_dtype:
        dtype = getattr(torch, str(config.torch_dtype).replace("torch.", ""), None)
        if isinstance(dtype, torch.dtype):
            return dtype
    return state["embeddings.weight"].dtype


def check_tensor_names(expected: dict, state: dict, source, unexpected_note: str = "") -> None:
    """Every tensor the model expects is in the checkpoint and nothing else is (shapes are each architecture's
    own check, with its own hints)."""
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing:
        raise CheckpointError(f"{source}: {len(missing)} tensor(s) missing from the weights, e.g. "
                              f"{missing[:4]}")
    if unexpected:
        raise CheckpointError(f"{source}: {len(unexpected)} unexpected tensor(s) in the weights, e.g. "
                              f"{unexpected[:4]}{' ' + unexpected_note if unexpected_note else ''}")


def write_checkpoint(folder, config: dict, state: dict[str, torch.Tensor], dtype_key: str = "torch_dtype",
                     dtype: torch.dtype | None = None, safetensors: bool = True) -> Path:
    """``config.json`` (with the weights' dtype under ``dtype_key``) + ``model.safetensors`` (or
    ``pytorch_model.bin``) in ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if dtype is not None:
        config = {**config, dtype_key: str(dtype).replace("torch.", "")}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    tensors = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    if safetensors:
        from safetensors.torch import save_file

        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    else:
        torch.save(tensors, folder / "pytorch_model.bin")
    return folder


# Files that mark a folder as a model folder, which writing a model may replace (a previous export, a checkpoint).
MODEL_FOLDER_MARKERS = ("config.json", "modules.json", "recemb_config.json", "params.json")


def check_model_destination(destination) -> Path:
    """``destination`` as a Path, if a model may be written there: a new folder, an empty one, or a model folder
    (whose model is replaced). Anything else holds someone's files (a model folder has README.md and config.json),
    so it is refused before any work is done, as is an empty name (it would be the current folder)."""
    if not str(destination).strip():
        raise ValueError("the destination folder is empty; give a folder name")
    path = Path(destination).expanduser()
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path} is a file; give a folder to write the model into")
    if path.is_dir() and any(path.iterdir()) and not any((path / m).is_file() for m in MODEL_FOLDER_MARKERS):
        raise FileExistsError(f"{path} is a non-empty folder that holds no model ({', '.join(MODEL_FOLDER_MARKERS)}); "
                              "writing a model there would replace its README.md and config.json, so give a new or "
                              "empty folder")
    return path
