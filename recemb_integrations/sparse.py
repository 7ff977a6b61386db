"""BM25 as sparse vectors, offline: the document side carries the term-frequency part, Qdrant applies the IDF.

    from recemb_integrations.sparse import Bm25
    bm25 = Bm25("english", avg_len=3000.0)
    doc = bm25.embed_document("a long book ...")    # SparseVector: indices (token ids) and values
    query = bm25.embed_query("whale hunt")           # every distinct token id with value 1.0

The vectors are interchangeable with fastembed's ``Bm25`` ("Qdrant/bm25", the sparse model of Qdrant's ecosystem):
same tokenizer, same stopword lists (shipped in ``stopwords/``, see its SOURCE.md), same Snowball stemmer, token id
``abs(murmur3_32(stem))`` and values equal to the last bit, so a collection can be written by one and queried by the
other. Use it with a sparse vector index whose ``modifier`` is IDF. Nothing is downloaded.

Algorithm (fastembed's, step by step):
- text -> every character that is neither ``\\w`` nor whitespace becomes " " -> ``lower()`` -> tokens are the runs
  of ``\\w`` characters;
- a token is dropped if it is a single punctuation character ("_"), a stopword (compared lowercased) or longer than
  ``token_max_length``; the others are Snowball-stemmed and empty stems dropped;
- a document with ``doc_len`` kept tokens gets, per distinct stem occurring ``tf`` times,
  ``tf * (k + 1) / (tf + k * (1 - b + b * doc_len / avg_len))``.

Why the average length is chosen per collection: ``avg_len`` is the document length that ``b`` normalises against.
fastembed's default 256 suits short passages. For whole long documents (books, where doc_len / avg_len is in the
hundreds) it crushes every value towards 0 and lets length dominate the score, so recemb's Qdrant sync takes the mean
length of the first sync's documents when it creates a collection, records it in the collection's metadata and uses
it for every later sync: values written with different avg_len would not be comparable.

Long texts take bounded memory: they are read in windows of about ``TEXT_WINDOW_CHARS`` characters cut just before
a " " or "\\n", or in text without them just before any other character that is not ``\\w`` (it is whitespace, or
becomes " " before ``lower()``: neither cased nor case-ignorable, so the context-sensitive ``lower()`` of a Greek
final sigma and the regexes see the same thing as on the whole text); only the counts per stem grow with the text.
A run of ``\\w`` characters longer than a window is cut inside where more than ``token_max_length`` characters lie on
each side (lowercased too): the token there would be dropped, and both halves are.
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from recemb_integrations._imports import require

__all__ = ["Bm25", "DEFAULT_AVG_LEN", "LANGUAGES", "STOPWORDS_DIR", "SparseVector", "TEXT_WINDOW_CHARS",
    "load_stopwords", "stopwords_path"]

_mmh3 = require("mmh3", "sparse")
_stemmers = require("py_rust_stemmers", "sparse")

# fastembed's supported_languages: the Snowball stemmers it offers (tamil has no stopword list).
LANGUAGES: tuple[str, ...] = (
    "arabic", "danish", "dutch", "english", "finnish", "french", "german", "greek", "hungarian", "italian",
    "norwegian", "portuguese", "romanian", "russian", "spanish", "swedish", "tamil", "turkish",
)
DEFAULT_AVG_LEN = 256.0  # fastembed's default, made for passages of a few hundred tokens
TEXT_WINDOW_CHARS = 1 << 20  # long texts are processed in windows of about this many characters
STOPWORDS_DIR = Path(__file__).resolve().parent / "stopwords"

_NOT_WORD_OR_SPACE = re.compile(r"[^\w\s]")
_WORD = re.compile(r"\w+")
_NOT_WORD = re.compile(r"\W")
_DROPPED = ""  # a token's cached "stem" when it is dropped (fastembed drops empty stems too)


@dataclass(frozen=True)
class SparseVector:
    """Token ids (ascending, unique, each in [0, 2**31]) and their values."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.indices) != len(self.values):
            raise ValueError(f"{len(self.indices)} indices but {len(self.values)} values")

    def __len__(self) -> int:
        return len(self.indices)

    def as_dict(self) -> dict[int, float]:
        return dict(zip(self.indices, self.values))


