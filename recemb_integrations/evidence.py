"""A hit's original text and where it is: what ``recemb search`` shows under a hit (``EvidenceReader.of``: the text
around the passage that matched, one line) and what the framework stores return (``EvidenceReader.original``: the
passage's own characters, ``text[start:end]``, or the document's whole text, with its line or page). The text comes
from the collection where it stores texts, else from the file the document was synced from, if it has not changed
since (its content hash still matches); where it cannot, the note says why: the file was deleted (or moved away),
changed, or cannot be read. Never a decode of token ids."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recemb_integrations.excerpts import excerpt, line_number, page_number, position
from recemb_integrations.formats import FORMAT_SUFFIXES, ExtractionError, pdf_page_starts
from recemb_integrations.sources import RecordedFile, read_recorded

__all__ = ["Evidence", "EvidenceReader", "Original"]

EXCERPT_CHARS = 300  # about three lines of a terminal


@dataclass(frozen=True)
class Evidence:
    """``excerpt``: the original text, one line; ``position``: where it is ("line 14", "page 3", "characters
    1,045-1,610"); ``note``: why the original text is not shown (or not all of it), where it is not."""

    excerpt: str | None
    position: str | None
    note: str | None = None

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in (("excerpt", self.excerpt), ("position", self.position), ("note", self.note))
                if v is not None}


@dataclass(frozen=True)
class Original:
    """A hit's own text: a passage hit's characters ``text[start:end]``, a document hit's whole text; None where it
    is neither stored nor on an unchanged file (``note`` says why). ``line`` (text files) or ``page`` (PDF): where
    the passage (a document hit's best passage, else its beginning) starts, where the document's text is at hand."""

    text: str | None
    line: int | None = None
    page: int | None = None
    note: str | None = None


class EvidenceReader:
    """Evidence of hits, each file read at most once (several hits may come from one document)."""

    def __init__(self, width: int = EXCERPT_CHARS):
        self.width = width
        self._files: dict[tuple[str, str], RecordedFile] = {}
        self._pages: dict[str, list[tuple[int, int]] | None] = {}

    def of(self, hit: Any) -> Evidence:
        span = hit.span
        passage_text = hit.text if hit.passage is not None else hit.best_passage_text
        if (hit.passage is not None or hit.best_passage is not None) and span is None:
            return Evidence(excerpt(passage_text, 0, len(passage_text), self.width) if passage_text else None, None,
                            "this passage was written before recemb recorded where passages are: its text is decoded "
                            "from its tokens (lower-cased, spaced) where stored; `recemb sync --rebuild` records them")
        path = hit.metadata.get("path") if isinstance(hit.metadata, dict) else None
        path = path if isinstance(path, str) and path else None
        kind = FORMAT_SUFFIXES.get(Path(path).suffix.lower(), "text") if path else _kind(hit.metadata)
        start, end = span if span is not None else (0, 0)  # no passage: the document's beginning
        text = hit.text if hit.passage is None else None  # the document's own text, where the collection keeps it
        recorded = self._file(path, hit.content_hash) if path and hit.content_hash else None
        on_file = recorded.text if recorded is not None else None
        text = text if text is not None else on_file
        if text is not None:
            pages = self._page_starts(path) if kind == "PDF" and on_file is not None else None
            return Evidence(excerpt(text, start, end, self.width), position(kind, text, start, pages))
        where = f"characters {start + 1:,}-{end:,}" if span is not None else None
        if passage_text is not None:  # the passage is stored, its document's text is not at hand
            return Evidence(excerpt(passage_text, 0, len(passage_text), self.width), where)
        return Evidence(None, where, "the text is not stored in the collection (sync with --store-text to keep it) "
                                     f"and {_why_not_on_file(path, recorded)}")

    def original(self, hit: Any, document_text: str | None = None) -> Original:
        """The hit's own text and its line or page (see ``Original``); ``document_text``: the document's whole text
        where the caller has it (a collection that stores texts, fetched by id)."""
        span = hit.span
        passage_hit = hit.passage is not None
        path = hit.metadata.get("path") if isinstance(hit.metadata, dict) else None
        path = path if isinstance(path, str) and path else None
        kind = FORMAT_SUFFIXES.get(Path(path).suffix.lower(), "text") if path else _kind(hit.metadata)
        whole = document_text if document_text is not None else (None if passage_hit else hit.text)
        recorded = None
        if whole is None and path and hit.content_hash:
            recorded = self._file(path, hit.content_hash)
            whole = recorded.text
        start = span[0] if span is not None else 0
        line = page = None
        if whole is not None:
            if kind == "PDF" and path:
                page = page_number(self._page_starts(path) or [], start) if self._page_starts(path) else None
            else:
                line = line_number(whole, start)
        if passage_hit:
            if hit.text is not None:  # stored: the passage's own characters, as the sync cut them
                return Original(hit.text, line, page)
            if whole is not None and span is not None:
                return Original(whole[span[0]:span[1]], line, page)
        elif whole is not None:
            return Original(whole, line, page)
        return Original(None, line, page, "the text is not stored in the collection and "
                        + _why_not_on_file(path, recorded))

    def _file(self, path: str, content_hash: str) -> RecordedFile:
        key = (path, content_hash)
        if key not in self._files:
            self._files[key] = read_recorded(path, content_hash)
        return self._files[key]

    def _page_starts(self, path: str) -> list[tuple[int, int]] | None:
        if path not in self._pages:
            try:
                self._pages[path] = pdf_page_starts(path)
            except (OSError, ExtractionError):
                self._pages[path] = None
        return self._pages[path]


def _kind(metadata: Any) -> str:
    """A document's format from its metadata when no path is recorded (a document given through the API)."""
    suffix = metadata.get("suffix") if isinstance(metadata, dict) else None
    return FORMAT_SUFFIXES.get(suffix, "text") if isinstance(suffix, str) else "text"


def _why_not_on_file(path: str | None, recorded: RecordedFile | None) -> str:
    """Why the synced text cannot be read from the document's file."""
    if not path:
        return "it was not synced from a file"
    if recorded is None:  # no content hash recorded: the file cannot be matched with what was synced
        return "its file cannot be matched with the synced text"
    if recorded.state == "deleted":
        return (f"its file was deleted since the sync (nothing is at {path}); a sync of its folder removes it from "
                "the collection")
    if recorded.state == "changed":
        return "its file has changed since the sync; a sync re-embeds it"
    return f"its file can no longer be read ({recorded.why})"
