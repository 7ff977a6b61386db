"""LangChain ``Embeddings`` over recemb: documents without any instruction, queries with one.

    from recemb_integrations.langchain import RecembEmbeddings
    emb = RecembEmbeddings(model_name="recemb/codestral-mamba2", model_kwargs={"vertical_chunk_size": 1024})
    emb.embed_documents(["a long document ..."]); emb.embed_query("a question")

``RecembVectorStore`` (``recemb_integrations.langchain_store``) keeps documents in a recemb collection as the main
job does: whole documents and their passages, one point per id, searched hybrid.
"""

from __future__ import annotations

from typing import Any

from recemb_integrations.langchain_embeddings import RecembEmbeddings

_STORE_NAMES = ("RecembRetriever", "RecembVectorStore")  # loaded with qdrant-client only when asked for
__all__ = ["RecembEmbeddings", *_STORE_NAMES]

RecEmbEmbeddings = RecembEmbeddings  # the name before one capitalisation (0.x); kept so code written for it still runs


def __getattr__(name: str) -> Any:
    if name in _STORE_NAMES:
        import recemb_integrations.langchain_store as store_module

        return getattr(store_module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
