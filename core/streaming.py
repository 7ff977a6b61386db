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
    """

    def __init__(self, pieces: Iterable[list[int]], eos_token_id: int, max_length: int | None = None,
                 notes: list[str] | None = None):
        self._pieces = pieces
        self.eos_token_id = eos_token_id
        self.max_length = max_length
        self.notes = notes if notes is not None else []
        self.tokens = 0  # yielded so far
        self.truncated = False
        self.done = False

    def __iter__(self) -> Iterator[list[int]]:
        if self.done or self.tokens:
            raise RuntimeError("a TokenStream can be consumed only once")
        limit = self.max_length
        held: list[int] = []  # tokens past limit - 1: yielded only if the text ends within the limit
        pieces = iter(self._pieces)
        while True:
            try:
                piece = next(pieces)
            except StopIteration:
                break
            except Exception as e:  # the tokenizer's own failure, named as such
                raise TokenizationError(f"tokenization failed: {e}") from e
            if limit is None:
                self.tokens += len(piece)
                yield piece
                continue
            room = limit - 1 - self.tokens
            if room > 0:
                head, piece = piece[:room], piece[room:]
                self.tokens += len(head)
                if head:
                    yield head
            held += piece
            if len(held) > 1:  # more than EOS follows: the text is longer than the limit
                self.truncated = True
                break
        if held:
            last = [self.eos_token_id] if self.truncated else held
            self.tokens += len(last)
            yield last
        self.done = True
