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

import codecs
import importlib
import io
import os
import re
import threading
from pathlib import Path
from types import ModuleType

from recemb_integrations._imports import extra_hint

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


class ExtractionError(ValueError):
    """A file whose text cannot be extracted; the message says what failed and what to do, in one line."""


def extract_text(path: str | os.PathLike) -> str:
    """The text of one document, chosen by its suffix (case-insensitive).

    Raises ExtractionError for an unknown suffix, a file that is not valid in its format, or a missing
    optional library; an OSError from reading the file propagates unchanged."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return _decode_utf8(path.read_bytes())
    fmt = FORMAT_SUFFIXES.get(suffix)
    if fmt is None:
        raise ExtractionError(f"no text extractor for {_describe(suffix)} files; the supported suffixes are "
                              f"{', '.join(DOCUMENT_SUFFIXES)}")
    library = _import_library(fmt, suffix)  # before reading: a missing extra is the more useful message
    raw = path.read_bytes()  # read here so that an OSError is the caller's "cannot read", whatever the format
    if fmt == "PDF":
        return _pdf_text(library, raw)
    if fmt == "DOCX":
        return _docx_text(library, raw)
    return _html_text(library, raw)


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
            with _PDFIUM_LOCK:
                document = library.PdfDocument(raw)
                try:
                    meta["pages"] = len(document)
                    title = document.get_metadata_value("Title")
                finally:
                    document.close()
        elif fmt == "DOCX":
            title = library.Document(io.BytesIO(raw)).core_properties.title
        else:
            root = _parse_html(library, raw)
            title = _html_title(root) if root is not None else ""
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
    for number, text in _pdf_pages(library, path.read_bytes()):
        starts.append((number, offset))
        offset += len(text) + len(_PAGE_SEPARATOR)
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
                              f"({_one_line(e)}); reinstall it ({_EXTRA_HINT})") from e


def _decode_utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ExtractionError(f"not valid UTF-8 (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                              "convert it to UTF-8") from None


def _one_line(error: object, limit: int = 200) -> str:
    """A library's message, on one line and short: it goes into a one-line report."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


_BLANK_RUNS = re.compile(r"\n{3,}")
_SOFT_HYPHEN_AT_BREAK = re.compile("\xad\n")


def _tidy(text: str) -> str:
    """Light normalisation of extracted text: NULs removed, every kind of line break made "\\n", no trailing
    spaces, at most one blank line in a row, soft hyphens (invisible by definition) removed."""
    text = text.replace("\x00", "")
    text = "\n".join(line.rstrip() for line in text.splitlines())
    # a soft hyphen at a line break joins the two halves of a word; anywhere else it is just invisible
    text = _SOFT_HYPHEN_AT_BREAK.sub("", text).replace("\xad", "")
    return _BLANK_RUNS.sub("\n\n", text).strip("\n")


# ---------------------------------------------------------------------- PDF
# PDFium is not thread-safe; one lock keeps concurrent callers (a thread pool in a caller) correct.
_PDFIUM_LOCK = threading.Lock()
# PDFium replaces a hyphen that breaks a word at a line end by one of these (and drops the line break);
# removing them rejoins the word, which is what a search for it needs.
_PDFIUM_LINE_END_HYPHENS = str.maketrans("", "", "\x02\ufffe")
# Between the texts of two pages in extract_text (and so in pdf_page_starts' offsets).
_PAGE_SEPARATOR = "\n\n"


def _pdf_text(pdfium: ModuleType, raw: bytes) -> str:
    return _PAGE_SEPARATOR.join(text for _, text in _pdf_pages(pdfium, raw))


