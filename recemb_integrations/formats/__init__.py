"""Text extraction for the files ``recemb sync`` reads: plain text, PDF, HTML and DOCX.

Plain-text suffixes (``TEXT_SUFFIXES``) are decoded as UTF-8 and otherwise left untouched, so that the
text of documents already stored does not change. The other formats need the optional ``formats`` extra
(``bash scripts/install.sh formats``); their libraries are imported only when a file of that format is read.
The extracted text is meant for search, not for display: paragraphs come out as blocks separated by one
blank line, in reading (document) order.

Why these libraries:

- PDF: ``pypdfium2`` (Apache-2.0 / BSD-3-Clause) binds PDFium, Chromium's PDF engine, in self-contained
  wheels (no compiler, no system library); it is about 13x faster than pure-Python pypdf on a 36-page manual
  and recovers damaged files the way a browser does. Its text keeps reading order line by line, marks
  end-of-line hyphens so that split words are joined again ("man-/agement" -> "management", which keyword
  search needs), and it opens "encrypted, empty password" PDFs without a cryptography package.
- DOCX: ``python-docx`` (MIT), the standard pure-Python reader of Word files (over lxml), opens the package;
  the text is read from its XML here because ``Paragraph.text`` skips tracked insertions, content controls and
  text boxes, which are main content. Paragraphs and table rows (one line, cells joined by " | ") come out in
  document order.
- HTML: ``lxml`` (BSD-3-Clause, wheels) is already required by python-docx, so HTML adds no dependency; its
  libxml2 parser is fast and forgiving. The tree is walked here: block elements become paragraphs, ``<title>``
  the first line, and only what is never content is dropped (``<script>``, ``<style>``, ``<noscript>``,
  ``<template>``, ``<nav>``, widgets); boilerplate removers (trafilatura, readability) were not chosen because
  they guess the article and silently drop main content when they guess wrong.
"""

from __future__ import annotations

import importlib
import io
import os
from pathlib import Path
from types import ModuleType

from recemb_integrations._imports import extra_hint
from recemb_integrations.formats.docx_text import docx_text
from recemb_integrations.formats.html_text import html_text, html_title, parse_html
from recemb_integrations.formats.pdf_text import PAGE_SEPARATOR, PDFIUM_LOCK, pdf_pages, pdf_text
from recemb_integrations.formats.text import ExtractionError, decode_utf8, one_line

__all__ = ["DOCUMENT_SUFFIXES", "ExtractionError", "FORMAT_SUFFIXES", "TEXT_SUFFIXES", "extract_text",
    "extractor_available", "metadata_for", "pdf_page_starts"]

TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst")
FORMAT_SUFFIXES: dict[str, str] = {
    ".pdf": "PDF",
    ".html": "HTML",
    ".htm": "HTML",
    ".xhtml": "HTML",
    ".docx": "DOCX",
}
DOCUMENT_SUFFIXES = TEXT_SUFFIXES + tuple(FORMAT_SUFFIXES)

# The module each format imports; tests simulate a missing extra by blocking these names.
_LIBRARY = {"PDF": "pypdfium2", "HTML": "lxml.html", "DOCX": "docx"}
_EXTRA_HINT = extra_hint("formats")


def extract_text(path: str | os.PathLike) -> str:
    """The text of one document, chosen by its suffix (case-insensitive).

    Raises ExtractionError for an unknown suffix, a file that is not valid in its format, or a missing
    optional library; an OSError from reading the file propagates unchanged."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return decode_utf8(path.read_bytes())
    fmt = FORMAT_SUFFIXES.get(suffix)
    if fmt is None:
        raise ExtractionError(f"no text extractor for {_describe(suffix)} files; the supported suffixes are "
                              f"{', '.join(DOCUMENT_SUFFIXES)}")
    library = _import_library(fmt, suffix)  # before reading: a missing extra is the more useful message
    raw = path.read_bytes()  # read here so that an OSError is the caller's "cannot read", whatever the format
    if fmt == "PDF":
        return pdf_text(library, raw)
    if fmt == "DOCX":
        return docx_text(library, raw)
    return html_text(library, raw)


def extractor_available(suffix: str) -> bool:
    """Whether files with this suffix (".pdf" or "pdf", any case) can be read now: always for the plain-text
    suffixes, for the others whether their library imports."""
    suffix = suffix.lower() if suffix.startswith(".") else "." + suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return True
    fmt = FORMAT_SUFFIXES.get(suffix)
    if fmt is None:
        return False
    try:
        _import_library(fmt, suffix)
    except ExtractionError:
        return False
    return True


def metadata_for(path: str | os.PathLike) -> dict:
    """Best-effort facts about a document for its payload: ``format`` always, ``title`` where the file
    declares one (PDF metadata, HTML ``<title>``, DOCX core properties), ``pages`` for a PDF.

    Never raises for a file that cannot be parsed or a missing library (extract_text reports those); an
    OSError from reading propagates."""
    path = Path(path)
    suffix = path.suffix.lower()
    fmt = "text" if suffix in TEXT_SUFFIXES else FORMAT_SUFFIXES.get(suffix)
    if fmt is None or fmt == "text":
        return {"format": fmt or "unknown"}
    meta: dict = {"format": fmt}
    try:
        library = _import_library(fmt, suffix)
    except ExtractionError:
        return meta
    raw = path.read_bytes()
    try:
        if fmt == "PDF":
            with PDFIUM_LOCK:
                document = library.PdfDocument(raw)
                try:
                    meta["pages"] = len(document)
                    title = document.get_metadata_value("Title")
                finally:
                    document.close()
        elif fmt == "DOCX":
            title = library.Document(io.BytesIO(raw)).core_properties.title
        else:
            root = parse_html(library, raw)
            title = html_title(root) if root is not None else ""
    except Exception:  # metadata is optional: a damaged file is reported by extract_text, not here
        return meta
    title = " ".join((title or "").split())
    if title:
        meta["title"] = title
    return meta


def pdf_page_starts(path: str | os.PathLike) -> list[tuple[int, int]]:
    """Where each page's text starts in ``extract_text(path)`` of a PDF: (page number from 1, offset in that text),
    ascending, for the pages that add text (blank and scanned pages add none and are left out). The text at an
    offset is what that page holds: both come from one reading of the pages.

    Raises ExtractionError for a file that is not a PDF (by its suffix) and as ``extract_text`` does; an OSError
    from reading the file propagates unchanged."""
    path = Path(path)
    suffix = path.suffix.lower()
    if FORMAT_SUFFIXES.get(suffix) != "PDF":
        raise ExtractionError(f"page starts are read from PDF files, not {_describe(suffix)} files")
    library = _import_library("PDF", suffix)
    starts, offset = [], 0
    for number, text in pdf_pages(library, path.read_bytes()):
        starts.append((number, offset))
        offset += len(text) + len(PAGE_SEPARATOR)
    return starts


# ---------------------------------------------------------------------- shared helpers
def _describe(suffix: str) -> str:
    return f"'{suffix}'" if suffix else "suffix-less"


def _import_library(fmt: str, suffix: str) -> ModuleType:
    try:
        return importlib.import_module(_LIBRARY[fmt])
    except ImportError as e:
        raise ExtractionError(f"reading {suffix} files needs the 'formats' extra ({_EXTRA_HINT})") from e
    except OSError as e:  # installed but its native part does not load (a broken or foreign-platform wheel)
        raise ExtractionError(f"reading {suffix} files needs the 'formats' extra, which did not load "
                              f"({one_line(e)}); reinstall it ({_EXTRA_HINT})") from e
