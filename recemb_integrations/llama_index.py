"""LlamaIndex ``BaseEmbedding`` over recemb: nodes without any instruction, queries with one.

    from recemb_integrations.llama_index import RecEmbEmbedding
    embed_model = RecEmbEmbedding(model_name="recemb/codestral-mamba2", embed_batch_size=8)

LlamaIndex embeds ``node.get_content(metadata_mode=EMBED)``, which prepends metadata to the text; list keys such as
paths in ``excluded_embed_metadata_keys`` to keep them out of the embedding.
"""

from __future__ import annotations

import asyncio
from typing import Any

from recemb_integrations._imports import require

_base = require("llama_index.core.base.embeddings.base", "llama-index")
_pydantic = require("llama_index.core.bridge.pydantic", "llama-index")

from recemb.core import Embedder, shared_embedder  # noqa: E402
from recemb_integrations._options import MODEL_KWARGS, check_options  # noqa: E402


class RecEmbEmbedding(_base.BaseEmbedding):
    """recemb text embeddings for LlamaIndex (ingestion pipelines, vector store indexes).

    Args:
        model_name: model folder or Hugging Face id.
        model_kwargs: device, dtype, vertical_chunk_size, backend, max_length, hub options.
        query_instruction: instruction or E5 task name for queries; None: the web-search default.
        embed_batch_size: texts per ``_get_text_embeddings`` call (LlamaIndex batches nodes by it).

    Examples:
        ``pip install "recemb[llama-index]"``, then
        ``Settings.embed_model = RecEmbEmbedding(model_name="path/or/hub-id")``.
    """

    model_kwargs: dict[str, Any] = _pydantic.Field(default_factory=dict, description="loading options")
    query_instruction: str | None = _pydantic.Field(default=None, description="query instruction or E5 task name")
    show_progress_bar: bool | None = _pydantic.Field(default=None, description="tqdm bar for long inputs")
    _embedder: Any = _pydantic.PrivateAttr()

    def __init__(self, model_name: str, **kwargs: Any):
        super().__init__(model_name=model_name, **kwargs)
        check_options("model_kwargs", self.model_kwargs, MODEL_KWARGS)
        self._embedder = shared_embedder(model_name, **self.model_kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "RecEmbEmbedding"

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    def _encode_kwargs(self) -> dict[str, Any]:
        return {"batch_size": self.embed_batch_size, "show_progress_bar": self.show_progress_bar}

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embedder.encode_queries([query], instruction=self.query_instruction,
                                             **self._encode_kwargs())[0].tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._embedder.encode_documents(list(texts), **self._encode_kwargs()).tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