def _check_language(language: str) -> None:
    if language not in LANGUAGES:
        raise ValueError(f"unsupported BM25 language {language!r}; supported: {', '.join(LANGUAGES)}")


def stopwords_path(language: str) -> Path | None:
    """The shipped stopword file of a language, None for a language without one (tamil)."""
    _check_language(language)
    path = STOPWORDS_DIR / f"{language}.txt"
    return path if path.is_file() else None


def load_stopwords(language: str) -> frozenset[str]:
    """The shipped stopwords of a language, comment lines ("#...") skipped; empty for a language without a list."""
    path = stopwords_path(language)
    if path is None:
        return frozenset()
    # splitlines(), as fastembed reads the same file, so both split words on the same line boundaries
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(line for line in lines if line and not line.startswith("#"))


def _digest(stopwords: frozenset[str]) -> str:
    return hashlib.sha256("\n".join(sorted(stopwords)).encode("utf-8")).hexdigest()[:16]


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"BM25 {name} must be a number, got {type(value).__name__}")
    return float(value)


def _check_avg_len(avg_len: object) -> float:
    avg_len = _number("avg_len", avg_len)
    if not (math.isfinite(avg_len) and avg_len > 0):
        raise ValueError(f"BM25 avg_len must be a finite number > 0, got {avg_len}")
    return avg_len


def _check_text(text: object) -> str:
    if not isinstance(text, str):
        raise TypeError(f"BM25 expects text as str, got {type(text).__name__}")
    return text


