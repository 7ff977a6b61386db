"""DOCX text read from the package's XML (python-docx opens it): paragraphs, table rows, tracked insertions,
content controls and text boxes, in document order."""

from __future__ import annotations

import io
from types import ModuleType

from recemb_integrations.formats.text import ExtractionError, one_line, tidy

__all__ = ["docx_text"]

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
# Parts of a run whose text is not in the document as it reads: deleted or moved-away revisions, and
# Markup Compatibility fallbacks (an old-format copy of a text box next to the new one: its text twice).
_DOCX_SKIPPED = {_W + "del", _W + "moveFrom", _MC_FALLBACK, _W + "instrText", _W + "delText"}
_DOCX_INLINE = {_W + "t": None, _W + "tab": "\t", _W + "br": "\n", _W + "cr": "\n", _W + "noBreakHyphen": "-",
                _W + "softHyphen": "\xad"}


def docx_text(docx: ModuleType, raw: bytes) -> str:
    import zipfile

    try:
        body = docx.Document(io.BytesIO(raw)).element.body
    except zipfile.BadZipFile:
        raise ExtractionError("not a valid .docx file (not a ZIP archive); save it again as .docx from a "
                              "word processor") from None
    except Exception as e:  # python-docx raises KeyError, ValueError, lxml errors, ... for damaged packages
        raise ExtractionError(f"not a readable .docx file ({type(e).__name__}: {one_line(e)}); save it "
                              "again as .docx from a word processor") from e
    blocks: list[str] = []
    _docx_blocks(body, blocks)
    return tidy("\n\n".join(blocks))


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
