"""recemb.core: recurrent language models (Mamba2, xLSTM, RWKV-7) as text embedders, with constant memory in the
input length.

The architecture-neutral core: the encoder protocol (``RecurrentEncoder``), the registry of architectures
(``ARCHITECTURES``; each architecture is a package under ``recemb.core.architectures``, e.g. Mamba2's classes in
``recemb.core.architectures.mamba2``), checkpoint loading, vertical chunking, prompts, the tokenizer, ``Embedder``
and ``shared_embedder``.

Names load when first used (PEP 562): importing ``recemb.core`` or a light module under it (texts, options,
prompts, streaming) loads no torch; torch loads with the first name that needs it, ``Embedder`` among them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the module under recemb.core that defines it
_HOMES = {
    "ARCHITECTURES": "architectures", "Architecture": "architectures", "architecture": "architectures",
    "Embedder": "embedder",
    "ChunkRun": "encoder", "RecurrentEncoder": "encoder",
    "CheckpointError": "errors", "ConfigError": "errors", "DamagedCheckpointError": "errors",
    "DEFAULT_MODEL": "loading", "detect_architecture": "loading", "load_encoder": "loading",
    "load_pretrained": "loading", "resolve_model_path": "loading", "save_encoder": "loading",
    "DEFAULT_INSTRUCTION": "prompts", "TASK_INSTRUCTIONS": "prompts", "query_prompt": "prompts",
    "resolve_instruction": "prompts",
    "clear_shared": "shared", "shared_embedder": "shared",
    "TextTokenizer": "tokenizer",
    "default_vertical_chunk_size": "vertical", "encode_vertical": "vertical", "encode_with_branches": "vertical",
}

__all__ = sorted(_HOMES)

if TYPE_CHECKING:
    from recemb.core.architectures import ARCHITECTURES, Architecture, architecture  # noqa: F401
    from recemb.core.embedder import Embedder  # noqa: F401
    from recemb.core.encoder import ChunkRun, RecurrentEncoder  # noqa: F401
    from recemb.core.errors import CheckpointError, ConfigError, DamagedCheckpointError  # noqa: F401
    from recemb.core.loading import (  # noqa: F401
        DEFAULT_MODEL,
        detect_architecture,
        load_encoder,
        load_pretrained,
        resolve_model_path,
        save_encoder,
    )
    from recemb.core.prompts import DEFAULT_INSTRUCTION, TASK_INSTRUCTIONS, query_prompt, resolve_instruction  # noqa
    from recemb.core.shared import clear_shared, shared_embedder  # noqa: F401
    from recemb.core.tokenizer import TextTokenizer  # noqa: F401
    from recemb.core.vertical import default_vertical_chunk_size, encode_vertical, encode_with_branches  # noqa


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # once found, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
