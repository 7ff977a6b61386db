"""Passages for another library's model (qdrant/cutting.py): every span fits the model's window when tokenized as
the model tokenizes it, the spans cover the text in order with their overlap, and each is the user's own
characters (CRLF, tabs, emoji, combining marks), with a tiny random WordPiece tokenizer built here and the
character budget."""

from __future__ import annotations

import random

import pytest

from recemb_integrations.qdrant.cutting import CharacterCutter, TokenCutter, cutter_for
from tests.integrations.other_models import wordpiece_tokenizer

pytest.importorskip("tokenizers")

HARD = ("Café e\u0301té \U0001F600\U0001F44D\U0001F3FD ok\r\n\tTabs\tand\r\nCRLF lines, "
        "家族 \U0001F468\u200d\U0001F469\u200d\U0001F467 naïve résumé. ")


@pytest.fixture(scope="module")
def tokenizer():
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = [c for c in letters] + ["##" + c for c in letters]
    pieces += ["".join(rng.choice(letters) for _ in range(rng.randint(2, 5))) for _ in range(300)]
    pieces += ["##" + "".join(rng.choice(letters) for _ in range(rng.randint(2, 4))) for _ in range(300)]
    pieces += list(".,;:!?") + ["cafe", "ete", "tabs", "and", "crlf", "lines", "ok", "naive", "resume"]
    return wordpiece_tokenizer(pieces)


def long_text(seed: int, words: int) -> str:
    rng = random.Random(seed)
    out = []
    for i in range(words):
        out.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 12))))
        if i % 37 == 0:
            out.append(HARD)
        out.append(rng.choice([" ", " ", " ", ", ", ".\n", "\r\n", "\t"]))
    return "".join(out)


def check_cover(text: str, spans: list[tuple[int, int]]) -> None:
    """In order, from the first character to the last, each starting after the one before and no later than its
    end (no character left out), none empty, no cut inside a CRLF or a surrogate pair or before a combining mark."""
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for (a, b), (c, d) in zip(spans, spans[1:]):
        assert a < c <= b < d
    import unicodedata

    for a, b in spans:
        assert a < b or len(text) == 0
        for cut in (a, b):
            if 0 < cut < len(text):
                assert text[cut - 1:cut + 1] != "\r\n"
                assert not unicodedata.combining(text[cut])


@pytest.mark.parametrize("window", [16, 40, 128])
def test_token_passages_fit_the_window_and_cover_the_text(tokenizer, window):
    text = long_text(window, 2500)
    cutter = TokenCutter(tokenizer, window, name="tiny")
    spans = cutter.spans(text)
    assert len(spans) > 3
    check_cover(text, spans)
    lengths = [len(tokenizer(text[a:b])["input_ids"]) for a, b in spans]  # with [CLS] and [SEP], as the model
    assert max(lengths) <= window
    assert sum(lengths[:-1]) / (len(lengths) - 1) > 0.6 * window  # passages are not needlessly short
    # consecutive passages share at most ``overlap`` of the text's tokens (fewer where the next begins at a word)
    offsets = [o for o in tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
               if o[1] > o[0]]
    shared = [sum(c <= o[0] and o[1] <= b for o in offsets) for (_, b), (c, _) in zip(spans, spans[1:])]
    assert max(shared) <= cutter.overlap and sum(shared) > 0


def test_a_text_that_fits_is_one_passage_and_counts_are_the_tokenizers(tokenizer):
    cutter = TokenCutter(tokenizer, 64)
    text = HARD
    assert cutter.spans(text) == [(0, len(text))]
    assert cutter.count(text) == len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert cutter.spans("") == [(0, 0)]
    assert cutter.describe() == {"by": "tokenizer", "tokenizer": "", "window": 64, "tokens": 62,
                                 "overlap": cutter.overlap}


