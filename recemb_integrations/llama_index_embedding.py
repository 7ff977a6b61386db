"""``RecembEmbedding``: a LlamaIndex ``BaseEmbedding`` over a recemb model (``recemb_integrations.llama_index``
exports it).

Nodes are embedded without any instruction, queries with one. The model loads (and torch with it) when an instance
is made, never when this module is imported.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from recemb_integrations._imports import require

__all__ = ["RecembEmbedding"]

_base = require("llama_index.core.base.embeddings.base", "llama-index")
_pydantic = require("llama_index.core.bridge.pydantic", "llama-index")

from recemb.core.options import MODEL_OPTIONS, check_options  # noqa: E402
from recemb.core.texts import check_text, check_texts  # noqa: E402

if TYPE_CHECKING:
    from recemb.core.embedder import Embedder

class RecembEmbedding(_base.BaseEmbedding):
    """recemb text embeddings for LlamaIndex (ingestion pipelines, vector store indexes).

    Args:
        model_name: model folder or Hugging Face id.
        model_kwargs: ``Embedder.from_pretrained``'s options (``recemb.core.options.MODEL_OPTIONS``); the
            model is shared by every instance, the settings (V, max_memory, backend, chunk_size, max_length,
            context_extension, threads) are not; ``{"max_memory": "2GiB"}`` picks V and the rows per forward to fit.
        query_instruction: instruction or E5 task name for queries; None: the web-search default.
        embed_batch_size: texts per ``_get_text_embeddings`` call (LlamaIndex batches nodes by it).

    Examples:
        the ``llama-index`` extra, then
        ``Settings.embed_model = RecembEmbedding(model_name="path/or/hub-id")``.
    """

    model_kwargs: dict[str, Any] = _pydantic.Field(default_factory=dict, description="loading options")
    query_instruction: str | None = _pydantic.Field(default=None, description="query instruction or E5 task name")
    show_progress_bar: bool | None = _pydantic.Field(default=None, description="tqdm bar for long inputs")
    _embedder: Any = _pydantic.PrivateAttr()

    def __init__(self, model_name: str, **kwargs: Any):
        super().__init__(model_name=model_name, **kwargs)
        check_options("model_kwargs", self.model_kwargs, MODEL_OPTIONS)
        from recemb.core.shared import shared_embedder  # torch loads with the model, not with this module

        self._embedder = shared_embedder(model_name, **self.model_kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "RecembEmbedding"

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    def _encode_kwargs(self) -> dict[str, Any]:
        return {"batch_size": self.embed_batch_size, "show_progress_bar": self.show_progress_bar}

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embedder.encode_queries([check_text(query, "query")], instruction=self.query_instruction,
                                             **self._encode_kwargs())[0].tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([check_text(text)])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        # checked before list(): bytes would become ints, a str its characters
        return self._embedder.encode_documents(check_texts(texts, single=False), **self._encode_kwargs()).tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
