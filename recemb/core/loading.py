"""Everything that touches disk or the hub: model folders, their architecture, the weights' dtype.

Which architecture a folder holds, and how it is read, is the registry's (``recemb.core.architectures``): each
architecture's package detects and loads its own formats. Here: resolving names (a folder, a bundled model, a hub
id), the device and dtype, and what loading does the same for every architecture (dtype="auto", mixed precision and
int8 on the CPU where the architecture has them).
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import torch

from recemb.core.architectures import FORMATS_HELP
from recemb.core.architectures import detect as detect_folder
from recemb.core.encoder import RecurrentEncoder
from recemb.core.errors import CheckpointError, ConfigError, DamagedCheckpointError
from recemb.core.precision import (
    LOW_PRECISION,
    auto_dtype,
    check_quantize,
    check_saveable,
    projection_shapes,
    quantize_int8,
)
from recemb.core.tokenizer import TextTokenizer

__all__ = ["BUNDLED_MODELS_DIR", "CheckpointError", "ConfigError", "DEFAULT_MODEL", "DTYPE_NAMES",
           "DamagedCheckpointError", "FORMATS_HELP", "bundled_model_path", "detect_architecture", "hub_offline",
           "load_encoder", "load_pretrained", "resolve_device", "resolve_dtype", "resolve_model_path", "save_encoder"]

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

# Models shipped inside the package (trained by this project, see tools/mini_model in the repository).
BUNDLED_MODELS_DIR = Path(importlib.import_module("recemb").__file__).resolve().parent / "models"
DEFAULT_MODEL = "recemb-mamba2-mini"
# What ``dtype`` takes: a floating-point dtype for the weights (torch's names and aliases such as "half" work too).
DTYPE_NAMES = ("float32", "bfloat16", "float16", "auto")


def bundled_model_path(name: str) -> Path | None:
    """The folder of a model shipped with recemb ("recemb-mamba2-mini" or "recemb/recemb-mamba2-mini")."""
    bare = name.removeprefix("recemb/")
    if not re.fullmatch(r"[\w.-]+", bare):
        return None
    folder = BUNDLED_MODELS_DIR / bare
    return folder if (folder / "config.json").is_file() else None


def hub_offline() -> bool:
    """Whether HF_HUB_OFFLINE is set (read now, as the tests set it after huggingface_hub was imported)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def resolve_model_path(
    name_or_path: str | os.PathLike,
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    token: str | bool | None = None,
    local_files_only: bool | None = None,
) -> Path:
    """A local folder as it is, a bundled model by name (``DEFAULT_MODEL``), or a Hugging Face id resolved
    through the hub cache (honours HF_HUB_OFFLINE)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise NotADirectoryError(f"{str(name_or_path)!r} is a file; expected a model folder. {FORMATS_HELP}")
    name = str(name_or_path)
    bundled = bundled_model_path(name)
    if bundled is not None:
        return bundled
    if not _REPO_ID.match(name):
        raise FileNotFoundError(f"no model folder at {name!r} (and it is not a Hugging Face id like 'org/name')")
    from huggingface_hub import snapshot_download

    # Offline, ask the cache directly: asking the hub first fails and logs "Could not reach the Hub" per call.
    offline = bool(local_files_only) or hub_offline()
    try:
        return Path(snapshot_download(name, revision=revision, cache_dir=cache_dir, token=token,
                                      local_files_only=offline))
    except Exception as e:  # the hub client raises several types for "not there"
        where = "in the Hugging Face cache (offline)" if offline else "locally or on the Hugging Face hub"
        raise FileNotFoundError(f"model {name!r} was not found {where}: {e}") from e


def resolve_device(device: str | torch.device | None) -> torch.device:
    """None: cuda if available, else cpu."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    # torch's own error is an assertion deep inside
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} was asked for, but this torch sees no CUDA device; use "
                         "device='cpu' (or leave it unset)")
    return resolved


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | str | None:
    """A torch dtype from a dtype or its name ("bfloat16", "torch.float16"); None and "auto" (resolved per device
    and architecture by ``load_encoder``) stay as they are. Weights are floating point: an integer dtype is refused
    with the way to int8 weights (``quantize="int8"``), an unknown name with the names ``DTYPE_NAMES`` lists."""
    if dtype is None or dtype == "auto":
        return dtype
    resolved = dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype).replace("torch.", ""), None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}: expected {_dtype_choices()}")
    if not resolved.is_floating_point:
        raise ValueError(f"dtype {dtype!r} is not a floating-point dtype for the weights: expected "
                         f"{_dtype_choices()}; for int8 weights pass quantize='int8' (with dtype float32 or bfloat16)")
    return resolved


def _dtype_choices() -> str:
    return ", ".join(DTYPE_NAMES[:-1]) + " or " + DTYPE_NAMES[-1]


