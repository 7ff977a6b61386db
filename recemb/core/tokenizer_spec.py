"""What a Hugging Face tokenizer's ``tokenizer.json`` says about where text may be cut: whether its normalizer maps
characters alone, whether its pre-tokenizer splits at spaces or between character pairs, whether its post-processor
trims leading spaces. Pure functions of the spec; ``tokenizer.TextTokenizer`` decides its streaming cuts by them."""

from __future__ import annotations

__all__ = ["keeps_words", "normalizer_kind", "splits_at_space", "splits_in_pairs", "trims_later_spaces"]

# Character-local normalizers: each character is mapped alone (the NF* forms also compose and reorder, but
# never across a U+0020: combining class 0, composes with nothing), and U+0020 stays U+0020. The flag:
# besides, no character is dropped and no non-space becomes something ending in whitespace (checked over every
# code point for NF* and Lowercase), which ByteLevel needs; BertNormalizer drops controls and pads CJK with
# spaces, StripAccents drops marks.
_LOCAL_NORMALIZERS = {"Lowercase": True, "NFC": True, "NFD": True, "NFKC": True, "NFKD": True,
                      "BertNormalizer": False, "StripAccents": False}
_SPACE_SPLITTERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}  # no pre-token holds a space
# Pre-tokenizers (and Sequences of them) whose splits between two characters depend on those two alone, so a cut
# can be checked on the pair: where they split behind a character-local normalizer, any cut is exact.
_PAIR_SPLITTERS = _SPACE_SPLITTERS
# Normalizers that map a letter or digit to letters, digits and marks only (never whitespace or punctuation, never
# nothing): a run of them stays inside one pre-token of at least its length.
_WORD_KEEPING = {"BertNormalizer", "Lowercase", "NFC", "NFD", "StripAccents"}
# Post-processors that trim a token's leading space out of its offsets except on a text's first token (when they
# also add a prefix space): a window's first token would keep the space that the whole text trims.
_TRIMMING_PROCESSORS = {"ByteLevel", "RobertaProcessing"}


def trims_later_spaces(spec: dict | None) -> bool:
    """Whether the post-processor trims leading spaces out of every token's offsets but a text's first token's."""
    if spec is None:
        return False
    if spec.get("type") == "Sequence":
        return any(trims_later_spaces(s) for s in spec.get("processors") or ())
    return (spec.get("type") in _TRIMMING_PROCESSORS and bool(spec.get("trim_offsets", True))
            and bool(spec.get("add_prefix_space", True)))


def normalizer_kind(spec: dict | None) -> tuple[bool, bool]:
    """(character-local and keeps U+0020, and besides never drops a character nor makes whitespace)."""
    if spec is None:
        return True, True
    kind = spec.get("type")
    if kind == "Sequence":
        kinds = [normalizer_kind(s) for s in spec.get("normalizers", ())]
        return all(k[0] for k in kinds), all(k[1] for k in kinds)
    if kind in _LOCAL_NORMALIZERS:
        return True, _LOCAL_NORMALIZERS[kind]
    if kind == "Replace":  # one literal non-whitespace character replaced wherever it is: character-local
        pattern, content = spec.get("pattern", {}).get("String"), spec.get("content", "")
        if isinstance(pattern, str) and len(pattern) == 1 and not pattern.isspace():
            return True, bool(content) and not any(c.isspace() for c in content)
    return False, False  # Prepend, Strip, Precompiled, ByteLevel (the space becomes 'Ġ'), regex Replace, ...


def splits_in_pairs(spec: dict | None) -> bool:
    """Whether every split the pre-tokenizer makes between two characters depends on those two alone."""
    if spec is None:
        return False
    if spec.get("type") == "Sequence":
        members = spec.get("pretokenizers") or []
        return bool(members) and all(splits_in_pairs(s) for s in members)
    return spec.get("type") in _PAIR_SPLITTERS


def keeps_words(spec: dict | None) -> bool:
    """Whether the normalizer keeps a run of letters and digits a run of letters, digits and marks, no shorter."""
    if spec is None:
        return True
    if spec.get("type") == "Sequence":
        return all(keeps_words(s) for s in spec.get("normalizers", ()))
    return spec.get("type") in _WORD_KEEPING


def splits_at_space(spec: dict | None, keeps_nonspace: bool) -> bool:
    """Whether the pre-tokenizer always ends a pre-token just before a space that follows a non-space."""
    if spec is None:
        return False
    kind = spec.get("type")
    if kind == "Sequence":
        members = spec.get("pretokenizers") or []
        return bool(members) and all(splits_at_space(s, keeps_nonspace) for s in members)
    if kind in _SPACE_SPLITTERS:
        return True
    if kind == "Metaspace":
        scheme = spec.get("prepend_scheme", "always")
        return bool(spec.get("split", True)) and scheme in ("always", "first", "never")
    if kind == "ByteLevel":  # the GPT-2 regex needs the normalized character before the space to be non-space
        return bool(spec.get("use_regex", True)) and keeps_nonspace
    return False
