"""Everything that touches disk or the hub: model folders, configs, weights.

Formats read:
- transformers Mamba2: ``config.json`` with ``model_type: "mamba2"``; ``model.safetensors`` (or sharded with
  ``model.safetensors.index.json``) or ``pytorch_model.bin`` (or sharded with its index). recemb's
  sentence-transformers export is this format plus sentence-transformers files.
- mamba_ssm: ``config.json`` with ``ssm_cfg`` (``layer: "Mamba2"``) and ``pytorch_model.bin``.
- mistral_inference (Mamba-Codestral-7B native): ``params.json`` and ``consolidated.safetensors``.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import torch

from recemb.core.config import Mamba2Config
from recemb.core.errors import CheckpointError, ConfigError
from recemb.core.files import (
    check_tensor_names,
    checkpoint_dtype,
    default_dtype,
    read_json,
    HF_WEIGHT_FILES,
    read_weights,
    write_checkpoint,
)
from recemb.core.context_extension import ContextExtension
from recemb.core.encoder import RecurrentEncoder
from recemb.core.model import Mamba2Encoder
from recemb.core.precision import LOW_PRECISION, auto_dtype, check_quantize, check_saveable, quantize_int8
from recemb.core.tokenizer import TextTokenizer

# Architectures besides Mamba2 (which loads here). Each module has detect(folder) -> format name or None and
# load(folder, format, device, dtype) -> its RecurrentEncoder.
OTHER_ARCHITECTURES = ("recemb.core.xlstm", "recemb.core.rwkv7")
FORMATS_HELP = (
    "recemb reads Mamba2, xLSTM and RWKV-7: transformers Mamba2 (config.json with model_type 'mamba2' + "
    "model.safetensors, a sharded model.safetensors.index.json, or pytorch_model.bin), mamba_ssm (config.json "
    "with ssm_cfg + pytorch_model.bin), mistral_inference (params.json + consolidated.safetensors); xLSTM as "
    "transformers' (config.json with model_type 'xlstm') or the xlstm package's (config.yaml + "
    "model_N.safetensors); RWKV-7 as the rwkv package's .pth or flash-linear-attention's format (model_type "
    "'rwkv7')"
)
WEIGHT_FILES = {
    "transformers": HF_WEIGHT_FILES,
    "mamba_ssm": ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.safetensors",
                  "model.safetensors.index.json"),
    "codestral": ("consolidated.safetensors",),
}
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

# Models shipped inside the package (trained by this project, see tools/mini_model in the repository).
BUNDLED_MODELS_DIR = Path(importlib.import_module("recemb").__file__).resolve().parent / "models"
DEFAULT_MODEL = "recemb-mamba2-mini"


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
    and architecture by ``load_encoder``) stay as they are."""
    if dtype is None or isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    resolved = getattr(torch, str(dtype).replace("torch.", ""), None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    return resolved


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
    folder = resolve_model_path(name_or_path, **hub)
    model = load_encoder(folder, device=resolve_device(device), dtype=resolve_dtype(dtype), quantize=quantize)
    if isinstance(tokenizer, TextTokenizer):
        return model, tokenizer
    if tokenizer is not None:
        hub["local_files_only"] = bool(local_files_only) or hub_offline()
        return model, TextTokenizer.load(tokenizer, eos_token_id=eos_token_id, **hub)
    return model, TextTokenizer.from_folder(folder, eos_token_id=eos_token_id)


def detect_format(folder: Path) -> str:
    """``"transformers"``, ``"mamba_ssm"`` or ``"codestral"``; a clear error otherwise."""
    config_path = folder / "config.json"
    if config_path.is_file():
        d = read_json(config_path, FORMATS_HELP)
        if d.get("model_type") == "mamba2":
            return "transformers"
        if "ssm_cfg" in d:
            return "mamba_ssm"
        raise ConfigError(
            f"{config_path}: model_type {d.get('model_type')!r} is not an architecture recemb runs (mamba2, "
            f"xlstm, rwkv7; or a mamba_ssm config with ssm_cfg). {FORMATS_HELP}"
        )
    if (folder / "params.json").is_file():
        return "codestral"
    raise FileNotFoundError(f"{folder} has no config.json or params.json. {FORMATS_HELP}")


def read_config(folder: Path, fmt: str | None = None) -> Mamba2Config:
    fmt = fmt or detect_format(folder)
    if fmt == "transformers":
        return Mamba2Config.from_transformers_dict(read_json(folder / "config.json", FORMATS_HELP))
    if fmt == "mamba_ssm":
        return Mamba2Config.from_mamba_ssm_dict(read_json(folder / "config.json", FORMATS_HELP))
    if fmt == "codestral":
        return Mamba2Config.from_codestral_params(read_json(folder / "params.json", FORMATS_HELP))
    raise ValueError(f"unknown format {fmt!r}")


def read_state_dict(folder: Path, fmt: str) -> dict[str, torch.Tensor]:
    """Raw tensors from the first weight file of ``fmt`` present in ``folder`` (on the CPU)."""
    return read_weights(folder, WEIGHT_FILES[fmt], f"a {fmt} config", FORMATS_HELP)


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


def load_encoder(
    folder: str | os.PathLike,
    device: str | torch.device,
    dtype: torch.dtype | str | None = None,
    quantize: str | None = None,
) -> RecurrentEncoder:
    """The encoder of a model folder, its architecture picked from the checkpoint (config.json's model_type, or
    the files: params.json for mistral_inference Mamba2, a .pth for RWKV-7); an unknown one is refused by name.

    dtype None: fp32 on the CPU, the checkpoint's dtype elsewhere. "auto": on the CPU bf16 where it multiplies
    bf16 natively and the architecture has a mixed-precision path (Mamba2), else fp32; elsewhere the
    checkpoint's. bf16 on the CPU is mixed precision: see ``recemb.core.precision``.
    quantize "int8": in_proj becomes an int8 dynamically quantised layer (CPU, from fp32 weights); with a bf16
    ``dtype`` (or "auto" on a CPU with bf16 units) out_proj and the embedding table are then bf16 as above.
    """
    folder = Path(folder)
    device = torch.device(device)
    dtype, quantize = resolve_dtype(dtype), check_quantize(quantize)
    if quantize is not None and device.type != "cpu":  # refused before the weights are read
        raise ValueError(f"quantize={quantize!r} runs on the CPU only (torch's quantised kernels); device is "
                         f"{device}")
    architecture, fmt = detect_architecture(folder)
    if dtype == "auto":
        dtype = auto_dtype(device, supports_mixed=architecture == "mamba2")
    if architecture == "mamba2":
        mixed = device.type == "cpu" and dtype in LOW_PRECISION
        model = load_mamba2(folder, device, torch.float32 if mixed or quantize else dtype)
        if mixed or quantize is not None:
            model.keep_weight_samples()  # the checkpoint's identity, before bf16 or int8 change the weights
        if quantize is not None:  # from fp32 weights: in_proj to int8
            quantize_int8(model, device)
        if mixed:  # then what is left of the projections to bf16
            model.to_mixed_precision(dtype)
    else:
        model = importlib.import_module(f"recemb.core.{architecture}").load(folder, fmt, device, dtype)
        model.requires_grad_(False)
        model.eval()
        if quantize is not None:
            quantize_int8(model, device)  # refuses architectures without an int8 path
    return model


def detect_architecture(folder: str | os.PathLike) -> tuple[str, str]:
    """(architecture, format) of a model folder: ("mamba2", "transformers" | "mamba_ssm" | "codestral"),
    ("xlstm", ...) or ("rwkv7", ...); a clear error for anything else."""
    folder = Path(folder)
    for name in OTHER_ARCHITECTURES:
        fmt = importlib.import_module(name).detect(folder)
        if fmt is not None:
            return name.rsplit(".", 1)[-1], fmt
    return "mamba2", detect_format(folder)


def load_mamba2(
    folder: str | os.PathLike,
    device: str | torch.device,
    dtype: torch.dtype | None = None,
) -> Mamba2Encoder:
    """Build a ``Mamba2Encoder`` from a model folder in any Mamba2 format, with the folder's calibrated
    context-extension artifacts attached (``context_extension.json``; which methods run is each caller's
    choice).

    dtype None: fp32 on the CPU, the checkpoint's dtype elsewhere.
    """
    folder = Path(folder)
    device = torch.device(device)
    fmt = detect_format(folder)
    config = read_config(folder, fmt)
    state = to_encoder_keys(read_state_dict(folder, fmt), config)
    dtype = dtype or default_dtype(device) or checkpoint_dtype(config, state)
    with torch.device("meta"):
        model = Mamba2Encoder(config)
    check_state_dict(model, state, folder)
    state = {k: v.to(device=device, dtype=dtype) for k, v in state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    model.requires_grad_(False)
    extension = ContextExtension.load(folder)
    if extension is not None:
        extension.check(config.num_hidden_layers, config.num_heads)
        model.context_extension = extension
    return model.eval()



def check_state_dict(model: Mamba2Encoder, state: dict[str, torch.Tensor], source: Path | str) -> None:
    """Every expected tensor present with the shape the config implies; nothing unexpected."""
    expected = model.state_dict()
    check_tensor_names(expected, state, source, "(hybrid or MLP checkpoints are not supported)")
    c = model.config
    for key, ref in expected.items():
        got = tuple(state[key].shape)
        if got != tuple(ref.shape):
            hint = ""
            if key.endswith("in_proj.weight"):
                hint = f" ({c.describe_in_proj()}; check n_groups and state_size)"
            elif key.endswith("conv1d.weight"):
                hint = f" (conv rows = I + 2*g*n = {c.intermediate_size} + 2*{c.n_groups}*{c.state_size})"
            raise CheckpointError(
                f"{source}: tensor {key!r} has shape {got}, but the config implies {tuple(ref.shape)}{hint}"
            )


def save_encoder(model: Mamba2Encoder, folder: str | os.PathLike, safe_serialization: bool = True) -> None:
    """Write ``config.json`` + ``model.safetensors`` (or ``pytorch_model.bin``) in transformers' Mamba2Model
    naming."""
    check_saveable(model)
    write_checkpoint(folder, model.config.to_transformers_dict(), model.state_dict(), "torch_dtype",
                     model.embeddings.weight.dtype, safetensors=safe_serialization)


