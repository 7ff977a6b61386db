"""Brute-force references for hybrid retrieval through the framework stores: a corpus, dense and BM25 rankings."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

CORPUS = [
    "The moon pulls the ocean and the tides follow it.",
    "Spring tides come at new moon and at full moon, neap tides in between.",
    "Sailors read tide tables before leaving the harbour.",
    "A full moon rose over the quiet harbour.",
    "Ocean currents carry heat from the equator towards the poles.",
    "Sourdough bread needs a long, cold fermentation.",
    "Bread dough rises slowly for hours while the yeast ferments its sugars.",
    "A baker shapes the dough and bakes bread in a hot oven every morning.",
    "Fermentation turns cabbage into sauerkraut.",
    "Rye bread is dense, sour and keeps for a week.",
    "State space models keep a fixed-size recurrent state.",
    "The memory of a recurrent model does not grow with the input length.",
    "Attention needs memory that grows with the square of the sequence length.",
    "Mamba2 computes its scan in chunks with matrix multiplications.",
    "A recurrent state summarises everything the model has read so far.",
    "Vertical chunking feeds long inputs to every layer one chunk at a time.",
    "Qdrant stores dense and sparse vectors for each point.",
    "Sparse vectors from BM25 score exact word matches.",
    "Reciprocal rank fusion merges the rankings of several searches.",
    "Hybrid search combines a dense ranking with a sparse ranking.",
    "Tide pools hold small crabs when the ocean retreats.",
    "Yeast, flour, water and salt: bread needs nothing more.",
    "Long documents are embedded whole by a recurrent model, without any splitting into passages.",
    "The harbour master checks the tide and the moon phase before ships leave.",
]
"""Short texts with overlapping vocabulary, so BM25 ranks several documents per query."""

QUERIES = ["moon tides over the ocean", "bread fermentation", "recurrent model memory", "harbour tide"]
"""Queries whose words occur in several documents of different lengths (no tied BM25 scores)."""

RRF_K = 2
"""qdrant-client's default ranking constant (``DEFAULT_RANKING_CONSTANT_K`` in ``qdrant_client/hybrid/fusion.py``)."""


def dense_ranking(query_vector: np.ndarray, document_vectors: np.ndarray) -> list[tuple[int, float]]:
    """(document index, cosine similarity), best first."""
    docs = np.asarray(document_vectors, dtype=np.float64)
    q = np.asarray(query_vector, dtype=np.float64)
    scores = docs @ q / (np.linalg.norm(docs, axis=1) * np.linalg.norm(q))
    return sorted(((i, float(s)) for i, s in enumerate(scores)), key=lambda item: -item[1])


def bm25_ranking(query_vector, document_vectors) -> list[tuple[int, float]]:
    """(document index, BM25 score), best first, over documents sharing a term with the query.

    The documents' values already hold the term-frequency part; the IDF is Qdrant's (``Modifier.IDF``):
    ln((N - df + 0.5) / (df + 0.5) + 1), N = documents, df = documents containing the term.
    """
    n = len(document_vectors)
    df = Counter(i for doc in document_vectors for i in doc.indices)
    idf = {t: math.log((n - df[t] + 0.5) / (df[t] + 0.5) + 1) for t in df}
    scores = []
    for position, doc in enumerate(document_vectors):
        weights = dict(zip(doc.indices, doc.values))
        matched = [(t, q) for t, q in zip(query_vector.indices, query_vector.values) if t in weights]
        if matched:
            scores.append((position, sum(idf[t] * weights[t] * q for t, q in matched)))
    return sorted(scores, key=lambda item: -item[1])


def brute_force_rankings(reference, bm25, corpus: list[str] = CORPUS):
    """query -> (dense ranking, BM25 ranking) over ``corpus``, computed without Qdrant."""
    dense_documents, sparse_documents = reference.encode_documents(corpus), bm25.embed_documents(corpus)
    return lambda query: (dense_ranking(reference.encode_queries([query])[0], dense_documents),
                          bm25_ranking(bm25.embed_query(query), sparse_documents))


def reciprocal_rank_fusion(rankings: list[list[int]], limit: int, k: int = RRF_K) -> list[tuple[int, float]]:
    """Sum of 1 / (position + k) over the rankings (position from 0), as qdrant-client fuses prefetches.

    Equal scores keep the order in which the documents first appear (first ranking first): Qdrant sorts stably.
    """
    scores: dict[int, float] = {}
    for ranking in rankings:
        for position, doc in enumerate(ranking):
            scores[doc] = scores.get(doc, 0.0) + 1 / (position + k)
    return sorted(scores.items(), key=lambda item: -item[1])[:limit]


def relative_score_fusion(dense: list[tuple[int, float]], sparse: list[tuple[int, float]], alpha: float,
                          limit: int | None = None) -> list[tuple[int, float]]:
    """Min-max normalise each side's scores to [0, 1], then alpha * dense + (1 - alpha) * sparse (absent: 0).

    Equal scores keep dense-side documents first, as LlamaIndex's ``relative_score_fusion`` does.
    """
    def normalised(ranking):
        low, high = min(s for _, s in ranking), max(s for _, s in ranking)
        assert high > low, "a side with one distinct score: pick another query"
        return {doc: (s - low) / (high - low) for doc, s in ranking}

    dense_norm, sparse_norm = normalised(dense), normalised(sparse)
    order = list(dict.fromkeys([d for d, _ in dense] + [d for d, _ in sparse]))
    fused = [(d, alpha * dense_norm.get(d, 0.0) + (1 - alpha) * sparse_norm.get(d, 0.0)) for d in order]
    return sorted(fused, key=lambda item: -item[1])[:limit]


def assert_no_near_ties(ranking: list[tuple[int, float]], upto: int, exact_ties_allowed: bool = False) -> None:
    """Float32 scoring in Qdrant could swap documents whose float64 scores nearly tie; such a case proves nothing.

    ``exact_ties_allowed`` for fused scores, whose exact ties are structural (each side's best alone scores the same)
    and kept in first-appearance order by the store and by these references alike.
    """
    scores = [s for _, s in ranking[: upto + 1]]
    gaps = [a - b for a, b in zip(scores, scores[1:])]
    assert all(g > 1e-5 or (exact_ties_allowed and g == 0) for g in gaps), f"near-tied scores {scores}: other texts"
