"""The options of a recemb embedder, named once for every entry point.

``Embedder.from_pretrained`` takes LOAD_OPTIONS (what is loaded: shared by every caller of one loaded model)
and CALLER_OPTIONS (how this caller runs it: kept per ``Embedder`` and handed down at call time, so two
callers of one shared model may differ). ``Embedder.encode`` takes ENCODE_OPTIONS per call.
``shared_embedder``, the LangChain and LlamaIndex adapters and the sentence-transformers module take their
option lists from here; tests check that the signatures agree.
"""

from __future__ import annotations

AUTO = "auto"  # vertical_chunk_size="auto": V from the budget
CONTEXT_EXTENSION_MODES = ("auto", "off", "mambaextend", "longmamba", "both")  # what a caller may ask for
HUB_OPTIONS = ("revision", "cache_dir", "token", "local_files_only")
LOAD_OPTIONS = ("device", "dtype", "quantize", "tokenizer", "eos_token_id") + HUB_OPTIONS
CALLER_OPTIONS = ("vertical_chunk_size", "max_memory", "backend", "chunk_size", "max_length", "context_extension",
                  "threads")
MODEL_OPTIONS = LOAD_OPTIONS + CALLER_OPTIONS  # everything from_pretrained takes besides the name
ENCODE_OPTIONS = ("batch_size", "show_progress_bar", "vertical_chunk_size", "max_length")

__all__ = ["AUTO", "CALLER_OPTIONS", "CONTEXT_EXTENSION_MODES", "ENCODE_OPTIONS", "HUB_OPTIONS", "LOAD_OPTIONS",
           "MODEL_OPTIONS", "check_chunk_size", "check_options", "check_positive", "split_options"]


def check_options(what: str, given: dict, allowed: tuple[str, ...]) -> None:
    """A clear error for option names outside ``allowed`` (a typo must not be silently ignored)."""
    unknown = set(given) - set(allowed)
    if unknown:
        raise ValueError(f"unknown {what}: {sorted(unknown)}; allowed: {sorted(allowed)}")


def split_options(options: dict) -> tuple[dict, dict]:
    """(load options, caller options) of a dict of MODEL_OPTIONS; anything else is an error."""
    check_options("model options", options, MODEL_OPTIONS)
    return ({k: v for k, v in options.items() if k in LOAD_OPTIONS},
            {k: v for k, v in options.items() if k in CALLER_OPTIONS})


def check_positive(name: str, value: int | None) -> int | None:
    """``value`` if it is a positive int or None; a ValueError naming ``name`` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")
    return value


def check_chunk_size(value: int | str | None) -> int | str | None:
    """vertical_chunk_size: a positive int, "auto" (from max_memory) or None."""
    if value == AUTO:
        return AUTO
    if isinstance(value, str):
        raise ValueError(f"vertical_chunk_size must be a positive int, 'auto' or None, got {value!r}")
    return check_positive("vertical_chunk_size", value)
