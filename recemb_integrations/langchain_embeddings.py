"""``RecembEmbeddings``: LangChain ``Embeddings`` over a recemb model (``recemb_integrations.langchain`` exports it).

Documents are embedded without any instruction, queries with one. The model loads (and torch with it) when an
instance is made, never when this module is imported.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from recemb_integrations._imports import require

__all__ = ["RecembEmbeddings"]

_embeddings = require("langchain_core.embeddings", "langchain")
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr  # noqa: E402 (langchain-core depends on pydantic 2)

from recemb.core.options import ENCODE_OPTIONS, MODEL_OPTIONS, check_options  # noqa: E402
from recemb.core.texts import check_text, check_texts  # noqa: E402

if TYPE_CHECKING:
    from recemb.core.embedder import Embedder

class RecembEmbeddings(BaseModel, _embeddings.Embeddings):
    """recemb text embeddings for LangChain (vector stores, retrievers).

    The model is loaded once per (model, device, dtype, quantize) in the process and shared by every instance; each
    instance keeps its own settings.

    Example:
        .. code-block:: python

            # bash scripts/install.sh langchain (in recemb's clone)
            from recemb_integrations.langchain import RecembEmbeddings
            embeddings = RecembEmbeddings(model_name="path/or/hub-id", query_instruction="SciFact")
    """

    model_name: str
    """Model folder or Hugging Face id (any format ``Embedder.from_pretrained`` reads)."""
    model_kwargs: dict[str, Any] = Field(default_factory=dict)
    """``Embedder.from_pretrained``'s options (``recemb.core.options.MODEL_OPTIONS``): device, dtype,
    tokenizer, hub options, and this instance's own vertical_chunk_size, max_memory (a budget such as "2GiB" that V
    and the rows per forward are picked to fit), backend, chunk_size, max_length, context_extension, threads (CPU
    threads: "auto" by default, chosen per chunk from the free cores; an int fixes them)."""
    encode_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Encoding options: batch_size, show_progress_bar, vertical_chunk_size, max_length."""
    query_instruction: str | None = None
    """Instruction for queries, or an E5 task name (e.g. "SciFact"); None: the web-search default.
    Documents never get one."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())
    _embedder: Any = PrivateAttr()

    def model_post_init(self, __context: Any) -> None:
        check_options("model_kwargs", self.model_kwargs, MODEL_OPTIONS)
        check_options("encode_kwargs", self.encode_kwargs, ENCODE_OPTIONS)
        from recemb.core.shared import shared_embedder  # torch loads with the model, not with this module

        self._embedder = shared_embedder(self.model_name, **self.model_kwargs)

    @property
    def embedder(self) -> Embedder:
        """The recemb ``Embedder`` behind these embeddings (shared by instances of the same model)."""
        return self._embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        # checked before list(): bytes would become ints, a str its characters
        return self._embedder.encode_documents(check_texts(texts, single=False), **self.encode_kwargs).tolist()

    def embed_query(self, text: str) -> list[float]:
        vectors = self._embedder.encode_queries([check_text(text)], instruction=self.query_instruction,
                                                **self.encode_kwargs)
        return vectors[0].tolist()

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)  # torch releases the GIL: the loop stays free

    async def aembed_query(self, text: str) -> list[float]:
        return await asyncio.to_thread(self.embed_query, text)