def _pdf_pages(pdfium: ModuleType, raw: bytes) -> list[tuple[int, str]]:
    """(page number from 1, tidied text) of each page with text, in order: the one source of ``extract_text``'s PDF
    text and of ``pdf_page_starts``, so the two cannot disagree."""
    with _PDFIUM_LOCK:
        try:
            document = pdfium.PdfDocument(raw)
        except pdfium.PdfiumError as e:
            raise ExtractionError(_pdf_open_failure(e)) from e
        try:
            pages = []
            for index in range(len(document)):
                page = document[index]
                textpage = page.get_textpage()
                # get_text_bounded covers all of Unicode (get_text_range stops at UCS-2)
                pages.append(textpage.get_text_bounded().translate(_PDFIUM_LINE_END_HYPHENS))
                textpage.close()
                page.close()
        except pdfium.PdfiumError as e:
            raise ExtractionError(f"cannot read the text of this PDF ({_one_line(e)}); open it in a PDF "
                                  "viewer and save or print a new copy to sync it") from e
        finally:
            document.close()
    # an empty page (a blank or scanned one) adds nothing, not an extra blank line
    tidied = ((number, _tidy(text)) for number, text in enumerate(pages, 1))
    return [(number, text) for number, text in tidied if text]


def _pdf_open_failure(error: Exception) -> str:
    reason = _one_line(error)
    if "password" in reason.lower():
        return "this PDF is password-protected; save a copy without a password to sync it"
    return (f"not a readable PDF ({reason}); check that the file is a complete, undamaged PDF (open it in a "
            "PDF viewer and save a new copy)")


# ---------------------------------------------------------------------- DOCX
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
# Parts of a run whose text is not in the document as it reads: deleted or moved-away revisions, and
# Markup Compatibility fallbacks (an old-format copy of a text box next to the new one: its text twice).
_DOCX_SKIPPED = {_W + "del", _W + "moveFrom", _MC_FALLBACK, _W + "instrText", _W + "delText"}
_DOCX_INLINE = {_W + "t": None, _W + "tab": "\t", _W + "br": "\n", _W + "cr": "\n", _W + "noBreakHyphen": "-",
                _W + "softHyphen": "\xad"}


def _docx_text(docx: ModuleType, raw: bytes) -> str:
    import zipfile

    try:
        body = docx.Document(io.BytesIO(raw)).element.body
    except zipfile.BadZipFile:
        raise ExtractionError("not a valid .docx file (not a ZIP archive); save it again as .docx from a "
                              "word processor") from None
    except Exception as e:  # python-docx raises KeyError, ValueError, lxml errors, ... for damaged packages
        raise ExtractionError(f"not a readable .docx file ({type(e).__name__}: {_one_line(e)}); save it "
                              "again as .docx from a word processor") from e
    blocks: list[str] = []
    _docx_blocks(body, blocks)
    return _tidy("\n\n".join(blocks))


def _docx_blocks(container, blocks: list[str]) -> None:
    """Paragraphs and table rows under a body, cell, text box or content control, in document order."""
    for child in container:
        tag = child.tag
        if tag == _W + "p":
            boxes: list[str] = []
            text = _docx_paragraph(child, boxes)
            if text.strip():
                blocks.append(text)
            blocks.extend(boxes)
        elif tag == _W + "tbl":
            for row in child.iter(_W + "tr"):
                if _nearest_table(row) is child:  # rows of nested tables are read inside their cell
                    line = _docx_row(row)
                    if line:
                        blocks.append(line)
        elif tag in _DOCX_SKIPPED or tag == _W + "sectPr":
            continue
        elif isinstance(tag, str):  # content controls, custom XML, ...: wrappers of more paragraphs
            _docx_blocks(child, blocks)


def _nearest_table(element):
    parent = element.getparent()
    while parent is not None and parent.tag != _W + "tbl":
        parent = parent.getparent()
    return parent


def _docx_row(row) -> str:
    table = _nearest_table(row)
    cells = []
    for cell in row.iter(_W + "tc"):
        if _nearest_table(cell) is not table:
            continue  # a cell of a table nested in one of this row's cells: read with that cell
        properties = cell.find(_W + "tcPr")
        merge = properties.find(_W + "vMerge") if properties is not None else None
        if merge is not None and merge.get(_W + "val", "continue") == "continue":
            continue  # the lower part of a vertically merged cell: its text is in the row above
        parts: list[str] = []
        _docx_blocks(cell, parts)
        text = " ".join(" ".join(p.split()) for p in parts)
        if text:
            cells.append(text)
    return " | ".join(cells)


