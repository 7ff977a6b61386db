"""What a search hit shows of its document (recemb_integrations.excerpts), the PDF page starts it is placed by
(formats.pdf_page_starts) and the text read again for it (sources.read_unchanged)."""

from __future__ import annotations

import os
import random
import re

import pytest

from recemb_integrations import sources
from recemb_integrations.excerpts import ELLIPSIS, excerpt, line_number, page_number, position
from recemb_integrations.formats import ExtractionError, extract_text, pdf_page_starts
from recemb_integrations.sources import read_text, read_unchanged

WORDS = "state space models keep a fixed size state across chunks of any length".split()
LONG = " ".join(WORDS[i % len(WORDS)] for i in range(200))  # about 1,100 characters of short words


def body(shown: str) -> str:
    """An excerpt without its ellipses."""
    return shown.removeprefix(ELLIPSIS).removesuffix(ELLIPSIS)


def folded(text: str) -> str:
    return re.sub(r"[\s\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]+", " ", text).strip()


def sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------- excerpt
def test_whitespace_folds_into_one_space_and_controls_never_come_through():
    text = "first\tline\r\n\n   second\x1b[2J line\u202eevil\x00end"
    assert excerpt(text, 0, len(text)) == "first line second [2J line evil end"


def test_a_start_inside_a_word_moves_back_to_its_start():
    text = "alpha bravo charlie delta echo foxtrot golf"
    assert text[8:].startswith("avo")
    assert excerpt(text, 8, len(text), width=20) == ELLIPSIS + "bravo charlie delta" + ELLIPSIS
    assert excerpt(text, 10, 13, width=11) == ELLIPSIS + "bravo" + ELLIPSIS  # an end inside a word moves on


def test_a_long_passage_is_cut_after_the_last_word_that_fits():
    start = LONG.index("models")
    shown = excerpt(LONG, start, len(LONG), width=100)
    assert shown.startswith(ELLIPSIS + "models keep") and shown.endswith(ELLIPSIS)
    kept = body(shown)
    assert 90 <= len(kept) <= 100 and kept in LONG
    next_word = LONG[start + len(kept):].split(maxsplit=1)[0]
    assert LONG[start + len(kept)] == " " and len(kept) + 1 + len(next_word) > 100  # no other whole word fitted


def test_a_short_passage_gets_words_around_it_up_to_the_width():
    start = LONG.index("chunks", 500)
    shown = excerpt(LONG, start, start + len("chunks"), width=120)
    kept = body(shown)
    assert shown.startswith(ELLIPSIS) and shown.endswith(ELLIPSIS) and 105 <= len(kept) <= 120
    assert kept in LONG and LONG[LONG.index(kept) - 1] == " " and LONG[LONG.index(kept) + len(kept)] == " "
    before, _, after = kept.partition("chunks")
    assert 40 <= len(before) and 40 <= len(after)  # context on both sides


def test_context_fills_the_other_side_at_the_ends_of_the_text():
    assert excerpt(LONG, 0, 5, width=60) == "state space models keep a fixed size state across chunks of" + ELLIPSIS
    tail = excerpt(LONG, len(LONG) - 2, len(LONG) + 10, width=60)  # an end past the text is its end
    assert tail.startswith(ELLIPSIS) and not tail.endswith(ELLIPSIS) and LONG.endswith(body(tail))
    assert len(body(tail)) >= 50


def test_an_empty_passage_shows_the_words_around_its_offset():
    text = "one two three four five six seven"
    inside_four = text.index("four") + 2
    assert excerpt(text, inside_four, inside_four, width=16) == ELLIPSIS + "three four five" + ELLIPSIS
    assert excerpt(text, 0, 0) == text and excerpt(text, len(text), len(text)) == text
    assert excerpt("", 0, 0) == "" and excerpt(" \n\t ", 1, 3) == ""
    assert excerpt(text, -5, -1, width=9) == "one two" + ELLIPSIS


def test_text_without_whitespace_is_cut_hard_at_the_width():
    blob = "x" * 1000
    assert excerpt(blob, 0, 1000, width=30) == "x" * 30 + ELLIPSIS
    assert excerpt(blob, 500, 510, width=30) == ELLIPSIS + "x" * 30 + ELLIPSIS
    cjk = "状態空間モデルは固定サイズの状態を保つ。" * 50
    shown = excerpt(cjk, 400, 410, width=40)
    assert shown.startswith(ELLIPSIS) and shown.endswith(ELLIPSIS) and body(shown) in cjk
    assert len(body(shown)) == 40 and cjk[400:410] in body(shown)


def test_a_long_url_is_cut_but_ordinary_words_are_not():
    url = "https://example.org/" + "a" * 100
    text = f"see {url} for the details of the method"
    shown = excerpt(text, text.index("for"), len(text), width=60)
    assert body(shown).endswith("for the details of the method") and body(shown).split()[0] != url
    assert excerpt(text, 0, 3, width=60) == "see " + url[:56] + ELLIPSIS  # 60 wide: the URL is cut to fill it


def test_excerpts_are_in_the_text_and_never_wider_than_asked():
    rng = random.Random(7)
    pieces = WORDS + ["\n", "\r\n", "\t", "   ", "internationalisation", "状態空間モデル" * 12, "x" * 70, "\x1b"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) + rng.choice(["", " "]) for _ in range(rng.randrange(0, 80)))
        start = rng.randrange(-3, len(text) + 3)
        end = start + rng.randrange(-2, 400)
        width = rng.choice([1, 5, 20, 80, 300])
        shown = excerpt(text, start, end, width)
        kept = body(shown)
        assert len(kept) <= width and kept in folded(text), (text, start, end, width, shown)
        assert not re.search(r"[\x00-\x1f\x7f-\x9f]|\s\s", shown) and kept == kept.strip()
        whole = folded(text)
        assert bool(kept) == bool(whole)
        once = whole.count(kept) == 1  # where it came from is known
        assert shown.startswith(ELLIPSIS) == (not whole.startswith(kept)) or not once and whole.startswith(kept)
        assert shown.endswith(ELLIPSIS) == (not whole.endswith(kept)) or not once and whole.endswith(kept)


