import functools
import tempfile
from pathlib import Path


@functools.lru_cache(maxsize=None)
def tiny_model_dir() -> str:
    """A tiny model folder for tests that need a path outside fixtures (LangChain's standard-suite properties)."""
    from tests.utils import save_transformers_checkpoint, transformers_model

    folder = Path(tempfile.mkdtemp(prefix="recemb-tiny-")) / "model"
    save_transformers_checkpoint(transformers_model("g1"), folder)
    return str(folder)
