"""Training pairs: JSON lines read and checked, the query-side instruction applied, the dataset built."""

from __future__ import annotations

import json
import os
from typing import Any

from recemb_integrations._imports import require

__all__ = ["build_dataset", "instructed_anchor", "load_pairs"]

_datasets = require("datasets", "train")

from recemb.core.prompts import query_prompt  # noqa: E402


def load_pairs(path: str | os.PathLike) -> list[dict[str, Any]]:
    """JSON lines with ``anchor`` and ``positive`` (strings), optional ``negative`` (a string or a list of
    strings: hard negatives), ``instruction`` (task name or text, query side) and ``label`` (teacher embeddings)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not JSON: {e}") from e
            for key in ("anchor", "positive"):
                if not isinstance(row.get(key), str):
                    raise ValueError(f"{path}:{lineno}: '{key}' must be a string")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path} holds no training pairs")
    return rows


def instructed_anchor(row: dict[str, Any], query_instruction: str | None = None) -> str:
    """The anchor as the model is trained on it: the row's ``instruction`` (else ``query_instruction``) as the query
    prefix; an instruction of "" opts the row out (symmetric pairs)."""
    instruction = row.get("instruction", query_instruction)
    return ("" if instruction == "" else query_prompt(instruction)) + row["anchor"]


def build_dataset(rows: list[dict[str, Any]], query_instruction: str | None = None):
    """A ``datasets.Dataset`` with columns anchor (instruction applied), positive, negative_1.., [label].

    Every row must have the same number of hard negatives (the loss needs rectangular columns).
    """
    n_neg = {len(_negatives(r)) for r in rows}
    if len(n_neg) != 1:
        raise ValueError(f"rows disagree on the number of hard negatives: {sorted(n_neg)}")
    n_neg = n_neg.pop()
    columns: dict[str, list] = {"anchor": [], "positive": []}
    for j in range(n_neg):
        columns[f"negative_{j + 1}"] = []
    with_labels = "label" in rows[0]
    if with_labels:
        columns["label"] = []
    for r in rows:
        columns["anchor"].append(instructed_anchor(r, query_instruction))
        columns["positive"].append(r["positive"])
        for j, neg in enumerate(_negatives(r)):
            columns[f"negative_{j + 1}"].append(neg)
        if with_labels:
            columns["label"].append(r["label"])
    return _datasets.Dataset.from_dict(columns)


def _negatives(row: dict[str, Any]) -> list[str]:
    neg = row.get("negative", [])
    return [neg] if isinstance(neg, str) else list(neg)
