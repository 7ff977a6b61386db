"""What a search hit shows of its document: the original text around the matched passage, and where it is.

A hit's ``start`` and ``end`` are character offsets into the document's text as the sync read it
(``sources.read_text``: a text file's contents, or the text ``formats.extract_text`` gives a PDF, HTML or DOCX
file). ``excerpt`` makes that stretch of text one readable line; ``position`` says where it is as a person looks
for it: "line 12" in a text file, "page 3" in a PDF, "character 1045" otherwise.

Pure: the caller reads the text (``sources.read_unchanged``) and a PDF's page starts (``formats.pdf_page_starts``).
Offsets outside the text are clamped to it.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence

__all__ = ["ELLIPSIS", "excerpt", "line_number", "page_number", "position"]

ELLIPSIS = "\u2026"
# What folds into one space: whitespace, and the controls a terminal would act on (C0, DEL, C1, and the
# bidirectional marks, embeddings, overrides and isolates, which reorder what follows). All are invisible as text.
_GAP_CHARS = "\\s\\x00-\\x1f\\x7f-\\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
_GAP = re.compile(f"[{_GAP_CHARS}]")
_WORD = re.compile(f"[^{_GAP_CHARS}]+")
# A run without whitespace longer than this is not a word to keep whole (unspaced CJK or Thai, a URL, a blob):
# it may be cut anywhere.
_LONGEST_WORD = 50

_Piece = tuple[int, int]  # [start, end) of a word, or of the part of a long word an excerpt shows


def excerpt(text: str, start: int, end: int, width: int = 300) -> str:
    """``text[start:end]`` as one readable line of about ``width`` characters (not counting the ellipses).

    Runs of whitespace and controls fold into one space. Cuts fall between words: a ``start`` inside a word moves
    back to its start (an ``end`` inside one, on to its end). A passage longer than ``width`` keeps the words that
    fit; a shorter one gets the words around it, up to ``width``, half before and half after where there are.
    Only a run without whitespace longer than ``min(50, width)`` characters (CJK, a URL) is cut inside. "…" marks
    text left out before the excerpt and after it; ``start == end`` shows the words around that offset."""
    if width < 1:
        raise ValueError(f"an excerpt is at least 1 character wide, got width={width}")
    start = min(max(start, 0), len(text))
    end = min(max(end, start), len(text))
    start, end = _word_start(text, start), _word_end(text, end)
    long_word = min(_LONGEST_WORD, width)
    pieces = _take(_words(text, start, end), width, long_word, [])
    if not _WORD.search(text, pieces[-1][1] if pieces else start, end):  # all of it fits: add context
        before = _words_before(text, start, (width + _length(pieces)) // 2, long_word, pieces)
        after = _take(_words(text, end, len(text)), width, long_word, before + pieces)
        if _length(before + pieces + after) < width:  # the text ends soon after: the rest of the room goes before
            before = _words_before(text, start, width, long_word, pieces + after)
        pieces = before + pieces + after
    if not pieces:
        return ""
    lead = ELLIPSIS if _WORD.search(text, 0, pieces[0][0]) else ""
    tail = ELLIPSIS if _WORD.search(text, pieces[-1][1]) else ""
    return lead + _join(text, pieces) + tail


def line_number(text: str, offset: int) -> int:
    """The line (from 1) that ``offset`` is on, counted as an editor does: "\\n", "\\r\\n" and a lone "\\r" each
    end a line."""
    offset = min(max(offset, 0), len(text))
    ends = text.count("\n", 0, offset) + text.count("\r", 0, offset) - text.count("\r\n", 0, offset)
    if 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n":
        ends -= 1  # between the two characters of one "\r\n": still on the line it ends
    return ends + 1


def page_number(page_starts: Sequence[tuple[int, int]], offset: int) -> int | None:
    """The page holding ``offset``, given (page number, start offset) pairs ascending by offset
    (``formats.pdf_page_starts``): the last page starting at or before it. None before the first page, or with no
    pages."""
    index = bisect_right(page_starts, offset, key=lambda page: page[1])
    return page_starts[index - 1][0] if index else None


def position(kind: str, text: str, offset: int, page_starts: Sequence[tuple[int, int]] | None = None) -> str:
    """Where ``offset`` of a document's text is, for a person: "line N" in a plain-text file, "page N" in a PDF
    whose page starts are given, else "character N", with N = offset + 1 (counted from 1, as lines and pages are).

    ``kind`` is the document's format as ``formats`` names it, any case: "text" for a file read as UTF-8 text (for
    a synced file ``FORMAT_SUFFIXES.get(suffix, "text")``), "PDF", "HTML" or "DOCX". Lines of text extracted from
    HTML or DOCX are not lines anyone sees, so those say "character N"."""
    offset = min(max(offset, 0), len(text))
    if kind.lower() == "text":
        return f"line {line_number(text, offset)}"
    page = page_number(page_starts, offset) if kind.lower() == "pdf" and page_starts else None
    return f"page {page}" if page is not None else f"character {offset + 1}"


# ---------------------------------------------------------------------- words
def _is_word_char(text: str, i: int) -> bool:
    return _GAP.match(text, i) is None


def _word_start(text: str, i: int) -> int:
    """``i``, or the start of the word it falls inside if that is at most _LONGEST_WORD characters back."""
    if not (0 < i < len(text) and _is_word_char(text, i - 1) and _is_word_char(text, i)):
        return i
    j = i
    while j > 0 and i - j < _LONGEST_WORD and _is_word_char(text, j - 1):
        j -= 1
    return j if j == 0 or not _is_word_char(text, j - 1) else i


def _word_end(text: str, i: int) -> int:
    """``i``, or the end of the word it falls inside if that is at most _LONGEST_WORD characters on."""
    if not (0 < i < len(text) and _is_word_char(text, i - 1) and _is_word_char(text, i)):
        return i
    j = i
    while j < len(text) and j - i < _LONGEST_WORD and _is_word_char(text, j):
        j += 1
    return j if j == len(text) or not _is_word_char(text, j) else i


def _words(text: str, start: int, end: int):
    return (word.span() for word in _WORD.finditer(text, start, end))


def _words_before(text: str, end: int, width: int, long_word: int, later: list[_Piece]) -> list[_Piece]:
    """``_take`` of the words before ``end``, nearest first. They are looked for in a window that is long enough
    unless whitespace runs are long, and short enough not to list the words of a whole long document."""
    window = _word_start(text, max(0, end - 4 * width - _LONGEST_WORD))
    return _take(reversed(list(_words(text, window, end))), width, long_word, later, backward=True)


def _take(words, width: int, long_word: int, shown: list[_Piece], backward: bool = False) -> list[_Piece]:
    """The words (nearest first) that fit beside the pieces already ``shown`` (after them, or before them if
    ``backward``) within ``width`` in all; a word that does not fit is cut to fill it only if it is longer than
    ``long_word``. Returned in text order."""
    taken: list[_Piece] = []
    used = _length(shown)
    neighbour = (shown[0][0] if backward else shown[-1][1]) if shown else None
    for a, b in words:
        # a space before each word but a first one that continues the word shown beside it
        space = 1 if taken or (neighbour is not None and (b if backward else a) != neighbour) else 0
        room = width - used - space
        if b - a <= room:
            taken.append((a, b))
            used += space + b - a
            continue
        if b - a > long_word and room > 0:
            taken.append((b - room, b) if backward else (a, a + room))
        break
    return taken[::-1] if backward else taken


def _length(pieces: list[_Piece]) -> int:
    """The length of ``_join(text, pieces)``."""
    return sum(b - a for a, b in pieces) + sum(1 for (_, b), (a, _) in zip(pieces, pieces[1:]) if a > b)


def _join(text: str, pieces: list[_Piece]) -> str:
    """The pieces with one space where the text had a gap between them (none inside a word cut in two)."""
    parts = []
    for k, (a, b) in enumerate(pieces):
        if k and a > pieces[k - 1][1]:
            parts.append(" ")
        parts.append(text[a:b])
    return "".join(parts)
