"""Text from files and stores, made safe to print on a terminal.

A file name, a document id or a document's text may hold control characters: an ANSI escape sequence in a name
(``\\x1b[2J`` clears the screen), a newline in an id (one entry read as two lines), a right-to-left override that
shows a name reversed. Human-readable output prints such text escaped, as ``ls --quoting-style=escape`` does: C
escapes for the common controls (``\\n``, ``\\t``, ...), ``\\xHH`` / ``\\uHHHH`` for the others and a doubled
backslash, so every printed name is one line and reads back unambiguously. Machine-readable output (``--json``) is
never escaped: JSON has its own escapes and carries the exact text.
"""

from __future__ import annotations

import re

__all__ = ["escape", "escape_controls"]

_NAMED = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r"}
# C0 and C1 controls, DEL, and the bidirectional embeddings, overrides and isolates (they reorder what follows).
_CONTROLS = "\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[{_CONTROLS}]")
_CONTROL_OR_BACKSLASH = re.compile(f"[{_CONTROLS}\\\\]")


def _code(match: re.Match) -> str:
    c = match.group()
    if c == "\\":
        return "\\\\"
    if c in _NAMED:
        return _NAMED[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def escape(text: str) -> str:
    """A name or id for one line of output: controls escaped, backslashes doubled (so the escapes are unambiguous)."""
    return _CONTROL_OR_BACKSLASH.sub(_code, text)


def escape_controls(text: str) -> str:
    """A message or an excerpt of text for the terminal: controls escaped, everything else (backslashes included,
    e.g. in a ``repr`` that already escaped its own) as it is."""
    return _CONTROL.sub(_code, text)
