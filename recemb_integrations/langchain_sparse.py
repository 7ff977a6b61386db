"""langchain-qdrant ``SparseEmbeddings`` over recemb's offline BM25, for hybrid retrieval with ``RecembEmbeddings``.

The vectors are fastembed's ``Qdrant/bm25`` ones and carry no IDF: Qdrant applies it at query time, but only when the
sparse vector was created with ``modifier=Modifier.IDF``. langchain-qdrant creates it without a modifier unless it is
given ``sparse_vector_params``, so always pass them (or create the collection yourself with that modifier):

    from langchain_qdrant import QdrantVectorStore, RetrievalMode
    from qdrant_client import models
    from recemb_integrations.langchain import RecembEmbeddings
    from recemb_integrations.langchain_sparse import RecembBm25SparseEmbeddings

    store = QdrantVectorStore.from_texts(
        texts, embedding=RecembEmbeddings(model_name="path/or/hub-id"),
        sparse_embedding=RecembBm25SparseEmbeddings(), retrieval_mode=RetrievalMode.HYBRID,
        sparse_vector_params={"modifier": models.Modifier.IDF}, location=":memory:")

In HYBRID mode ``similarity_search(query, k)`` prefetches the top k of each side and fuses them with Qdrant's
reciprocal rank fusion (``hybrid_fusion=`` picks another); SPARSE mode ranks by BM25 alone. A query without BM25 terms
(empty, only stopwords) is ranked by the dense side.
"""

from __future__ import annotations

from recemb_integrations._imports import require

__all__ = ["RecembBm25SparseEmbeddings"]

_langchain_qdrant = require("langchain_qdrant", "langchain-qdrant")
from recemb_integrations.sparse import Bm25  # noqa: E402


class RecembBm25SparseEmbeddings(_langchain_qdrant.SparseEmbeddings):
    """BM25 sparse vectors computed offline (no model download), identical to fastembed's ``Qdrant/bm25``.

    Args:
        language: Snowball stemmer and stopword list to use.
        avg_len: the average document length in tokens assumed by the BM25 length normalisation.
        k: BM25 term-frequency saturation.
        b: BM25 length-normalisation strength.

    Examples:
        the ``langchain-qdrant`` extra, then
        ``QdrantVectorStore(client, "docs", embedding=..., sparse_embedding=RecembBm25SparseEmbeddings(),
        retrieval_mode=RetrievalMode.HYBRID)`` on a collection whose sparse vector has ``Modifier.IDF``.
    """

    def __init__(self, language: str = "english", avg_len: float = 256.0, k: float = 1.2, b: float = 0.75):
        self.language, self.avg_len, self.k, self.b = language, avg_len, k, b
        self._bm25 = Bm25(language=language, k=k, b=b, avg_len=avg_len)

    def embed_documents(self, texts: list[str]) -> list[_langchain_qdrant.SparseVector]:
        return [_to_langchain(vector) for vector in self._bm25.embed_documents(list(texts))]

    def embed_query(self, text: str) -> _langchain_qdrant.SparseVector:
        return _to_langchain(self._bm25.embed_query(text))

# the name before one capitalisation (0.x); kept so code written for it still runs
RecEmbBm25SparseEmbeddings = RecembBm25SparseEmbeddings


def _to_langchain(vector) -> _langchain_qdrant.SparseVector:
    return _langchain_qdrant.SparseVector(indices=list(vector.indices), values=list(vector.values))