def load_pretrained(
    name_or_path: str | os.PathLike,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    tokenizer: str | os.PathLike | TextTokenizer | None = None,
    eos_token_id: int | None = None,
    quantize: str | None = None,
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    token: str | bool | None = None,
    local_files_only: bool | None = None,
) -> tuple[RecurrentEncoder, TextTokenizer | None]:
    """The model and tokenizer of a folder, bundled name or hub id: the one loader behind
    ``Embedder.from_pretrained`` and ``shared_embedder`` (its options are
    ``recemb.core.options.LOAD_OPTIONS``).

    tokenizer: default the model folder's own (None if it has none); a folder, a hub id or a TextTokenizer.
    """
    hub = dict(revision=revision, cache_dir=cache_dir, token=token, local_files_only=local_files_only)
    # The options are checked before anything is read or downloaded.
    device, dtype, quantize = resolve_device(device), resolve_dtype(dtype), check_quantize(quantize)
    folder = resolve_model_path(name_or_path, **hub)
    model = load_encoder(folder, device=device, dtype=dtype, quantize=quantize)
    if isinstance(tokenizer, TextTokenizer):
        return model, tokenizer
    if tokenizer is not None:
        hub["local_files_only"] = bool(local_files_only) or hub_offline()
        return model, TextTokenizer.load(tokenizer, eos_token_id=eos_token_id, **hub)
    return model, TextTokenizer.from_folder(folder, eos_token_id=eos_token_id)


def load_encoder(
    folder: str | os.PathLike,
    device: str | torch.device,
    dtype: torch.dtype | str | None = None,
    quantize: str | None = None,
) -> RecurrentEncoder:
    """The encoder of a model folder, its architecture picked from the checkpoint (config.json's model_type, or
    the files: params.json for mistral_inference Mamba2, a .pth for RWKV-7); an unknown one is refused by name.

    dtype None: fp32 on the CPU, the checkpoint's dtype elsewhere. "auto": on the CPU bf16 where this machine
    measured bf16 projections of the model's shapes clearly faster than fp32 and the architecture has a
    mixed-precision path (Mamba2), else fp32 (probed once per machine and cached: ``recemb.core.autodtype``);
    elsewhere the checkpoint's. bf16 on the CPU is mixed precision: see ``recemb.core.precision``.
    quantize "int8": in_proj becomes a per-token int8 layer (``recemb.core.int8``; CPU, from fp32 weights); with a
    bf16 ``dtype`` (or "auto" choosing bf16) out_proj and the embedding table are then bf16 as above.
    """
    folder = Path(folder)
    device = torch.device(device)
    dtype, quantize = resolve_dtype(dtype), check_quantize(quantize)
    if quantize is not None and device.type != "cpu":  # refused before the weights are read
        raise ValueError(f"quantize={quantize!r} runs on the CPU only (integer matmul kernels); device is "
                         f"{device}")
    arch, fmt = detect_folder(folder)
    probe = dtype == "auto" and device.type == "cpu" and arch.cpu_mixed_precision  # decided on the fp32 model
    if dtype == "auto" and not probe:
        dtype = auto_dtype(device, supports_mixed=False)  # the checkpoint's off the CPU, else fp32
    if arch.cpu_mixed_precision:
        mixed = device.type == "cpu" and (probe or dtype in LOW_PRECISION)
        model = arch.load(folder, fmt, device, torch.float32 if mixed or quantize else dtype)
        if probe:  # measured on this model's projection shapes, once per machine (``recemb.core.autodtype``)
            dtype = auto_dtype(device, shapes=projection_shapes(model))
            mixed = dtype in LOW_PRECISION
        if mixed or quantize is not None:
            model.keep_weight_samples()  # the checkpoint's identity, before bf16 or int8 change the weights
        if quantize is not None:  # from fp32 weights: in_proj to int8
            quantize_int8(model, device)
        if mixed:  # then what is left of the projections to bf16
            model.to_mixed_precision(dtype)
    else:
        model = arch.load(folder, fmt, device, dtype)
        model.requires_grad_(False)
        model.eval()
        if quantize is not None:
            quantize_int8(model, device)  # refuses architectures without an int8 path
    return model


def detect_architecture(folder: str | os.PathLike) -> tuple[str, str]:
    """(architecture, format) of a model folder: ("mamba2", "transformers" | "mamba_ssm" | "codestral"),
    ("xlstm", "transformers" | "xlstm") or ("rwkv7", "fla" | "rwkv_pth"); a clear error for anything else. The
    architecture's descriptor is ``recemb.core.architectures.architecture(name)``."""
    arch, fmt = detect_folder(folder)
    return arch.name, fmt


def save_encoder(model: RecurrentEncoder, folder: str | os.PathLike, safe_serialization: bool = True) -> None:
    """Write ``model`` in its architecture's own format (its descriptor's ``save_format``; Mamba2: config.json +
    model.safetensors in transformers' Mamba2Model naming), which ``load_encoder`` reads back; ``pytorch_model.bin``
    instead with ``safe_serialization=False``. An int8-quantised model is refused."""
    check_saveable(model)
    model.save(folder, safe_serialization=safe_serialization)
