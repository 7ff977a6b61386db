"""HTML text through lxml: block elements as paragraphs, the title first, what is never content dropped."""

from __future__ import annotations

import codecs
import re
from types import ModuleType

from recemb_integrations.formats.text import ExtractionError, one_line, tidy

__all__ = ["html_text", "html_title", "parse_html"]

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


def parse_html(lxml_html: ModuleType, raw: bytes):
    """The root element, or None for a document with no elements at all."""
    from lxml import etree

    codec, bom = _html_encoding(raw)
    text = raw[bom:].decode(codec, errors="replace").replace("\x00", "")
    text = _XML_DECLARATION.sub("", text)  # an XHTML prolog: its encoding was honoured above
    # Handed over as UTF-8 with the encoding stated, so that libxml2 does not re-read a <meta> charset.
    parser = lxml_html.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True, no_network=True,
                                  default_doctype=False)
    return etree.fromstring(text.encode("utf-8"), parser=parser)


def html_title(root) -> str:
    for title in root.iter("title"):
        if not any(a.tag == "svg" for a in title.iterancestors()):  # an SVG's <title> is a tooltip
            return " ".join("".join(title.itertext()).split())
    return ""


def html_text(lxml_html: ModuleType, raw: bytes) -> str:
    try:
        root = parse_html(lxml_html, raw)
    except Exception as e:  # libxml2 recovers from almost anything; this is a last resort
        raise ExtractionError(f"cannot parse this HTML file ({one_line(e)}); check that it is HTML") from e
    if root is None:
        return ""
    walker = _HtmlTextWalker()
    walker.walk(root)
    title = html_title(root)
    return tidy("\n\n".join(([title] if title else []) + walker.blocks))


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