def _windows(text: str, word_max: int | None = None) -> Iterator[str]:
    """Consecutive pieces of text, each but the first starting with " " or "\\n" (else another non-\\w character),
    about TEXT_WINDOW_CHARS long. With ``word_max`` (the longest token kept), a run of \\w characters is also cut
    where more than ``word_max`` of them lie on each side, lowercased too: the token there is dropped whole or cut."""
    size = TEXT_WINDOW_CHARS  # read at call time, so tests can shrink it
    start = 0
    while len(text) - start > size:
        end = start + size
        cut = max(text.rfind(" ", start + 1, end + 1), text.rfind("\n", start + 1, end + 1))
        if cut <= start:  # text without spaces: before the window's last non-word character
            cut = max((m.start() for m in _NOT_WORD.finditer(text, end - size // 2, end + 1)), default=-1)
        if cut <= start and word_max is not None:  # inside a long word: where its parts on both sides are dropped
            margin = word_max + 1
            cut = next((at for at in range(end, max(start + margin, end - size // 2) - 1, -margin)
                        if _inside_long_word(text, at, margin)), -1)
        if cut <= start:  # no cut point inside the window: extend it to the next one
            later = _NOT_WORD.search(text, end + 1)
            if later is None:
                break
            cut = later.start()
        yield text[start:cut]
        start = cut
    yield text[start:]


def _inside_long_word(text: str, at: int, margin: int) -> bool:
    """Whether ``margin`` characters on each side of ``at`` are \\w, and stay \\w lowercased (lower() is local to
    each character but for sigma's form, which is \\w either way; 'İ' gains a mark, which is not). The window is cut
    there only if those on its left are its own (the caller keeps ``at - margin`` at or after the window's start)."""
    if at < margin or at + margin > len(text) or _NOT_WORD.search(text, at - margin, at + margin):
        return False
    return _NOT_WORD.search(text[at - margin : at + margin].lower()) is None


def _raw_tokens(text: str, word_max: int | None = None) -> Iterator[list[str]]:
    """fastembed's tokenizer, window by window: the \\w runs of the lowercased text, punctuation made spaces first."""
    for window in _windows(text, word_max):
        # The order matters: punctuation becomes " " before lower(), which then sees a final sigma before "."
        # as final, as fastembed does.
        yield _WORD.findall(_NOT_WORD_OR_SPACE.sub(" ", window).lower())


class Bm25:
    """BM25 sparse vectors, bit-identical to fastembed's ``Bm25("Qdrant/bm25")`` with the same settings.

    Arguments:
        language: Snowball stemmer and stopword list, one of ``LANGUAGES``.
        k: term-frequency saturation (k1).
        b: strength of the document-length normalisation, 0 (none) to 1 (full).
        avg_len: the average document length, in kept tokens, that ``b`` normalises against. 256 (fastembed's
            default) suits short passages; whole long documents need their own mean, chosen once per collection
            and kept (see the module docstring), since values made with different avg_len are not comparable.
        token_max_length: longer tokens are dropped (before stemming).
        stopwords: words dropped before stemming, lowercased and compared with the lowercased token; None: the
            shipped list of the language.
    """

    def __init__(
        self,
        language: str = "english",
        k: float = 1.2,
        b: float = 0.75,
        avg_len: float = DEFAULT_AVG_LEN,
        token_max_length: int = 40,
        stopwords: Iterable[str] | None = None,
    ) -> None:
        _check_language(language)
        k, b = _number("k", k), _number("b", b)
        if not (math.isfinite(k) and k > 0):
            raise ValueError(f"BM25 k must be a finite number > 0, got {k}")
        if not 0 <= b <= 1:
            raise ValueError(f"BM25 b must be in [0, 1], got {b}")
        if isinstance(token_max_length, bool) or not isinstance(token_max_length, int):
            raise TypeError(f"BM25 token_max_length must be an int, got {type(token_max_length).__name__}")
        if token_max_length < 1:
            raise ValueError(f"BM25 token_max_length must be >= 1, got {token_max_length}")
        if stopwords is None:
            words = load_stopwords(language)
        elif isinstance(stopwords, str):  # iterating a str would make each character a stopword
            raise TypeError("BM25 stopwords must be an iterable of words, not a str")
        else:
            words = frozenset(_check_text(word).lower() for word in stopwords)
        self.language = language
        self.k, self.b = k, b
        self.avg_len = _check_avg_len(avg_len)
        self.token_max_length = token_max_length
        self.stopwords: frozenset[str] = words
        self._stemmer = _stemmers.SnowballStemmer(language)  # stateless: shared by with_avg_len copies

    def __repr__(self) -> str:
        return (f"Bm25(language={self.language!r}, k={self.k}, b={self.b}, avg_len={self.avg_len}, "
                f"token_max_length={self.token_max_length}, stopwords={self.settings()['stopwords']})")

    def _stem(self, token: str) -> str:
        """A token's stem, or _DROPPED. fastembed's filters, in its order."""
        if len(token) == 1 and unicodedata.category(token).startswith("P"):
            return _DROPPED
        lower = token.lower()
        if lower in self.stopwords or len(token) > self.token_max_length:
            return _DROPPED
        return self._stemmer.stem_word(lower)

    def _stem_counts(self, text: str) -> tuple[dict[str, int], int]:
        """Occurrences per stem, in order of first occurrence, and the number of kept tokens."""
        counts: dict[str, int] = {}
        stems: dict[str, str] = {}  # token -> stem: each distinct token is stemmed once per call
        doc_len = 0
        for tokens in _raw_tokens(text, self.token_max_length):
            for token, n in Counter(tokens).items():  # Counter keeps first-occurrence order
                stem = stems.get(token)
                if stem is None:
                    stem = stems[token] = self._stem(token)
                if stem:
                    counts[stem] = counts.get(stem, 0) + n
                    doc_len += n
            del tokens  # else this window's tokens stay alive while the next window is tokenized
        return counts, doc_len

    def tokens(self, text: str) -> list[str]:
        """The kept, stemmed tokens in text order."""
        _check_text(text)
        stems: dict[str, str] = {}
        out: list[str] = []
        for tokens in _raw_tokens(text, self.token_max_length):
            for token in tokens:
                stem = stems.get(token)
                if stem is None:
                    stem = stems[token] = self._stem(token)
                if stem:
                    out.append(stem)
        return out

    def length(self, text: str) -> int:
        """Number of kept tokens, ``len(self.tokens(text))`` without holding them."""
        return self._stem_counts(_check_text(text))[1]

    def embed_document(self, text: str) -> SparseVector:
        counts, doc_len = self._stem_counts(_check_text(text))
        # fastembed's float operations in its order, so values are bit-equal; the length part is the same for every
        # stem and computed once.
        norm = self.k * (1 - self.b + self.b * doc_len / self.avg_len)
        values: dict[int, float] = {}
        for stem, tf in counts.items():
            value = tf * (self.k + 1)
            value /= tf + norm
            values[abs(_mmh3.hash(stem))] = value  # colliding ids: the later stem wins, as in fastembed
        return _sorted(values)

    def embed_documents(self, texts: Iterable[str]) -> list[SparseVector]:
        if isinstance(texts, str):  # iterating a str would embed its characters
            raise TypeError("embed_documents takes an iterable of texts, not a str; use embed_document")
        return [self.embed_document(text) for text in texts]

    def embed_query(self, text: str) -> SparseVector:
        """Every distinct token id with value 1.0: the query side of BM25 is the IDF, which Qdrant applies."""
        counts, _ = self._stem_counts(_check_text(text))
        return _sorted(dict.fromkeys((abs(_mmh3.hash(stem)) for stem in counts), 1.0))

    def why_no_terms(self, text: str) -> str:
        """Why ``embed_query(text)`` is empty, in words: no words at all, or what dropped the words it has (text
        without spaces, such as Chinese or Japanese, is one long BM25 word, dropped past ``token_max_length``)."""
        words = [token for tokens in _raw_tokens(_check_text(text)) for token in tokens]
        if not words:
            return "it holds no words, only punctuation and spaces" if text.strip() else "it is empty"
        stopwords = sum(w.lower() in self.stopwords for w in words)
        too_long = sum(len(w) > self.token_max_length and w.lower() not in self.stopwords for w in words)
        parts = [f"{stopwords} {self.language} stopword{'s' * (stopwords > 1)}"] if stopwords else []
        if too_long:
            parts.append(f"{too_long} longer than {self.token_max_length} characters (text without spaces between "
                         "words, such as Chinese or Japanese, is one BM25 word)")
        rest = len(words) - stopwords - too_long
        if rest:
            parts.append(f"{rest} with an empty stem or a lone punctuation mark")
        return "every word is dropped: " + ", ".join(parts)

    def with_avg_len(self, avg_len: float) -> Bm25:
        """The same settings with another average length; shares the stemmer and the stopwords."""
        other = copy.copy(self)
        other.avg_len = _check_avg_len(avg_len)
        return other

    def settings(self) -> dict:
        """JSON-able settings that determine the vectors; ``from_settings`` rebuilds the encoder from them."""
        return {
            "algorithm": "bm25",
            "language": self.language,
            "k": self.k,
            "b": self.b,
            "avg_len": self.avg_len,
            "token_max_length": self.token_max_length,
            "stopwords": _digest(self.stopwords),  # sha256[:16] of the sorted stopwords, one per line
        }

    @classmethod
    def from_settings(cls, settings: dict) -> Bm25:
        """The encoder ``settings()`` describes, with the shipped stopwords, which must still have the recorded digest
        (custom stopwords cannot be rebuilt from a digest)."""
        expected = {"algorithm", "language", "k", "b", "avg_len", "token_max_length", "stopwords"}
        if not isinstance(settings, dict) or set(settings) != expected:
            keys = sorted(settings) if isinstance(settings, dict) else type(settings).__name__
            raise ValueError(f"BM25 settings must have exactly the keys {sorted(expected)}, got {keys}")
        if settings["algorithm"] != "bm25":
            raise ValueError(f"not BM25 settings: algorithm {settings['algorithm']!r}")
        bm25 = cls(language=settings["language"], k=settings["k"], b=settings["b"], avg_len=settings["avg_len"],
                   token_max_length=settings["token_max_length"])
        shipped = bm25.settings()["stopwords"]
        if settings["stopwords"] != shipped:
            raise ValueError(
                f"BM25 stopwords digest {settings['stopwords']!r} is not that of the {settings['language']} list "
                f"shipped with this recemb ({shipped!r}): the vectors were made with other stopwords and would not "
                "match")
        return bm25


def _sorted(values: dict[int, float]) -> SparseVector:
    indices = tuple(sorted(values))
    return SparseVector(indices, tuple(values[i] for i in indices))
