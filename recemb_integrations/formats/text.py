"""What every reader shares: the error a file that cannot be read raises, UTF-8 decoding, one-line messages and
the light tidying of extracted text."""

from __future__ import annotations

import re

__all__ = ["ExtractionError", "decode_utf8", "one_line", "tidy"]


class ExtractionError(ValueError):
    """A file whose text cannot be extracted; the message says what failed and what to do, in one line."""


def decode_utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ExtractionError(f"not valid UTF-8 (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                              "convert it to UTF-8") from None


def one_line(error: object, limit: int = 200) -> str:
    """A library's message, on one line and short: it goes into a one-line report."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


_BLANK_RUNS = re.compile(r"\n{3,}")
_SOFT_HYPHEN_AT_BREAK = re.compile("\xad\n")


def tidy(text: str) -> str:
    """Light normalisation of extracted text: NULs removed, every kind of line break made "\\n", no trailing
    spaces, at most one blank line in a row, soft hyphens (invisible by definition) removed."""
    text = text.replace("\x00", "")
    text = "\n".join(line.rstrip() for line in text.splitlines())
    # a soft hyphen at a line break joins the two halves of a word; anywhere else it is just invisible
    text = _SOFT_HYPHEN_AT_BREAK.sub("", text).replace("\xad", "")
    return _BLANK_RUNS.sub("\n\n", text).strip("\n")
