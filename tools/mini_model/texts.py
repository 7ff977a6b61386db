"""Every text of a rebuild in one table, in a fixed order, with the roles the training stages give them.

Pure: rows and windows in, indices out. The order is anchors, positives, training windows, validation windows,
then the sentences of each window (sentences have no teacher target: a sentence's job is to find its window)."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["TextTable", "text_table"]


@dataclass(frozen=True)
class TextTable:
    """texts: the student's inputs (an anchor with its instruction prefix); teacher_texts: what the teacher embeds
    for each text with a target (the bare anchor, the passage; None for windows, whose target is the mean of their
    chunks, and for sentences); short_pairs: (anchor, positive) indices; train_windows / validation_windows: per
    window (text index, book, sentence indices); validation_queries: (validation window number, quarter of the
    window, sentence index), one sentence per quarter of each validation window."""

    texts: list[str]
    teacher_texts: list[str | None]
    short_pairs: list[tuple[int, int]]
    train_windows: list[tuple[int, str, list[int]]]
    validation_windows: list[tuple[int, str, list[int]]]
    validation_queries: list[tuple[int, int, int]]


def text_table(rows: list[dict], windows: dict[str, list[dict]], instructed, seed: int = 0) -> TextTable:
    """``rows`` from ``data.build_pairs``, ``windows`` from ``data.long_documents``; ``instructed(row)`` gives the
    anchor as the student reads it (``recemb_integrations.training.instructed_anchor``)."""
    n = len(rows)
    texts = [instructed(r) for r in rows] + [r["positive"] for r in rows]
    teacher_texts: list[str | None] = [r["anchor"] for r in rows] + [r["positive"] for r in rows]
    short_pairs = [(i, n + i) for i in range(n)]
    parts = {"train": windows.get("train", []), "validation": windows.get("validation", [])}
    window_index: dict[str, list[int]] = {}
    for name, docs in parts.items():
        window_index[name] = list(range(len(texts), len(texts) + len(docs)))
        texts += [" ".join(d["chunks"]) for d in docs]
        teacher_texts += [None] * len(docs)
    placed: dict[str, list[tuple[int, str, list[int]]]] = {}
    for name, docs in parts.items():
        placed[name] = []
        for w, d in zip(window_index[name], docs):
            first = len(texts)
            texts += d["sentences"]
            teacher_texts += [None] * len(d["sentences"])
            placed[name].append((w, d["book"], list(range(first, len(texts)))))
    rng = random.Random(seed)
    queries = []
    for v, (_, _, sentences) in enumerate(placed["validation"]):
        for quarter in range(4):
            part = sentences[quarter * len(sentences) // 4:(quarter + 1) * len(sentences) // 4]
            if part:
                queries.append((v, quarter, rng.choice(part)))
    return TextTable(texts, teacher_texts, short_pairs, placed["train"], placed["validation"], queries)
