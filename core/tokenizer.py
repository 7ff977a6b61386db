"""Text -> token ids, with BOS as the tokenizer adds it and EOS always last (the E5-mistral recipe)."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

# Character-local normalizers: each character is mapped alone (the NF* forms also compose and reorder, but
# never across a U+0020: combining class 0, composes with nothing), and U+0020 stays U+0020. The flag:
# besides, no character is dropped and no non-space becomes something ending in whitespace (checked over every
# code point for NF* and Lowercase), which ByteLevel needs; BertNormalizer drops controls and pads CJK with
# spaces, StripAccents drops marks.
_LOCAL_NORMALIZERS = {"Lowercase": True, "NFC": True, "NFD": True, "NFKC": True, "NFKD": True,
                      "BertNormalizer": False, "StripAccents": False}
_SPACE_SPLITTERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}  # no pre-token holds a space
_CUT_CANDIDATE = re.compile(r"(?<=\S) (?=\S)")  # re's \s is str.isspace(), a superset of the tokenizers' \s


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

    def encode(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        ids = self.tokenizer(list(texts), add_special_tokens=True)["input_ids"]
        if not self.appends_eos:
            ids = [seq + [self.eos_token_id] for seq in ids]
        return ids

    def save(self, folder: str | os.PathLike) -> None:
        self.tokenizer.save_pretrained(str(folder))

    def encode_stream(self, text: str, window_chars: int = 1 << 18,
                      on_chars: Callable[[int], None] | None = None) -> Iterator[list[int]]:
        """Token ids of one text as consecutive pieces; joined, they equal ``self.encode([text])[0]`` exactly.

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
        The last admissible cut in the window's second half is taken, else the first after the window (a long
        stretch without one is tokenized as one bigger piece). Other pipelines (``streamable`` False) get the
        whole ``encode`` in one piece: still exact, not bounded.
        """
        if window_chars < 1:
            raise ValueError(f"window_chars must be >= 1, got {window_chars}")
        n = len(text)
        if not self.streamable or n <= window_chars:
            if on_chars is not None:
                on_chars(n)
            yield self.encode([text])[0]
            return
        start = 0
        while start < n:
            cut = n if n - start <= window_chars else self._find_cut(text, start, start + window_chars)
            if start == 0 and cut == n:  # no admissible cut at all
                ids = self.encode([text])[0]
            else:
                ids = self.tokenizer(text[start:cut], add_special_tokens=False)["input_ids"]
                if start == 0:
                    ids = self._prefix + ids
                if cut == n:
                    ids = ids + self._suffix
            if on_chars is not None:
                on_chars(cut - start)
            yield ids
            start = cut

    def _init_stream(self) -> None:
        """Decide once whether texts can be cut (see ``encode_stream``) and prepare the cut check."""
        self.streamable = False
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        affixes = self._probe_affixes()
        if backend is None or affixes is None:
            return
        spec = json.loads(backend.to_str())
        local, keeps_nonspace = _normalizer_kind(spec.get("normalizer"))
        if not (local and _splits_at_space(spec.get("pre_tokenizer"), keeps_nonspace)):
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

    def _find_cut(self, text: str, start: int, end: int) -> int:
        """The last admissible cut in the window's second half, else the first after ``end``, else len(text).

        Searching only the second half keeps windows at least half full, so the backward search costs
        O(window) per window; the forward search skips spaces next to whitespace in C (the regex).
        """
        lo = max(start + 1, end - max(1, (end - start) // 2))
        p = text.rfind(" ", lo, end + 1)
        while p >= lo:
            if self._admissible(text, p):
                return p
            p = text.rfind(" ", lo, p)
        for m in _CUT_CANDIDATE.finditer(text, end + 1):
            if self._admissible(text, m.start()):
                return m.start()
        return len(text)

    def _admissible(self, text: str, p: int) -> bool:
        """Whether a cut just before the space ``text[p]`` is safe (see ``encode_stream``)."""
        n = len(text)
        # The character before must not be whitespace (rstrip tokens, ByteLevel); the one after is a margin.
        if p <= 0 or p + 1 >= n or text[p - 1].isspace() or text[p + 1].isspace():
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


def _literal_alternation(strings: list[str]) -> re.Pattern | None:
    if not strings:
        return None
    return re.compile("|".join(map(re.escape, sorted(set(strings), key=len, reverse=True))))


def _normalizer_kind(spec: dict | None) -> tuple[bool, bool]:
    """(character-local and keeps U+0020, and besides never drops a character nor makes whitespace)."""
    if spec is None:
        return True, True
    kind = spec.get("type")
    if kind == "Sequence":
        kinds = [_normalizer_kind(s) for s in spec.get("normalizers", ())]
        return all(k[0] for k in kinds), all(k[1] for k in kinds)
    if kind in _LOCAL_NORMALIZERS:
        return True, _LOCAL_NORMALIZERS[kind]
    if kind == "Replace":  # one literal non-whitespace character replaced wherever it is: character-local
        pattern, content = spec.get("pattern", {}).get("String"), spec.get("content", "")
        if isinstance(pattern, str) and len(pattern) == 1 and not pattern.isspace():
            return True, bool(content) and not any(c.isspace() for c in content)
    return False, False  # Prepend, Strip, Precompiled, ByteLevel (the space becomes 'Ġ'), regex Replace, ...


def _splits_at_space(spec: dict | None, keeps_nonspace: bool) -> bool:
    """Whether the pre-tokenizer always ends a pre-token just before a space that follows a non-space."""
    if spec is None:
        return False
    kind = spec.get("type")
    if kind == "Sequence":
        members = spec.get("pretokenizers") or []
        return bool(members) and all(_splits_at_space(s, keeps_nonspace) for s in members)
    if kind in _SPACE_SPLITTERS:
        return True
    if kind == "Metaspace":
        scheme = spec.get("prepend_scheme", "always")
        return bool(spec.get("split", True)) and scheme in ("always", "first", "never")
    if kind == "ByteLevel":  # the GPT-2 regex needs the normalized character before the space to be non-space
        return bool(spec.get("use_regex", True)) and keeps_nonspace
    return False
