"""LlamaIndex ``BaseEmbedding`` over recemb: nodes without any instruction, queries with one.

    from recemb_integrations.llama_index import RecembEmbedding
    embed_model = RecembEmbedding(model_name="recemb/codestral-mamba2", embed_batch_size=8)

LlamaIndex embeds ``node.get_content(metadata_mode=EMBED)``, which prepends metadata to the text; list keys such as
paths in ``excluded_embed_metadata_keys`` to keep them out of the embedding. ``bm25_sparse_fns`` adds recemb's offline
BM25 to LlamaIndex's Qdrant store for hybrid search.
"""

from __future__ import annotations

from typing import Any, Callable

from recemb_integrations.llama_index_embedding import RecembEmbedding

_STORE_NAMES = ("EmbedInStore", "RecembVectorStore")  # loaded with qdrant-client only when asked for
__all__ = ["RecembEmbedding", "SparseEncoding", "bm25_sparse_fns", *_STORE_NAMES]

SparseEncoding = tuple[list[list[int]], list[list[float]]]
"""What LlamaIndex's Qdrant store expects from ``sparse_doc_fn`` / ``sparse_query_fn``: (indices, values) per text."""


RecEmbEmbedding = RecembEmbedding  # the name before one capitalisation (0.x); kept so code written for it still runs


def bm25_sparse_fns(language: str = "english", avg_len: float = 256.0, k: float = 1.2, b: float = 0.75
                    ) -> tuple[Callable[[list[str]], SparseEncoding], Callable[[list[str]], SparseEncoding]]:
    """``(sparse_doc_fn, sparse_query_fn)`` computing fastembed's ``Qdrant/bm25`` vectors offline, for hybrid search.

    The vectors carry no IDF: Qdrant applies it at query time only if the sparse vector has ``Modifier.IDF``, which
    LlamaIndex sets only for a ``fastembed_sparse_model`` that asks for it. Pass ``sparse_config`` (it is used when the
    store creates the collection; an existing collection keeps its own config)::

        doc_fn, query_fn = bm25_sparse_fns()
        store = QdrantVectorStore("docs", client=client, enable_hybrid=True, sparse_doc_fn=doc_fn,
                                  sparse_query_fn=query_fn,
                                  sparse_config=models.SparseVectorParams(modifier=models.Modifier.IDF))
        index.as_retriever(vector_store_query_mode="hybrid", similarity_top_k=5, sparse_top_k=5, hybrid_top_k=5)

    fastembed is not needed. Documents get the node text with its embed metadata, as on the dense side. The store
    fetches the dense top ``similarity_top_k`` and the BM25 top ``sparse_top_k`` (default: ``similarity_top_k``)
    separately and fuses them in Python with ``hybrid_fusion_fn``, by default ``relative_score_fusion``: each side's
    scores min-max normalised, mixed as ``alpha * dense + (1 - alpha) * sparse`` (alpha 0.5), cut to ``hybrid_top_k``.
    Its quirks: a side whose scores are all equal (e.g. a single BM25 hit) keeps its raw scores, and with no BM25 hit
    (a stopword-only query) the dense hits come back unchanged. ``vector_store_query_mode="sparse"`` ranks by BM25
    alone. The ``llama-index-qdrant`` extra brings the store and BM25's packages.
    """
    from recemb_integrations.sparse import Bm25  # needs mmh3 and py-rust-stemmers, which plain embedding does not

    bm25 = Bm25(language=language, k=k, b=b, avg_len=avg_len)

    def bm25_documents(texts: list[str]) -> SparseEncoding:
        return _unzip(bm25.embed_documents(list(texts)))

    def bm25_queries(texts: list[str]) -> SparseEncoding:
        return _unzip([bm25.embed_query(text) for text in texts])

    return bm25_documents, bm25_queries


def _unzip(vectors) -> SparseEncoding:
    return [list(v.indices) for v in vectors], [list(v.values) for v in vectors]


def __getattr__(name: str) -> Any:
    if name in _STORE_NAMES:
        import recemb_integrations.llama_index_store as store_module

        return getattr(store_module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
