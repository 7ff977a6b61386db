"""One loaded model per (model, device, dtype) per process, shared by every adapter that asks for it.

A 7B checkpoint must not be loaded twice because two LangChain or LlamaIndex objects were built. The weights and
tokenizer are shared; each caller gets its own light ``Embedder`` view with its own settings (V, batch, ...).
"""

from __future__ import annotations

import os
import threading

import torch

from recemb.core.embedder import Embedder, _resolve_device, _resolve_dtype
from recemb.core.loading import load_encoder, resolve_model_path
from recemb.core.model import Mamba2Encoder
from recemb.core.tokenizer import TextTokenizer

_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str, str], tuple[Mamba2Encoder, TextTokenizer | None]] = {}


def shared_embedder(
    model_name_or_path: str | os.PathLike,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    vertical_chunk_size: int | None = None,
    backend: str = "auto",
    max_length: int | None = None,
    **hub,
) -> Embedder:
    """An ``Embedder`` whose model is loaded once per (model, device, dtype) in this process.

    ``hub`` goes to the first load (revision, cache_dir, token, local_files_only).
    """
    device = _resolve_device(device)
    dtype = _resolve_dtype(dtype)
    key = (str(model_name_or_path), str(device), str(dtype))
    with _LOCK:
        if key not in _LOADED:
            folder = resolve_model_path(model_name_or_path, **hub)
            _LOADED[key] = (load_encoder(folder, device=device, dtype=dtype), TextTokenizer.from_folder(folder))
        model, tokenizer = _LOADED[key]
    return Embedder(model, tokenizer, vertical_chunk_size=vertical_chunk_size, backend=backend,
                    max_length=max_length, name=str(model_name_or_path))


def clear_shared() -> None:
    """Forget every shared model (they are freed once no Embedder refers to them)."""
    with _LOCK:
        _LOADED.clear()
