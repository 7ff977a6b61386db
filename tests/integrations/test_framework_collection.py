"""What the framework stores share, on its own: the hits of one document merged where their characters overlap, the
granularities a framework store takes, and the one check of a vector handed in. Pure: no store, no model."""

from __future__ import annotations

import numpy as np
import pytest

from recemb_integrations.framework_collection import Found, check_granularity, merge_overlaps
from recemb_integrations.qdrant.errors import VectorError
from recemb_integrations.qdrant.vectors import UNIT_TOLERANCE, check_vector

TEXT = "".join(f"[{i:02d}] the tide rose over the harbour wall. " for i in range(30))


def passage(document_id: str, start: int, end: int, score: float, index: int, text: str = TEXT) -> Found:
    return Found(document_id, text[start:end], {}, score, "passage", index, start, end, 1)


def test_overlapping_passages_of_one_document_are_merged_into_one_span_at_the_place_of_the_best():
    other = "another document's text, long enough to cut in places " * 4
    hits = [passage("a", 100, 200, 0.9, 3), passage("b", 0, 50, 0.8, 0, other), passage("a", 150, 260, 0.7, 4),
            passage("a", 260, 300, 0.6, 5),  # touches the run above: merged too
            passage("a", 400, 450, 0.5, 8),  # apart: kept on its own
            passage("a", 120, 180, 0.4, 3),  # inside the first: adds nothing
            Found("c", "a short document", {}, 0.3, "document")]
    merged = merge_overlaps(hits)
    assert [(f.document_id, f.start, f.end, f.score) for f in merged] == [
        ("a", 100, 300, 0.9), ("b", 0, 50, 0.8), ("a", 400, 450, 0.5), ("c", None, None, 0.3)]
    for f in merged:
        source = other if f.document_id == "b" else TEXT
        assert f.text == (source[f.start:f.end] if f.start is not None else "a short document")
    assert merged[0].passage == 3 and merged[0].line == 1
    # one hit a document: nothing to merge
    assert merge_overlaps(hits[:2]) == hits[:2]
    # a hit whose text is not at hand is kept as it is
    unread = Found("a", None, {}, 0.2, "passage", 4, 150, 260, note="its file has changed")
    assert merge_overlaps([hits[0], unread]) == [hits[0], unread]


def test_granularities_a_framework_store_takes():
    for granularity in (None, "document", "passage", "any"):
        assert check_granularity(granularity) == granularity
    for bad in ("chunk", "", "Passage", 1):
        with pytest.raises(ValueError, match="granularity must be None"):
            check_granularity(bad)


def test_a_vector_handed_in_is_refused_with_its_reason():
    rng = np.random.default_rng(0)
    unit = rng.normal(size=8)
    unit /= np.linalg.norm(unit)
    assert check_vector(unit, 8, unit=True, what="v") == pytest.approx(unit.tolist())
    assert check_vector(unit * (1 + UNIT_TOLERANCE / 2), 8, unit=True, what="v")
    assert check_vector(unit * 7, 8, unit=False, what="v")  # another library's: any length
    cases = {"has 7 values": unit[:7], "an array of shape": np.stack([unit, unit]), "holds NaN": [np.nan] * 8,
             "is all zeros": [0.0] * 8, "has length 2": unit * 2, "is not a vector of numbers": ["x"] * 8}
    for why, vector in cases.items():
        with pytest.raises(VectorError, match=f"v {why}" if why != "an array of shape" else why):
            check_vector(vector, 8, unit=True, what="v")
    with pytest.raises(VectorError, match="holds NaN or infinite"):
        check_vector([np.inf] + [0.0] * 7, 8, unit=False, what="v")
