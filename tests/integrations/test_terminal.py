"""Names and text printed on a terminal: every control escaped, one line each, readable back unambiguously."""

import pytest

from recemb_integrations.terminal import escape, escape_controls


@pytest.mark.parametrize("raw, shown", [
    ("plain name.md", "plain name.md"),
    ("\x1b[2Jclear.md", "\\x1b[2Jclear.md"),
    ("new\nline.md", "new\\nline.md"),
    ("tab\there\r", "tab\\there\\r"),
    ("back\\slash", "back\\\\slash"),
    ("bell\x07 del\x7f c1\x9b", "bell\\a del\\x7f c1\\x9b"),
    ("evil\u202egnp.md", "evil\\u202egnp.md"),  # a right-to-left override shows "md.png" reversed
    ("café 中文 😀", "café 中文 😀"),
])
def test_escape(raw, shown):
    assert escape(raw) == shown
    assert "\n" not in escape(raw) and "\x1b" not in escape(raw)


def test_escape_controls_keeps_backslashes():
    """Messages may hold a repr, which escaped its own backslashes already."""
    assert escape_controls("id 'a\\\\b' \x1b[31m\n") == "id 'a\\\\b' \\x1b[31m\\n"


def test_escapes_read_back():
    for raw in ("a\\nb", "a\nb", "a\\\nb", "\\x1b", "\x1b"):
        shown = escape(raw)
        assert shown.encode().decode("unicode_escape") == raw
