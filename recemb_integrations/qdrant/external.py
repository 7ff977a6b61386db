"""A model recemb does not run, as the main job's embedder: texts in, vectors out.

A LangChain ``Embeddings`` or a LlamaIndex embed model that is not recemb's can still fill a recemb collection:
each document becomes one point with that model's dense vector and recemb's BM25 vector beside it. What needs
recemb's own model is off: passages (cut by its tokenizer, embedded from token ids), streaming a long document, a
token count. The collection records the model by name and dimension (``fingerprint``), so a sync or a search with
another model is refused as with recemb's own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["ExternalEmbedder"]


class ExternalEmbedder:
    """``embed_documents(texts) -> vectors`` and ``embed_query(text) -> vector`` of another library's model, named
    ``name`` (what the collection records; two embedders of one name and dimension are taken for the same model),
    ``dim`` its vectors' size. Vectors are L2-normalised here (collections use cosine)."""

    external = True  # the writer embeds whole texts with it; no passages, no tokens
    tokenizer = None
    max_length = None
    needs_whole_length = False

    def __init__(self, name: str, dim: int, embed_documents: Callable[[list[str]], Sequence[Sequence[float]]],
                 embed_query: Callable[[str], Sequence[float]]):
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"an external model needs a name to record, got {name!r}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        self.name, self.dim = name, dim
        self._embed_documents, self._embed_query = embed_documents, embed_query
        self.fingerprint = "external-" + hashlib.sha256(f"{name}\x00{dim}".encode()).hexdigest()[:16]

    def streams(self, text: str) -> bool:
        return False

    def encode_documents(self, texts: Sequence[str], **_) -> np.ndarray:
        return self._normalised(self._embed_documents(list(texts)), len(texts))

    def encode_queries(self, queries: Sequence[str], instruction: str | None = None, **_) -> np.ndarray:
        return self._normalised([self._embed_query(q) for q in queries], len(queries))

    def _normalised(self, vectors, count: int) -> np.ndarray:
        array = np.asarray(vectors, dtype=np.float32).reshape(count, -1) if count else np.zeros((0, self.dim),
                                                                                               np.float32)
        if array.shape[1] != self.dim:
            raise ValueError(f"{self.name} gave vectors of {array.shape[1]} dimensions, not {self.dim}")
        norms = np.linalg.norm(array, axis=1, keepdims=True)
        return array / np.where(norms > 0, norms, 1)
