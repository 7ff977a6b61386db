"""Option names the LangChain and LlamaIndex adapters pass through to ``shared_embedder`` and ``Embedder.encode``."""

MODEL_KWARGS = frozenset({"device", "dtype", "vertical_chunk_size", "backend", "max_length", "revision", "cache_dir",
                          "token", "local_files_only"})
ENCODE_KWARGS = frozenset({"batch_size", "show_progress_bar", "vertical_chunk_size", "max_length"})


def check_options(name: str, given: dict, allowed: frozenset) -> None:
    unknown = set(given) - allowed
    if unknown:
        raise ValueError(f"unknown {name}: {sorted(unknown)}; allowed: {sorted(allowed)}")
