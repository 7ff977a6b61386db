"""recemb.core: recurrent language models (Mamba2, xLSTM, RWKV-7) as text embedders, with constant memory in the
input length.

The architecture-neutral core: the encoder protocol (``RecurrentEncoder``), the registry of architectures
(``ARCHITECTURES``; each architecture is a package under ``recemb.core.architectures``, e.g. Mamba2's classes in
``recemb.core.architectures.mamba2``), checkpoint loading, vertical chunking, prompts, the tokenizer, ``Embedder``
and ``shared_embedder``.
"""

from recemb.core.architectures import ARCHITECTURES, Architecture, architecture
from recemb.core.embedder import Embedder
from recemb.core.encoder import ChunkRun, RecurrentEncoder
from recemb.core.errors import CheckpointError, ConfigError, DamagedCheckpointError
from recemb.core.loading import (
    DEFAULT_MODEL,
    detect_architecture,
    load_encoder,
    load_pretrained,
    resolve_model_path,
    save_encoder,
)
from recemb.core.prompts import DEFAULT_INSTRUCTION, TASK_INSTRUCTIONS, query_prompt, resolve_instruction
from recemb.core.shared import clear_shared, shared_embedder
from recemb.core.tokenizer import TextTokenizer
from recemb.core.vertical import default_vertical_chunk_size, encode_vertical, encode_with_branches

__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "CheckpointError",
    "ChunkRun",
    "ConfigError",
    "DEFAULT_INSTRUCTION",
    "DEFAULT_MODEL",
    "DamagedCheckpointError",
    "Embedder",
    "RecurrentEncoder",
    "TASK_INSTRUCTIONS",
    "TextTokenizer",
    "architecture",
    "clear_shared",
    "default_vertical_chunk_size",
    "detect_architecture",
    "encode_vertical",
    "encode_with_branches",
    "load_encoder",
    "load_pretrained",
    "query_prompt",
    "resolve_instruction",
    "resolve_model_path",
    "save_encoder",
    "shared_embedder",
]