def _docx_paragraph(paragraph, boxes: list[str]) -> str:
    """The text of one paragraph; paragraphs of text boxes anchored in it go to ``boxes``."""
    out: list[str] = []
    stack = [iter(paragraph)]
    while stack:  # iterative: deeply nested markup must not hit the recursion limit
        element = next(stack[-1], None)
        if element is None:
            stack.pop()
            continue
        tag = element.tag
        if tag in _DOCX_SKIPPED or not isinstance(tag, str):
            continue
        if tag in _DOCX_INLINE:
            out.append((element.text or "") if tag == _W + "t" else _DOCX_INLINE[tag])
        elif tag == _W + "txbxContent":
            _docx_blocks(element, boxes)
        else:
            stack.append(iter(element))
    return "".join(out)


# ---------------------------------------------------------------------- HTML
_DROPPED_TAGS = frozenset({
    "script", "style", "noscript", "template", "nav",  # code, styling and navigation: never content
    "head",  # meta, link, base: the <title> is read on its own
    "svg", "canvas", "iframe", "object", "embed", "select", "datalist", "button",  # widgets
})
_BLOCK_TAGS = frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details", "dialog",
    "dir", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4",
    "h5", "h6", "header", "hgroup", "hr", "html", "legend", "li", "main", "menu", "ol", "p", "section",
    "summary", "table", "ul", "frameset", "noframes", "search", "textarea",
})
_CHARSET_LABEL = re.compile(
    rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:+-]+)|<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9_.:+-]+)""",
    re.IGNORECASE,
)
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*>")
# Labels that browsers read differently from Python's codec of the same name (the WHATWG Encoding Standard):
# pages labelled Latin-1 or ASCII are in practice windows-1252, GB2312 pages use GBK/GB18030 characters.
_BROWSER_CODECS = {"latin-1": "cp1252", "iso8859-1": "cp1252", "ascii": "cp1252", "gb2312": "gb18030",
                   "gbk": "gb18030", "utf-16-le": "utf-8", "utf-16-be": "utf-8", "utf-16": "utf-8"}


def _html_encoding(raw: bytes) -> tuple[str, int]:
    """(codec, length of the byte-order mark) for an HTML file: a BOM first, then a ``<meta>`` charset or an
    XML declaration in the first 4 KiB, else UTF-8."""
    for bom, codec in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
                       (codecs.BOM_UTF16_BE, "utf-16-be")):
        if raw.startswith(bom):
            return codec, len(bom)
    match = _CHARSET_LABEL.search(raw[:4096])
    if match:
        label = (match.group(1) or match.group(2)).decode("ascii")
        try:
            name = codecs.lookup(label).name
        except LookupError:  # an unknown label: UTF-8, the most likely truth
            return "utf-8", 0
        # a UTF-16 label without a BOM is wrong by construction (the bytes it was found in are ASCII)
        return _BROWSER_CODECS.get(name, name), 0
    return "utf-8", 0


def _parse_html(lxml_html: ModuleType, raw: bytes):
    """The root element, or None for a document with no elements at all."""
    from lxml import etree

    codec, bom = _html_encoding(raw)
    text = raw[bom:].decode(codec, errors="replace").replace("\x00", "")
    text = _XML_DECLARATION.sub("", text)  # an XHTML prolog: its encoding was honoured above
    # Handed over as UTF-8 with the encoding stated, so that libxml2 does not re-read a <meta> charset.
    parser = lxml_html.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True, no_network=True,
                                  default_doctype=False)
    return etree.fromstring(text.encode("utf-8"), parser=parser)


def _html_title(root) -> str:
    for title in root.iter("title"):
        if not any(a.tag == "svg" for a in title.iterancestors()):  # an SVG's <title> is a tooltip
            return " ".join("".join(title.itertext()).split())
    return ""


def _html_text(lxml_html: ModuleType, raw: bytes) -> str:
    try:
        root = _parse_html(lxml_html, raw)
    except Exception as e:  # libxml2 recovers from almost anything; this is a last resort
        raise ExtractionError(f"cannot parse this HTML file ({_one_line(e)}); check that it is HTML") from e
    if root is None:
        return ""
    walker = _HtmlTextWalker()
    walker.walk(root)
    title = _html_title(root)
    return _tidy("\n\n".join(([title] if title else []) + walker.blocks))


class _HtmlTextWalker:
    """Block elements become paragraphs, ``<br>`` a line break, a table row one line with ``" | "`` between
    cells; whitespace collapses as a browser collapses it, except inside ``<pre>``."""

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.paragraph: list[str] = []  # fragments; "\n" stands for a <br>
        # open table rows and cells (tables nest), each with the element that opened it: a stray <td> outside
        # a row must not close its enclosing cell
        self.rows: list[tuple[object, list[str]]] = []
        self.cells: list[tuple[object, list[str]]] = []

    def walk(self, root) -> None:
        from lxml import etree

        events = etree.iterwalk(root, events=("start", "end"))
        for event, element in events:
            tag = element.tag if isinstance(element.tag, str) else ""
            tag = tag.rpartition("}")[2].lower()  # XHTML parsed as HTML may keep a namespace
            skipped = tag in _DROPPED_TAGS or tag == "title" or element.get("role") == "navigation"
            if event == "start":
                if skipped:
                    events.skip_subtree()
                elif tag == "pre":
                    self.pre("".join(element.itertext()))
                    events.skip_subtree()
                else:
                    self.open(tag, element)
            else:
                if not (skipped or tag == "pre"):
                    self.close(tag, element)
                if element.tail:
                    self.add(element.tail)
        self.block_break()

    def add(self, text: str) -> None:
        (self.cells[-1][1] if self.cells else self.paragraph).append(text)

    def open(self, tag: str, element) -> None:
        if tag == "tr":
            self.block_break()
            self.rows.append((element, []))
        elif tag in ("td", "th") and self.rows and self._in_open_row(element):
            self.cells.append((element, []))
        elif tag in _BLOCK_TAGS or tag in ("td", "th"):  # a cell outside any row reads as a block
            self.block_break()
        elif tag == "br":
            self.add("\n")
        if element.text:
            self.add(element.text)

    def _in_open_row(self, cell) -> bool:
        """Whether the cell belongs to the innermost open row, not to a nested table that has no row."""
        return next(cell.iterancestors("tr", "table"), None) is self.rows[-1][0]

    def close(self, tag: str, element) -> None:
        if self.rows and self.rows[-1][0] is element:
            line = " | ".join(self.rows.pop()[1])
            if line and self.cells:  # a table nested in a cell: its rows join the cell's text
                self.add(" " + line + " ")
            elif line:
                self.blocks.append(line)
        elif self.cells and self.cells[-1][0] is element:
            cell = " ".join("".join(self.cells.pop()[1]).split())
            if cell:
                self.rows[-1][1].append(cell)
        elif tag in _BLOCK_TAGS or tag in ("td", "th"):
            self.block_break()

    def block_break(self) -> None:
        if self.cells:  # blocks inside a table cell stay on the row's line
            self.cells[-1][1].append(" ")
            return
        lines = (" ".join(line.split()) for line in "".join(self.paragraph).split("\n"))
        text = "\n".join(line for line in lines if line)
        if text:
            self.blocks.append(text)
        self.paragraph = []

    def pre(self, text: str) -> None:
        if self.cells:
            self.add(" " + text + " ")
            return
        self.block_break()
        text = text.strip("\n")
        if text.strip():
            self.blocks.append(text)
