"""One text's token ids as a stream of bounded pieces, truncated exactly as ``Embedder.tokenize`` truncates."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["TokenStream", "TokenizationError"]


class TokenizationError(RuntimeError):
    """The tokenizer failed on a text (raised from inside a stream, so callers can tell it from model errors)."""


class TokenStream:
    """Iterate over the pieces of one text's ids; ``tokens`` and ``truncated`` describe what was yielded, ``notes``
    what the tokenizer had to do to keep memory bounded (``TextTokenizer.encode_stream``), once consumed.

    Truncation keeps the first ``max_length - 1`` tokens and ends with EOS, like ``Embedder.tokenize``; a text
    that fits is yielded unchanged. Once truncation is certain the tokenizer is not run on the rest of the text.
    A stream is consumed once.

    ``spans``: pieces are ``(ids, spans)`` pairs (``TextTokenizer.encode_stream(..., offsets=True)``) and so are
    the pieces yielded, spans cut exactly where ids are; the EOS that ends a truncated stream has span None.
    """

    def __init__(self, pieces: Iterable, eos_token_id: int, max_length: int | None = None,
                 notes: list[str] | None = None, spans: bool = False):
        self._pieces = pieces
        self.eos_token_id = eos_token_id
        self.max_length = max_length
        self.notes = notes if notes is not None else []
        self.spans = spans
        self.tokens = 0  # yielded so far
        self.truncated = False
        self.done = False

    def __iter__(self) -> Iterator:
        if self.done or self.tokens:
            raise RuntimeError("a TokenStream can be consumed only once")
        limit = self.max_length
        # A piece as parallel columns, (ids,) or (ids, spans), so that one rule cuts both.
        held: tuple[list, ...] = ([], []) if self.spans else ([],)  # past limit - 1: yielded only if the text ends
        pieces = iter(self._pieces)
        while True:
            try:
                piece = next(pieces)
            except StopIteration:
                break
            except Exception as e:  # the tokenizer's own failure, named as such
                raise TokenizationError(f"tokenization failed: {e}") from e
            columns = self._columns(piece)
            if limit is None:
                self.tokens += len(columns[0])
                yield piece
                continue
            room = limit - 1 - self.tokens
            if room > 0:
                head, columns = tuple(c[:room] for c in columns), tuple(c[room:] for c in columns)
                self.tokens += len(head[0])
                if head[0]:
                    yield self._as_piece(head)
            held = tuple(h + list(c) for h, c in zip(held, columns))
            if len(held[0]) > 1:  # more than EOS follows: the text is longer than the limit
                self.truncated = True
                break
        if held[0]:
            if self.truncated:
                held = ([self.eos_token_id], [None]) if self.spans else ([self.eos_token_id],)
            self.tokens += len(held[0])
            yield self._as_piece(held)
        self.done = True

    def _columns(self, piece) -> tuple[list, ...]:
        if not self.spans:
            return (piece,)
        ids, spans = piece
        if len(ids) != len(spans):
            raise ValueError(f"a piece of {len(ids)} ids came with {len(spans)} spans")
        return ids, spans

    def _as_piece(self, columns: tuple[list, ...]):
        return (columns[0], columns[1]) if self.spans else columns[0]
