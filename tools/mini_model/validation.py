"""Validation during a rebuild, never on evaluation data: held-out windows of the training books (found from one
of their sentences) and STS-B *dev*. Pure functions of embeddings; the caller embeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["normalise", "score", "sts_dev", "sts_spearman", "static_sums", "window_accuracy"]


def normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def static_sums(vectors: np.ndarray, token_ids: list[list[int]]) -> np.ndarray:
    """(n, D) normalised sums of each text's static token vectors (what the untrained student computes)."""
    out = np.zeros((len(token_ids), vectors.shape[1]), np.float32)
    for i, ids in enumerate(token_ids):
        if ids:
            out[i] = vectors[ids].sum(0)
    return normalise(out)


def window_accuracy(query_vectors: np.ndarray, window_vectors: np.ndarray,
                    queries: list[tuple[int, int, int]]) -> list[float]:
    """Accuracy@1 per quarter of the window the query sentence came from: queries[k] = (window number, quarter,
    _) for query_vectors[k]; a query is right when its own window is the nearest of all ``window_vectors``."""
    top = (normalise(query_vectors) @ normalise(window_vectors).T).argmax(1)
    hits: dict[int, list[bool]] = {}
    for k, (window, quarter, _) in enumerate(queries):
        hits.setdefault(quarter, []).append(bool(top[k] == window))
    return [round(float(np.mean(hits[q])), 4) for q in sorted(hits)]


def sts_spearman(first: np.ndarray, second: np.ndarray, gold: list[float]) -> float:
    """Spearman's ρ × 100 between the pairs' cosines and the gold scores."""
    from scipy.stats import spearmanr

    cosines = (normalise(first) * normalise(second)).sum(1)
    return round(float(100 * spearmanr(cosines, gold).statistic), 2)


def sts_dev(data_dir: Path) -> tuple[list[str], list[str], list[float]]:
    """STS-B dev: (first sentences, second sentences, gold scores)."""
    first, second, gold = [], [], []
    lines = (Path(data_dir) / "sts" / "stsbenchmark" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    for line in lines[1:]:
        a, b, g = line.split("\t")
        first.append(a)
        second.append(b)
        gold.append(float(g))
    return first, second, gold


def score(query_vectors: np.ndarray, window_vectors: np.ndarray, queries: list[tuple[int, int, int]],
          sts_vectors: np.ndarray, gold: list[float]) -> dict:
    """The record a validation step keeps: accuracy per quarter, STS-B dev ρ (``sts_vectors`` = first sentences
    then second sentences) and their sum as the score to maximise (mean accuracy + ρ / 100)."""
    bands = window_accuracy(query_vectors, window_vectors, queries) if queries else []
    half = len(gold)
    rho = sts_spearman(sts_vectors[:half], sts_vectors[half:], gold)
    return {"long_acc_by_quarter": bands, "sts_dev": rho,
            "score": round(float(np.mean(bands) if bands else 0.0) + rho / 100, 4)}