def test_a_long_text_is_tokenized_in_pieces_with_the_same_cuts(tokenizer, monkeypatch):
    import recemb_integrations.qdrant.cutting as cutting

    text = long_text(3, 4000)
    whole = TokenCutter(tokenizer, 48).spans(text)
    monkeypatch.setattr(cutting, "TOKENIZE_PIECE_CHARS", 2000)
    pieces = TokenCutter(tokenizer, 48).spans(text)
    check_cover(text, pieces)
    assert max(len(tokenizer(text[a:b])["input_ids"]) for a, b in pieces) <= 48
    assert abs(len(pieces) - len(whole)) <= len(whole) // 20 + 1


@pytest.mark.parametrize("budget", [16, 100, 1000])
def test_character_passages_fit_the_budget_and_cover_the_text(budget):
    text = long_text(budget, 3000)
    cutter = CharacterCutter(budget)
    spans = cutter.spans(text)
    check_cover(text, spans)
    assert max(b - a for a, b in spans) <= budget
    assert CharacterCutter(budget).spans(text[:budget]) == [(0, budget)]


def test_a_character_cut_without_white_space_splits_no_pair_or_mark():
    text = ("e\u0301" * 20 + "\U0001F600" * 20 + "\r\n" * 20) * 10
    spans = CharacterCutter(16).spans(text)
    check_cover(text, spans)
    assert max(b - a for a, b in spans) <= 16


def test_bad_settings_are_refused(tokenizer):
    with pytest.raises(ValueError, match="at least 16"):
        CharacterCutter(8)
    with pytest.raises(ValueError, match="overlap"):
        CharacterCutter(100, overlap=60)
    with pytest.raises(ValueError, match="at least 8 tokens"):
        TokenCutter(tokenizer, 4)

    class Slow:
        is_fast = False

    with pytest.raises(ValueError, match="fast"):
        TokenCutter(Slow(), 128)


def test_cutter_for_prefers_the_users_budget_then_the_tokenizer(tokenizer):
    assert isinstance(cutter_for(tokenizer, 128), TokenCutter)
    assert cutter_for(tokenizer, 128, characters=500) == CharacterCutter(500)
    assert cutter_for(None, None) == CharacterCutter()


def test_external_request_is_the_one_rule_for_another_models_passages(tokenizer):
    """How another library's model cuts a sync's documents, decided in one place (``external.external_request``,
    which QdrantSync and ``recemb sync`` both call): its window by default, fewer of its tokens when asked, whole
    with 0 or where its collection was made whole; recemb's own passage settings refused."""
    import types

    from recemb_integrations.qdrant.external import ExternalEmbedder, external_request
    from recemb_integrations.qdrant.record import NO_PASSAGES, PASSAGES_ONLY, RequestedSettings

    model = ExternalEmbedder("m", 4, lambda texts: [[1.0, 0, 0, 0]] * len(texts), lambda q: [1.0, 0, 0, 0],
                             TokenCutter(tokenizer, 32))
    embedder, request = external_request(model, RequestedSettings())
    assert embedder.passages == (30, request.passage_overlap) and request.passage_tokens == 30
    assert request.passages_above == 30 and request.long_documents == PASSAGES_ONLY
    embedder, request = external_request(model, RequestedSettings(passage_tokens=16, store_text=True))
    assert embedder.passages[0] == request.passage_tokens == 16 and request.store_text is True
    embedder, request = external_request(model, RequestedSettings(passage_tokens=0))
    assert embedder.passages is None and request.passage_tokens == NO_PASSAGES and request.passages_above is None
    made_whole = types.SimpleNamespace(settings=types.SimpleNamespace(passages=False))
    embedder, request = external_request(model, RequestedSettings(passage_tokens=16), made_whole)
    assert embedder.passages is None and request.passage_tokens == NO_PASSAGES
    for recembs in ({"passage_overlap": 4}, {"passages_above": 100}, {"long_documents": "passages"}):
        with pytest.raises(ValueError, match="recemb's own models"):
            external_request(model, RequestedSettings(**recembs))