def test_a_width_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        excerpt("text", 0, 4, width=0)


# ---------------------------------------------------------------------- positions
def test_line_numbers_count_each_kind_of_line_end_once():
    text = "a\nb\r\nc\rd"
    assert [line_number(text, i) for i in range(len(text) + 1)] == [1, 1, 2, 2, 2, 3, 3, 4, 4]
    assert line_number("\r\n\r\n", 4) == 3 and line_number("\r\r", 2) == 3 and line_number("\n\n", 1) == 2
    assert line_number(text, -4) == 1 and line_number(text, 99) == 4 and line_number("", 0) == 1


def test_page_number_is_the_last_page_starting_at_or_before_the_offset():
    starts = [(1, 0), (3, 10), (4, 25)]
    assert [page_number(starts, o) for o in (0, 9, 10, 24, 25, 1000)] == [1, 1, 3, 3, 4, 4]
    assert page_number(starts, -1) is None and page_number([], 5) is None
    assert page_number([(2, 5)], 4) is None and page_number([(2, 5)], 5) == 2


def test_position_says_line_page_or_character():
    text = "one\ntwo\r\nthree"
    assert position("text", text, text.index("three")) == "line 3"
    assert position("PDF", text, 9, [(1, 0), (2, 9)]) == "page 2" and position("pdf", text, 8, [(1, 0), (2, 9)]) \
        == "page 1"
    assert position("PDF", text, 9) == "character 10" and position("PDF", text, 9, []) == "character 10"
    assert position("HTML", text, 0) == "character 1" and position("DOCX", text, 99) == f"character {len(text) + 1}"


# ---------------------------------------------------------------------- PDF page starts
def test_pdf_page_starts_agree_with_extract_text(tmp_path):
    pytest.importorskip("pypdfium2")
    from tests.integrations.test_formats import make_pdf

    pages = [["First page, first line.", "And its second line."], [], ["Third page: Größe 42."]]
    path = tmp_path / "report.pdf"
    path.write_bytes(make_pdf(pages))
    text = extract_text(path)
    starts = pdf_page_starts(path)
    assert [number for number, _ in starts] == [1, 3] and starts[0][1] == 0  # the blank page adds no text
    ends = [offset - 2 for _, offset in starts[1:]] + [len(text)]
    for (number, offset), end in zip(starts, ends):
        assert text[offset:end] == "\n".join(pages[number - 1])  # what that page holds, exactly
    assert text[starts[0][1]:][ends[0]:starts[1][1]] == "\n\n"
    third = text.index("Größe")
    assert page_number(starts, third) == 3 and position("PDF", text, third, starts) == "page 3"
    assert page_number(starts, text.index("second line")) == 1

    first_blank = tmp_path / "cover.pdf"
    first_blank.write_bytes(make_pdf([[], ["Only this page has text."]]))
    assert pdf_page_starts(first_blank) == [(2, 0)] and extract_text(first_blank) == "Only this page has text."
    with pytest.raises(ExtractionError, match="from PDF files, not '.txt' files"):
        pdf_page_starts(tmp_path / "notes.txt")


# ---------------------------------------------------------------------- the text read again
def test_read_unchanged_gives_the_text_until_the_file_changes(tmp_path):
    path = tmp_path / "note.md"
    path.write_text("café ☕ notes\r\non state spaces", encoding="utf-8")
    stored = sha256(read_text(path))
    assert read_unchanged(str(path), stored) == "café ☕ notes\r\non state spaces"
    path.write_text("café ☕ notes\r\non state spaces, edited", encoding="utf-8")
    assert read_unchanged(str(path), stored) is None
    path.unlink()
    assert read_unchanged(str(path), stored) is None


def test_read_unchanged_compares_the_hash_a_sync_stores(tmp_path):
    pytest.importorskip("qdrant_client")
    from recemb_integrations.qdrant import content_hash

    path = tmp_path / "notes.txt"
    path.write_text("café ☕ 状態空間", encoding="utf-8")
    assert read_unchanged(path, content_hash("café ☕ 状態空間")) == "café ☕ 状態空間"


def test_read_unchanged_is_none_for_what_cannot_be_read(tmp_path):
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café".encode("latin-1"))
    assert read_unchanged(latin1, sha256("café")) is None
    assert read_unchanged(tmp_path, sha256("")) is None  # a folder
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    assert read_unchanged(fifo, sha256("")) is None  # not opened: that would wait for a writer forever


def test_a_large_file_is_read_only_when_its_hash_matches(tmp_path, monkeypatch):
    path = tmp_path / "big.txt"
    text = "state space models, " * 60_000  # 1.2 MB
    path.write_text(text, encoding="utf-8")
    assert read_unchanged(path, sha256(text)) == text

    def refuse(_path):
        raise AssertionError("a file whose hash no longer matches was read")

    monkeypatch.setattr(sources, "read_text", refuse)
    assert read_unchanged(path, sha256(text + "x")) is None


def test_read_unchanged_reads_a_pdf_as_extract_text_does(tmp_path):
    pytest.importorskip("pypdfium2")
    from tests.integrations.test_formats import make_pdf

    path = tmp_path / "paper.pdf"
    path.write_bytes(make_pdf([["whales sing"], ["in the deep ocean"]]))
    text = extract_text(path)
    assert read_unchanged(path, sha256(text)) == text and read_unchanged(path, sha256("other")) is None
