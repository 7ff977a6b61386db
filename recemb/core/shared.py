"""One loaded model per (model, device, dtype, quantize) per process, shared by every adapter that asks for it.

A 7B checkpoint must not be loaded twice because two LangChain or LlamaIndex objects were built. The weights,
tokenizer and calibrated artifacts are shared; each caller gets its own light ``Embedder`` with its own
settings (V, backend, scan chunk size, truncation, context-extension mode), handed down at call time, so
callers on one model never see each other's settings, from any thread.
"""

from __future__ import annotations

import os
import threading

from recemb.core.embedder import Embedder
from recemb.core.encoder import RecurrentEncoder
from recemb.core.files import default_dtype
from recemb.core.loading import load_pretrained, resolve_device, resolve_dtype
from recemb.core.options import split_options
from recemb.core.tokenizer import TextTokenizer

__all__ = ["clear_shared", "shared_embedder"]

_LOCK = threading.Lock()
_LOADED: dict[tuple, tuple[RecurrentEncoder, TextTokenizer | None]] = {}


def shared_embedder(model_name_or_path: str | os.PathLike, **options) -> Embedder:
    """An ``Embedder`` whose model is loaded once per (model, device, dtype, quantize) in this process.

    ``options`` are ``Embedder.from_pretrained``'s (``recemb.core.options.MODEL_OPTIONS``). The load options
    go to the first load (the revision and the tokenizer choice are part of what is shared: another value
    loads another copy); the caller options are this Embedder's own.
    """
    load, caller = split_options(options)
    load["device"] = resolve_device(load.get("device"))
    # The loaders' own default, so that None and its meaning are one key
    load["dtype"] = resolve_dtype(load.get("dtype")) or default_dtype(load["device"])
    tokenizer = load.get("tokenizer")
    tokenizer_key = str(tokenizer) if isinstance(tokenizer, (str, os.PathLike)) else id(tokenizer)
    key = (str(model_name_or_path), str(load["device"]), str(load["dtype"]), load.get("quantize") or None,
           load.get("revision"), tokenizer_key, load.get("eos_token_id"))
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = load_pretrained(model_name_or_path, **load)
        model, tok = _LOADED[key]
    return Embedder(model, tok, name=str(model_name_or_path), **caller)


def clear_shared() -> None:
    """Forget every shared model (they are freed once no Embedder refers to them)."""
    with _LOCK:
        _LOADED.clear()
