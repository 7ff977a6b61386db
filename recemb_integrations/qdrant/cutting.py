"""Passages for a model recemb does not run: spans of the user's own text, each short enough for the model's window.

recemb's own models cut passages from the token ids they embed (``points.PassageWindows``). Another library's model
embeds texts, so its passages are spans ``text[start:end]`` that the model takes whole:

- ``TokenCutter``: with the model's own tokenizer (a Hugging Face fast tokenizer with an offset mapping, as a
  sentence-transformers model holds): windows of its tokens that, with the special tokens the model adds, fit its
  window (``max_seq_length``). A window ends where a word ends where it can, and every span is tokenized again and
  shortened until it fits, so no passage is longer than the window, whatever the tokenizer does at a cut;
- ``CharacterCutter``: without a tokenizer, a budget of characters (``DEFAULT_CHARACTERS``: safe for a window of
  256 tokens in English and most European text, which takes 4 to 5 characters a token), cut after white space where
  there is some, never inside a CRLF, a surrogate pair or before a combining mark.

Both are pure: ``spans(text)`` is the passages' (start, end) characters in order, overlapping by ``overlap``;
``describe()`` is what the collection records of how its passages were cut (a later sync must cut the same way).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CharacterCutter", "DEFAULT_CHARACTERS", "DEFAULT_OVERLAP_FRACTION", "TOKENIZE_PIECE_CHARS", "TokenCutter",
           "cutter_for"]

DEFAULT_CHARACTERS = 1000
DEFAULT_OVERLAP_FRACTION = 0.125  # of a window: a sentence cut at one passage's end is whole in the next
TOKENIZE_PIECE_CHARS = 1 << 16  # a long text is tokenized in pieces of about this many characters (memory)


def _safe_cut(text: str, at: int, floor: int) -> int:
    """The nearest place at or before ``at`` (and after ``floor``) where cutting splits no CRLF, surrogate pair or
    base character from its combining marks; ``at`` itself where there is none."""
    i = at
    while i > floor and i < len(text) and (
            unicodedata.combining(text[i]) or "\udc00" <= text[i] <= "\udfff" or text[i - 1:i + 1] == "\r\n"
            or text[i] in "\u200d\ufe0f"):  # (a zero-width joiner or emoji variation selector belongs to the left)
        i -= 1
    return i if i > floor else at


@dataclass(frozen=True)
class CharacterCutter:
    """Passages of at most ``budget`` characters, overlapping by ``overlap``."""

    budget: int = DEFAULT_CHARACTERS
    overlap: int = -1  # -1: DEFAULT_OVERLAP_FRACTION of the budget

    def __post_init__(self) -> None:
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 16:
            raise ValueError(f"a passage's character budget must be an int of at least 16, got {self.budget!r}")
        if self.overlap == -1:
            object.__setattr__(self, "overlap", int(self.budget * DEFAULT_OVERLAP_FRACTION))
        overlap = self.overlap
        if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < self.budget // 2:
            raise ValueError(f"the overlap must be an int from 0 to half the budget, got {self.overlap!r}")

    def describe(self) -> dict[str, Any]:
        return {"by": "characters", "characters": self.budget, "overlap": self.overlap}

    def count(self, text: str) -> int:
        return len(text)

    def spans(self, text: str) -> list[tuple[int, int]]:
        if len(text) <= self.budget:
            return [(0, len(text))]
        out, start = [], 0
        while True:
            end = min(start + self.budget, len(text))
            if end < len(text):
                # after the last white space in the window's second half, else at a safe place
                space = max((text.rfind(c, start + self.budget // 2, end) for c in " \n\t"), default=-1)
                end = space + 1 if space >= 0 else _safe_cut(text, end, start + self.budget // 2)
                end = _safe_cut(text, end, start)
            out.append((start, end))
            if end >= len(text):
                return out
            nxt = _safe_cut(text, max(end - self.overlap, start + 1), start)
            # begin at a word where the overlap allows
            space = text.find(" ", nxt, end)
            start = space + 1 if 0 <= space < end - 1 else nxt


@dataclass(frozen=True)
class TokenCutter:
    """Passages of the model's own tokens: each span's text, tokenized with the model's special tokens, is at most
    ``window`` tokens, and holds at most ``tokens`` of text (None: as many as the window takes); consecutive
    passages share about ``overlap`` tokens. ``name``: the tokenizer's (recorded)."""

    tokenizer: Any = field(compare=False, repr=False)
    window: int
    overlap: int = -1  # -1: DEFAULT_OVERLAP_FRACTION of a passage's tokens
    name: str = ""
    tokens: int | None = None

    def __post_init__(self) -> None:
        if not getattr(self.tokenizer, "is_fast", False):
            raise ValueError("passages are cut by a tokenizer's character offsets, which only a fast (Rust) Hugging "
                             "Face tokenizer gives; give a character budget instead")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 8:
            raise ValueError(f"a model's window must be an int of at least 8 tokens, got {self.window!r}")
        room = self.window - self.tokenizer.num_special_tokens_to_add(pair=False)
        if self.tokens is not None and (isinstance(self.tokens, bool) or not isinstance(self.tokens, int)
                                        or not 8 <= self.tokens <= room):
            raise ValueError(f"a passage of this model holds from 8 to {room} tokens of text (its window of "
                             f"{self.window} less its special tokens), got {self.tokens!r}")
        if self.overlap == -1:
            object.__setattr__(self, "overlap", int(self.body * DEFAULT_OVERLAP_FRACTION))
        overlap = self.overlap
        if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < self.body // 2:
            raise ValueError(f"the overlap must be an int from 0 to half a passage, got {self.overlap!r}")

    @property
    def body(self) -> int:
        """The text tokens a passage holds at most: ``tokens``, else the window less the special tokens the model
        adds."""
        return self.tokens or self.window - self.tokenizer.num_special_tokens_to_add(pair=False)

    def describe(self) -> dict[str, Any]:
        return {"by": "tokenizer", "tokenizer": self.name, "window": self.window, "tokens": self.body,
                "overlap": self.overlap}

    def count(self, text: str) -> int:
        return sum(len(ids) for ids, _ in self._pieces(text))

    def fits(self, text: str) -> bool:
        return len(self._encode(text)[0]) <= self.body

    def spans(self, text: str) -> list[tuple[int, int]]:
        offsets = [o for _, piece in self._pieces(text) for o in piece]
        if len(offsets) <= self.body and self.fits(text):
            return [(0, len(text))]
        out, first, n = [], 0, len(offsets)
        while first < n:
            last = min(first + self.body, n) - 1
            if last < n - 1:  # end where a word ends (a gap before the next token) in the window's second half
                for j in range(last, first + self.body // 2, -1):
                    if offsets[j + 1][0] > offsets[j][1]:
                        last = j
                        break
            start = offsets[first][0] if out else 0  # (the first passage from the text's first character)

            def end_of(j: int) -> int:  # the last passage to the text's end where only white space follows
                return len(text) if j == n - 1 and not text[offsets[j][1]:].strip() else offsets[j][1]

            while last > first and not self.fits(text[start:end_of(last)]):  # a cut the tokenizer reads otherwise
                last -= 1
            out.append((start, end_of(last)))
            if last == n - 1:
                return out
            nxt = max(last + 1 - self.overlap, first + 1)
            for j in range(nxt, last + 1):  # begin where a word begins, where the overlap allows
                if offsets[j][0] > offsets[j - 1][1]:
                    nxt = j
                    break
            first = nxt
        return out

    def _encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        return enc["input_ids"], [tuple(o) for o in enc["offset_mapping"]]

    def _pieces(self, text: str):
        """(ids, absolute offsets) of ``text`` tokenized in pieces cut after white space (bounded memory)."""
        start = 0
        while start < len(text):
            end = min(start + TOKENIZE_PIECE_CHARS, len(text))
            if end < len(text):
                space = max(text.rfind(c, start + TOKENIZE_PIECE_CHARS // 2, end) for c in " \n\t")
                end = space + 1 if space >= 0 else _safe_cut(text, end, start)
            ids, offsets = self._encode(text[start:end])
            yield ids, [(a + start, b + start) for a, b in offsets if b > a]
            start = end


def cutter_for(tokenizer: Any = None, window: int | None = None, characters: int | None = None,
               name: str = "", tokens: int | None = None) -> TokenCutter | CharacterCutter:
    """A ``TokenCutter`` where the model gives a fast tokenizer and its window (passages of at most ``tokens``
    text tokens: None, the window's), else a ``CharacterCutter`` of ``characters`` (``DEFAULT_CHARACTERS`` where
    not given). ``characters`` given wins: the user's choice."""
    if characters is not None:
        return CharacterCutter(characters)
    if tokenizer is not None and window is not None and getattr(tokenizer, "is_fast", False):
        return TokenCutter(tokenizer, int(window), name=name, tokens=tokens)
    return CharacterCutter()
