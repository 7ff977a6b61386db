"""recemb.core: Mamba2 model with explicit state, checkpoint loading, vertical chunking, and ``Embedder``."""

from recemb.core.config import ConfigError, Mamba2Config
from recemb.core.embedder import Embedder
from recemb.core.loading import (
    DEFAULT_MODEL,
    CheckpointError,
    load_encoder,
    load_pretrained,
    resolve_model_path,
    save_encoder,
)
from recemb.core.mixer import Mamba2Block, Mamba2Mixer
from recemb.core.model import Mamba2Encoder
from recemb.core.prompts import DEFAULT_INSTRUCTION, TASK_INSTRUCTIONS, query_prompt, resolve_instruction
from recemb.core.shared import clear_shared, shared_embedder
from recemb.core.state import LayerState, ModelState
from recemb.core.tokenizer import TextTokenizer
from recemb.core.vertical import default_vertical_chunk_size, encode_vertical

__all__ = [
    "CheckpointError",
    "ConfigError",
    "DEFAULT_INSTRUCTION",
    "DEFAULT_MODEL",
    "Embedder",
    "LayerState",
    "Mamba2Block",
    "Mamba2Config",
    "Mamba2Encoder",
    "Mamba2Mixer",
    "ModelState",
    "TASK_INSTRUCTIONS",
    "TextTokenizer",
    "default_vertical_chunk_size",
    "encode_vertical",
    "load_encoder",
    "load_pretrained",
    "query_prompt",
    "resolve_instruction",
    "resolve_model_path",
    "save_encoder",
    "shared_embedder",
    "clear_shared",
]
