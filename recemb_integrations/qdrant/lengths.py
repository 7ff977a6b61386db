"""The BM25 average lengths of a new collection, sampled from its first sync's documents.

fastembed's default average length (256 tokens) suits short passages. Whole documents are often far longer (a
book is some 200,000 BM25 tokens): measured against 256, length normalisation would crush every value of a long
document towards zero. So the average is the mean BM25 length of the first sync's documents (read up to
``AVG_LEN_SAMPLE_CHARS``), and the passages' average is what ``passage_tokens`` model tokens hold in BM25 tokens
on the same text. Both are recorded in the collection and every later sync uses them: values written with another
average would not be comparable.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from recemb_integrations.sparse import Bm25

__all__ = ["AVG_LEN_SAMPLE_CHARS", "PASSAGE_LEN_SAMPLE_CHARS", "choose_bm25_settings"]

AVG_LEN_SAMPLE_CHARS = 64 << 20  # text read to choose a new collection's BM25 average length
PASSAGE_LEN_SAMPLE_CHARS = 4 << 20  # ... and tokenized by the model to turn passage_tokens into BM25 tokens


def choose_bm25_settings(documents: Iterable[Any], language: str, tokenizer: Any = None,
                         passage_tokens: int | None = None, count_units: Any = None, passage_overlap: int = 0,
                         one_length: bool = False) -> dict[str, Any]:
    """The BM25 settings of a new collection, average lengths included. ``documents``: anything with a ``text``
    (a read error skips the document: the sync reports it); ``tokenizer``: the model's, needed with
    ``passage_tokens``; ``count_units``: in its place, a text's length in the unit passages are cut in (another
    library's model: its tokens or characters, ``ExternalEmbedder.count``).

    ``one_length``: a collection whose long documents are found by their passages alone (another library's model,
    ``record.found_by_passages``): one average length for every point a search ranks, the mean BM25 length of the
    short documents and of the long ones' passages together, so that a passage, longer than most short documents,
    does not outscore them by its length alone (what a pipeline of chunks does too)."""
    bm25 = Bm25(language=language)
    lengths, sizes, budget = [], [], AVG_LEN_SAMPLE_CHARS
    sample_bm25 = sample_model = sample_chars = 0  # BM25 and model tokens (and characters) of the text sampled for
    # the passages' ratio
    sample_budget = PASSAGE_LEN_SAMPLE_CHARS
    if count_units is None and tokenizer is not None:
        def count_units(text: str) -> int:
            return sum(map(len, tokenizer.encode_stream(text))) - 1  # the EOS is not text
    count_units = count_units if passage_tokens else None
    for doc in documents:
        if budget <= 0:
            break
        try:
            text = doc.text[:budget]
        except (OSError, ValueError):  # a source that cannot be read now is reported by the sync itself
            continue
        budget -= len(text)
        lengths.append(bm25.length(text))
        sizes.append(len(text))
        if count_units is not None and text.strip() and sample_budget > 0:
            sample = text[:sample_budget]
            sample_budget -= len(sample)
            sample_bm25 += bm25.length(sample)
            sample_model += count_units(sample)
            sample_chars += len(sample)
    avg_len = sum(lengths) / len(lengths) if lengths and sum(lengths) > 0 else bm25.avg_len
    settings = bm25.with_avg_len(float(avg_len)).settings()
    if passage_tokens:
        per_token = sample_bm25 / sample_model if sample_model > 0 and sample_bm25 > 0 else None
        settings["passage_avg_len"] = float(max(per_token * passage_tokens, 1.0)) if per_token else bm25.avg_len
        if one_length and sample_model > 0 and sum(lengths) > 0:
            units_per_char = sample_model / max(1, sample_chars)
            step = max(1, passage_tokens - passage_overlap)
            total = count = 0.0
            for length, size in zip(lengths, sizes):
                units = size * units_per_char
                if units <= passage_tokens:  # a short document: its own point is ranked
                    total, count = total + length, count + 1
                else:  # a long one: its passages, each about passage_tokens of its units
                    n = math.ceil((units - passage_overlap) / step)
                    total, count = total + n * length * passage_tokens / units, count + n
            settings["avg_len"] = settings["passage_avg_len"] = float(max(total / count, 1.0))
    return settings
