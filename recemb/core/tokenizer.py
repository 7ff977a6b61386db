"""Text -> token ids, with BOS as the tokenizer adds it and EOS always last (the E5-mistral recipe)."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from itertools import takewhile
from pathlib import Path

from recemb.core.tokenizer_spec import (
    keeps_words,
    normalizer_kind,
    splits_at_space,
    splits_in_pairs,
    trims_later_spaces,
)

__all__ = ["STREAM_MAX_PIECE_CHARS", "Span", "TextTokenizer"]

# A token's characters in its text, text[start:end]; None for a token that covers none (BOS, CLS, SEP, the EOS).
Span = tuple[int, int] | None

_CUT_CANDIDATE = re.compile(r"(?<=\S) (?=\S)")  # re's \s is str.isspace(), a superset of the tokenizers' \s
# CJK ideographs (BertNormalizer pads them with spaces; a superset of its ranges) and where pair splitters may split.
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df\U0002a700-\U0002ceaf\U0002f800-\U0002fa1f"
_SPLIT_CANDIDATE = re.compile(f"[\\W_{_CJK}]")  # a character a split may follow or precede
_LETTERS = f"[^\\W_{_CJK}]"  # letters and digits: never split from each other by a pair splitter
# A word's first and last characters are decided by the tokenizer on this many characters at each end.
_WORD_EDGE_CHARS = 32
# A stretch this long without an exact cut is not tokenized in one piece (memory grows with it): a WordPiece word
# longer than its limit is the unknown token it always is, anything else is read no further (and said so).
STREAM_MAX_PIECE_CHARS = 1 << 21


class TextTokenizer:
    """Wraps a transformers fast tokenizer; ``encode`` returns ids ending in exactly one EOS."""

    def __init__(self, tokenizer, eos_token_id: int | None = None):
        self.tokenizer = tokenizer
        tokenizer.model_max_length = sys.maxsize  # no truncation and no length warning: long inputs are the point
        eos = eos_token_id
        if eos is None:
            eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
        if eos is None:
            raise ValueError("the tokenizer has no eos_token (nor sep_token); pass eos_token_id explicitly")
        self.eos_token_id = int(eos)
        # A post-processor that already ends every sequence with EOS (e.g. BERT's [SEP]) must not get a second one.
        probe = tokenizer("a", add_special_tokens=True)["input_ids"]
        self.appends_eos = bool(probe) and probe[-1] == self.eos_token_id
        self._init_stream()

    @classmethod
    def from_folder(cls, folder: str | os.PathLike, eos_token_id: int | None = None) -> "TextTokenizer | None":
        """None when the folder holds no tokenizer files (tokenizer.json / tokenizer_config.json)."""
        folder = Path(folder)
        if (folder / "tokenizer_config.json").is_file():
            from transformers import AutoTokenizer

            return cls(AutoTokenizer.from_pretrained(str(folder)), eos_token_id)
        if (folder / "tokenizer.json").is_file():
            from transformers import PreTrainedTokenizerFast

            return cls(PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json")), eos_token_id)
        return None

    @classmethod
    def load(cls, name_or_path: str | os.PathLike, eos_token_id: int | None = None, **hub) -> "TextTokenizer":
        """From a folder with tokenizer files, or a hub id through transformers' AutoTokenizer."""
        path = Path(name_or_path).expanduser()
        if path.is_dir():
            tok = cls.from_folder(path, eos_token_id)
            if tok is None:
                raise FileNotFoundError(f"{path} has no tokenizer.json or tokenizer_config.json")
            return tok
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(name_or_path), **hub), eos_token_id)

    def encode(self, texts: list[str], offsets: bool = False
               ) -> list[list[int]] | list[tuple[list[int], list[Span]]]:
        """Ids per text, ending in exactly one EOS.

        ``offsets``: per text ``(ids, spans)`` instead, the same ids and each token's ``(start, end)`` in its text
        as the tokenizer reports it (``text[start:end]``), or None for a token that covers no text: those the
        post-processor puts around the text (BOS, CLS, SEP) and the EOS appended here. A special token written in
        the text keeps its span. Needs a fast tokenizer (``ValueError`` otherwise).
        """
        if not texts:
            return []
        if offsets:
            return self._encode_with_spans(list(texts))
        ids = self.tokenizer(list(texts), add_special_tokens=True)["input_ids"]
        if not self.appends_eos:
            ids = [seq + [self.eos_token_id] for seq in ids]
        return ids

    @property
    def has_offsets(self) -> bool:
        """Whether the tokenizer reports character offsets (a fast tokenizer does, a slow one does not)."""
        return bool(getattr(self.tokenizer, "is_fast", False))

    def _check_offsets(self) -> None:
        if not self.has_offsets:
            raise ValueError(f"character offsets need a fast tokenizer (tokenizers-backed); "
                             f"{type(self.tokenizer).__name__} is not one")

    def _encode_with_spans(self, texts: list[str]) -> list[tuple[list[int], list[Span]]]:
        self._check_offsets()
        enc = self.tokenizer(texts, add_special_tokens=True, return_offsets_mapping=True)
        out = []
        for i, ids in enumerate(enc["input_ids"]):
            # The post-processor's own tokens belong to no sequence; the text's tokens, literal specials too, to 0.
            spans = [None if seq is None else (int(span[0]), int(span[1]))
                     for span, seq in zip(enc["offset_mapping"][i], enc.sequence_ids(i))]
            if not self.appends_eos:
                ids, spans = ids + [self.eos_token_id], spans + [None]
            out.append((ids, spans))
        return out

    def save(self, folder: str | os.PathLike) -> None:
        self.tokenizer.save_pretrained(str(folder))

    def encode_stream(self, text: str, window_chars: int = 1 << 18,
                      on_chars: Callable[[int], None] | None = None,
                      max_piece_chars: int | None = None,
                      notes: list[str] | None = None,
                      offsets: bool = False) -> Iterator[list[int]] | Iterator[tuple[list[int], list[Span]]]:
        """Token ids of one text as consecutive pieces; joined, they equal ``self.encode([text])[0]`` exactly
        (but see "Bounded" below).

        ``offsets``: each piece is ``(ids, spans)``, spans into the whole ``text``; joined, they equal
        ``self.encode([text], offsets=True)[0]`` exactly, on every path below (a word made the unknown token spans
        that word, as in the whole text). Offsets do not change across a cut, with one exception that is undone:
        a post-processor that trims spaces out of offsets but keeps a text's first token's prefix space (ByteLevel
        or RobertaProcessing with trim_offsets and add_prefix_space) would keep it on each window's first token.

        The tokenizer runs on windows of about ``window_chars`` characters without special tokens (the
        post-processor's prefix goes on the first piece, its suffix and the appended EOS on the last), so
        memory stays bounded for huge texts. ``on_chars(n)`` gets the characters consumed after each window.

        Cut rule: a window ends just before a U+0020 between two non-whitespace characters, with no added
        token's text within the longest one's length of it. Tokenization cannot change there, because
        - added tokens are matched first, in the raw text and then in the normalized text, and may eat the
          whitespace next to them (lstrip/rstrip): none is near the cut in either text, and the character
          before the space is not whitespace in the text where tokens are matched, so none further left
          reaches the cut (an lstrip token on the right stops at that character in the whole text too);
        - the normalizer is character-local and keeps U+0020, so the text normalizes to its halves normalized;
        - the pre-tokenizer ends a pre-token before that space: Bert/Whitespace/WhitespaceSplit drop spaces,
          Metaspace(split=True) starts a piece at each '▁' and prepends none to a half starting with '▁'; the
          GPT-2 regex of ByteLevel(use_regex=True) has no match holding a non-space then a space, and a match
          starting at the space depends only on what follows (add_prefix_space skips a half starting with a
          space); a Sequence of these splits there at its first member already;
        - the model tokenizes each pre-token alone.
        Behind pre-tokenizers that split by character pairs (Bert, Whitespace, WhitespaceSplit, and Sequences of
        them) and a character-local normalizer, more cuts are exact: one just before a lone whitespace character
        of any kind, and one between two non-whitespace characters where the pipeline itself splits (punctuation,
        CJK ideographs), each checked by running the normalizer and the pre-tokenizer on the two characters; the
        added-token rule above holds for both. Text without spaces (CJK, minified data) is cut there.

        The last admissible cut in the window's second half is taken, else the first after the window.

        Bounded: a stretch of more than ``max_piece_chars`` characters (default ``STREAM_MAX_PIECE_CHARS``)
        without an admissible cut is not tokenized as one piece. In a WordPiece pipeline a word (a run of letters
        and digits) longer than the model's ``max_input_chars_per_word`` is its unknown token whatever it holds, so
        such a word is given that token without being tokenized: still exact. Otherwise the text is read no further
        than ``max_piece_chars`` past the last cut: the ids (and spans) are those of the text cut there, and a line in
        ``notes`` (a list, if given) says so, as it says how many words became the unknown token. Other pipelines
        (``streamable`` False) get the whole ``encode`` in one piece: still exact, not bounded.
        """
        if window_chars < 1:
            raise ValueError(f"window_chars must be >= 1, got {window_chars}")
        if offsets:
            self._check_offsets()
        n = len(text)
        if not self.streamable or n <= window_chars:
            if on_chars is not None:
                on_chars(n)
            yield self.encode([text], offsets=offsets)[0]
            return
        reach = max(STREAM_MAX_PIECE_CHARS if max_piece_chars is None else max_piece_chars, window_chars)
        start, unknown_words, unknown_chars = 0, 0, 0
        while start < n:
            cut = n if n - start <= window_chars else self._find_cut(text, start, start + window_chars,
                                                                     min(n - 1, start + reach))
            if cut is None and n - start <= reach:  # the rest is one piece of bounded size
                cut = n
            word = self._long_word(text, start, start + reach) if cut is None else None
            spans = None
            if cut is not None and start == 0 and cut == n:  # no admissible cut at all
                ids, spans = self.encode([text], offsets=True)[0] if offsets else (self.encode([text])[0], None)
            elif cut is not None:
                ids, spans = self._piece(text, start, cut, offsets=offsets)
            elif word is not None:  # the text before the word, then the word as the unknown token
                ids, spans = self._piece(text, start, word[0], end=False, offsets=offsets)
                ids = ids + [self._unknown_word[1]]
                if offsets:
                    spans = spans + [self._word_span(text, *word)]
                cut = word[1]
                unknown_words, unknown_chars = unknown_words + 1, unknown_chars + cut - word[0]
                if cut == n:
                    ids = ids + self._suffix
                    if offsets:
                        spans = spans + [None] * len(self._suffix)
            else:  # read no further: the ids of the text cut here
                end = min(n, start + reach)
                ids, spans = self._piece(text, start, end, end=True, offsets=offsets)
                if notes is not None:
                    notes.append(f"only its first {end:,} of {n:,} characters were read: from character {start:,} "
                                 f"on, {reach:,} characters hold no place where this tokenizer can be cut exactly "
                                 "(no space, and no boundary it splits at), and a longer piece would take memory "
                                 "that grows with it")
                cut = n
            if on_chars is not None:
                on_chars(cut - start)
            yield (ids, spans) if offsets else ids
            start = cut
        if unknown_words and notes is not None:
            notes.append(f"{unknown_words:,} word{'s' * (unknown_words > 1)} of more than "
                         f"{self._unknown_word[0]} characters ({unknown_chars:,} characters in all) became the "
                         "unknown token, as this tokenizer makes every word that long")

    def _piece(self, text: str, start: int, cut: int, end: bool | None = None, offsets: bool = False
               ) -> tuple[list[int], list[Span] | None]:
        """The ids of text[start:cut] with the prefix on the first piece and, at the end (``end``, by default
        whether ``cut`` is the text's end), the suffix; with ``offsets`` their spans in ``text`` (else None)."""
        ids, spans = [], [] if offsets else None
        if cut > start and not offsets:
            ids = self.tokenizer(text[start:cut], add_special_tokens=False)["input_ids"]
        elif cut > start:
            enc = self.tokenizer(text[start:cut], add_special_tokens=False, return_offsets_mapping=True)
            ids, spans = enc["input_ids"], [(start + int(a), start + int(b)) for a, b in enc["offset_mapping"]]
            if start > 0 and self._trims_later_spaces:
                spans = _trim_as_not_first(spans, enc.tokens(), start)
        if start == 0:
            ids = self._prefix + ids
            if offsets:
                spans = [None] * len(self._prefix) + spans
        if (cut == len(text)) if end is None else end:
            ids = ids + self._suffix
            if offsets:
                spans = spans + [None] * len(self._suffix)
        return ids, spans

    def _word_span(self, text: str, begin: int, end: int) -> tuple[int, int]:
        """The span the whole text gives the unknown token of the word text[begin:end]: from its first normalized
        character's origin to its last one's, asked of the tokenizer on a few characters at each end (NFC folds a
        final combining mark into the letter before it, and that letter's span is the token's end)."""
        head = self.tokenizer(text[begin:begin + _WORD_EDGE_CHARS], add_special_tokens=False,
                              return_offsets_mapping=True)["offset_mapping"]
        tail_start = max(begin, end - _WORD_EDGE_CHARS)
        tail = self.tokenizer(text[tail_start:end], add_special_tokens=False,
                              return_offsets_mapping=True)["offset_mapping"]
        return begin + int(head[0][0]), tail_start + int(tail[-1][1])

    def _init_stream(self) -> None:
        """Decide once whether texts can be cut (see ``encode_stream``) and prepare the cut check."""
        self.streamable = False
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        affixes = self._probe_affixes()
        if backend is None or affixes is None:
            return
        spec = json.loads(backend.to_str())
        local, keeps_nonspace = normalizer_kind(spec.get("normalizer"))
        if not (local and splits_at_space(spec.get("pre_tokenizer"), keeps_nonspace)):
            return
        self._prefix = affixes[0]
        self._suffix = affixes[1] + ([] if self.appends_eos else [self.eos_token_id])
        norm = backend.normalizer.normalize_str if backend.normalizer is not None else None
        added = [t for t in spec.get("added_tokens") or () if t["content"]]
        raw = [t["content"] for t in added]
        # Normalized tokens are matched, with their content normalized, in the normalized text.
        normed = [s for s in (norm(t["content"]) for t in added if t.get("normalized") and norm) if s]
        self._normalize = norm
        self._added_len = max(map(len, raw + normed), default=0)
        self._added = _literal_alternation(raw)
        self._added_normed = _literal_alternation(normed)
        self._pair_cuts = splits_in_pairs(spec.get("pre_tokenizer"))
        self._pre_tokenize = backend.pre_tokenizer.pre_tokenize_str if self._pair_cuts else None
        self._trims_later_spaces = trims_later_spaces(spec.get("post_processor"))
        model = spec.get("model") or {}
        unk = model.get("unk_token")
        unk_id = backend.token_to_id(unk) if isinstance(unk, str) else None
        # (longest word tokenized, the unknown token's id) where a longer word is that id whatever it holds
        self._unknown_word = None
        if (model.get("type") == "WordPiece" and self._pair_cuts and unk_id is not None and self._added_normed is None
                and keeps_words(spec.get("normalizer"))):
            self._unknown_word = (int(model.get("max_input_chars_per_word", 100)), int(unk_id))
            self._long_run = re.compile(f"{_LETTERS}{{{self._unknown_word[0] + 1},}}")
        self.streamable = True

    def _probe_affixes(self) -> tuple[list[int], list[int]] | None:
        """The ids the post-processor puts before and after any text, or None if probes disagree."""
        found = None
        for probe in ("a", "hello world", "1 2."):
            full = self.tokenizer(probe, add_special_tokens=True)["input_ids"]
            core = self.tokenizer(probe, add_special_tokens=False)["input_ids"]
            at = next((i for i in range(len(full) - len(core) + 1) if full[i:i + len(core)] == core), None)
            if not core or at is None:
                return None
            affixes = (full[:at], full[at + len(core):])
            if found is not None and affixes != found:
                return None
            found = affixes
        return found

    def _find_cut(self, text: str, start: int, end: int, reach: int) -> int | None:
        """The last admissible cut in the window's second half, else the first after ``end`` up to ``reach``, else
        None.

        Searching only the second half keeps windows at least half full, so the backward search costs
        O(window) per window; the forward search finds candidates in C (the regex).
        """
        lo = max(start + 1, end - max(1, (end - start) // 2))
        p = text.rfind(" ", lo, end + 1)
        while p >= lo:
            if self._admissible(text, p):
                return p
            p = text.rfind(" ", lo, p)
        if self._pair_cuts:  # no space to cut at: where the pipeline splits
            for p in reversed(list(self._split_candidates(text, lo, end))):
                if self._admissible(text, p):
                    return p
        candidates = self._split_candidates(text, end + 1, reach) if self._pair_cuts else (
            m.start() for m in _CUT_CANDIDATE.finditer(text, end + 1, reach + 2))
        return next((p for p in candidates if p <= reach and self._admissible(text, p)), None)

    @staticmethod
    def _split_candidates(text: str, lo: int, hi: int) -> Iterator[int]:
        """Positions in [lo, hi], ascending, just before or after a character that a pair splitter may split at."""
        last = -1
        for m in _SPLIT_CANDIDATE.finditer(text, max(lo - 1, 0), hi + 1):
            for p in (m.start(), m.start() + 1):
                if lo <= p <= hi and p > last:
                    last = p
                    yield p

    def _pair_split(self, text: str, p: int) -> bool:
        """Whether the pipeline splits between text[p - 1] and text[p] (normalized, then pre-tokenized)."""
        return self._splits_between(text[p - 1], text[p])

    def _splits_between(self, left: str, right: str) -> bool:
        """Whether the pipeline splits between two characters that are next to each other once normalized."""
        if self._normalize is not None:
            left, right = self._normalize(left), self._normalize(right)
        if not left or not right:  # a dropped character: judged by its neighbours, conservatively never
            return False
        at = len(left)
        return all(end <= at or begin >= at for _, (begin, end) in self._pre_tokenize(left + right))

    def _long_word(self, text: str, start: int, reach: int) -> tuple[int, int] | None:
        """(begin, end) of a word longer than WordPiece tokenizes, the first one starting before ``reach``, with
        exact cuts on both sides; None where the pipeline has no such rule or none is there."""
        if self._unknown_word is None:
            return None
        run = self._long_run.search(text, start)
        if run is None or run.start() > reach:
            return None
        # The word may hold more than the run. Characters the normalizer drops (controls, stripped marks) are
        # skipped, as the pre-tokenizer never sees them: the word is judged by the characters on either side.
        begin, end, n = run.start(), run.end(), len(text)
        while True:
            left = begin - 1
            while left >= start and self._dropped(text[left]):
                left -= 1
            if left < start or self._splits_between(text[left], text[begin]):
                break
            begin = left
        while True:
            right = end
            while right < n and self._dropped(text[right]):
                right += 1
            if right >= n or self._splits_between(text[end - 1], text[right]):
                break
            end = right + 1
        if self._added is not None and self._added.search(text, max(start, begin - self._added_len),
                                                          min(len(text), end + self._added_len)):
            return None  # an added token is matched first, inside the word or touching it
        return begin, end

    def _dropped(self, char: str) -> bool:
        return self._normalize is not None and not self._normalize(char)

    def _admissible(self, text: str, p: int) -> bool:
        """Whether a cut just before ``text[p]`` is safe (see ``encode_stream``): before a space between two
        non-whitespace characters, or, behind a pair splitter, before any lone whitespace character or between two
        non-whitespace characters that the pipeline splits."""
        n = len(text)
        if p <= 0 or p >= n:
            return False
        before, at = text[p - 1].isspace(), text[p].isspace()
        if text[p] == " " or (at and self._pair_cuts):
            # The character before must not be whitespace (rstrip tokens, ByteLevel); the one after is a margin.
            if p + 1 >= n or before or text[p + 1].isspace():
                return False
        elif not self._pair_cuts or before or at:
            return False
        if self._pair_cuts and not self._pair_split(text, p):
            return False
        if self._added is None and self._added_normed is None:
            return True
        width = self._added_len
        lo, hi = max(0, p - width), min(n, p + width + 1)  # holds every match touching text[p-1:p+2]
        if self._added_normed is not None:
            # Widen to spaces (or the text's ends), where normalization is exact, and far enough that the
            # normalized neighbourhood of the cut is inside too.
            reach = 4 * width + 64
            lo = 0 if lo == 0 else text.rfind(" ", max(0, p - reach), lo + 1)
            hi = n if hi == n else text.find(" ", hi, p + reach)
            if lo < 0 or hi < 0:
                return False
            left, right = self._normalize(text[lo:p]), self._normalize(text[p:hi])
            if (lo > 0 and len(left) < width) or (hi < n and len(right) <= width):
                return False
            if left[-1:].isspace():  # a dropped character exposed whitespace that an rstrip token could eat
                return False
            if self._added_normed.search(left + right):
                return False
        return self._added is None or not self._added.search(text, lo, hi)


def _trim_as_not_first(spans: list[tuple[int, int]], tokens: list[str], start: int) -> list[tuple[int, int]]:
    """A window's spans as the whole text has them where the post-processor left a window's first token's one
    leading space in its span (``tokenizer_spec.trims_later_spaces``): in the whole text that token is not the
    first, and the space is trimmed (a token of only that space then spans nothing, just after it)."""
    spans = list(spans)
    for i, ((a, b), token) in enumerate(zip(spans, tokens)):
        if a != start:
            break
        leading = sum(1 for _ in takewhile(lambda c: c == "Ġ" or c.isspace(), token))
        if leading == 1:  # more than one was trimmed already, as in the whole text
            spans[i] = (a + 1, max(b, a + 1))
    return spans


def _literal_alternation(strings: list[str]) -> re.Pattern | None:
    if not strings:
        return None
    return re.compile("|".join(map(re.escape, sorted(set(strings), key=len, reverse=True))))
