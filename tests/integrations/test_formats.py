"""Text extraction for sync (recemb_integrations.formats): every fixture is built here, at test time."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile

import pytest

from recemb_integrations import formats
from recemb_integrations.formats import (
    DOCUMENT_SUFFIXES,
    FORMAT_SUFFIXES,
    TEXT_SUFFIXES,
    ExtractionError,
    extract_text,
    extractor_available,
    metadata_for,
)

pytest.importorskip("pypdfium2")
pytest.importorskip("docx")
pytest.importorskip("lxml.html")


# ---------------------------------------------------------------------- fixture builders
def _pdf_string(text: str) -> bytes:
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return b"(" + escaped.encode("cp1252") + b")"


def make_pdf(pages: list[list[str]], title: str | None = None, encrypt: bool = False) -> bytes:
    """A minimal valid PDF: one Helvetica (WinAnsi) text line per entry, 14 pt apart, pages in order.

    encrypt adds a standard security handler whose check value matches no password, as a PDF protected by an
    unknown user password looks to a reader."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>"
        % (b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(len(pages))), len(pages)),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    for i, lines in enumerate(pages):
        shown = b"".join(_pdf_string(line) + b" Tj T*\n" for line in lines)
        stream = b"BT /F1 12 Tf 14 TL 72 720 Td\n" + shown + b"ET"
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                       b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i))
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    trailer = b"/Root 1 0 R"
    if title is not None:
        objects.append(b"<< /Title %s >>" % _pdf_string(title))
        trailer += b" /Info %d 0 R" % len(objects)
    if encrypt:
        trailer += (b" /Encrypt << /Filter /Standard /V 1 /R 2 /O <" + b"ab" * 32 + b"> /U <" + b"cd" * 32
                    + b"> /P -4 >> /ID [<" + b"01" * 16 + b"> <" + b"01" * 16 + b">]")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d %s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, trailer, xref)
    return bytes(out)


def make_docx(path) -> None:
    import docx

    document = docx.Document()
    document.core_properties.title = "Quarterly notes"
    document.add_heading("Überblick", level=1)
    document.add_paragraph("First paragraph with naïve café text.")
    paragraph = document.add_paragraph("Second paragraph, ")
    paragraph.add_run("bold part").bold = True
    paragraph.add_run(" and a line\nbreak.")
    document.add_paragraph("")  # an empty paragraph adds no blank block
    table = document.add_table(rows=3, cols=3)
    values_by_row = [("Name", "Größe", "Note"), ("Ärmel", "42", ""), ("Kragen", "40", "x")]
    for row, values in zip(table.rows, values_by_row):
        for cell, value in zip(row.cells, values):
            cell.text = value
    table.cell(2, 1).merge(table.cell(2, 2))  # a merged cell is read once
    document.add_paragraph("After the table — ends here.")
    document.save(path)


def _w(tag: str):
    from docx.oxml import OxmlElement

    return OxmlElement(tag)


def _run(text: str):
    run, t = _w("w:r"), _w("w:t")
    t.text = text
    run.append(t)
    return run


# ---------------------------------------------------------------------- suffixes and plain text
def test_suffix_tables():
    assert TEXT_SUFFIXES == (".txt", ".md", ".markdown", ".rst")
    assert FORMAT_SUFFIXES == {
        ".pdf": "PDF", ".html": "HTML", ".htm": "HTML", ".xhtml": "HTML", ".docx": "DOCX"}
    assert DOCUMENT_SUFFIXES == TEXT_SUFFIXES + (".pdf", ".html", ".htm", ".xhtml", ".docx")


@pytest.mark.parametrize("suffix", TEXT_SUFFIXES + (".MD",))
def test_text_files_are_decoded_unchanged(tmp_path, suffix):
    # no normalisation: the stored text of existing documents stays as it was
    raw = "\ufeffTitle  \n\n\n\nbody\x00 naïve\r\n".encode("utf-8")
    path = tmp_path / f"doc{suffix}"
    path.write_bytes(raw)
    assert extract_text(path) == raw.decode("utf-8")
    assert extract_text(str(path)) == raw.decode("utf-8")


def test_invalid_utf8_names_the_byte_and_the_fix(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("ok café".encode("latin-1"))
    with pytest.raises(ExtractionError) as error:
        extract_text(path)
    assert str(error.value) == "not valid UTF-8 (byte 0xe9 at offset 6); convert it to UTF-8"
    assert isinstance(error.value, ValueError)


@pytest.mark.parametrize("name", ["gone.txt", "gone.pdf", "gone.docx", "gone.html"])
def test_read_errors_propagate_as_oserror(tmp_path, name):
    with pytest.raises(FileNotFoundError):
        extract_text(tmp_path / name)


@pytest.mark.parametrize("name", ["sheet.xlsx", "README", "archive.tar.gz"])
def test_unknown_suffix_is_refused(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"whatever")
    with pytest.raises(ExtractionError, match="no text extractor for .* the supported suffixes are .txt, "):
        extract_text(path)
    assert not extractor_available(path.suffix)


def test_importing_the_module_imports_no_format_library():
    code = ("import sys, recemb_integrations.formats\n"
            "print(sorted(m for m in ('pypdfium2', 'docx', 'lxml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_extractor_available_for_installed_libraries():
    for suffix in DOCUMENT_SUFFIXES:
        assert extractor_available(suffix)
    assert extractor_available("PDF") and extractor_available(".Docx")
    assert not extractor_available(".doc")


# ---------------------------------------------------------------------- missing extra
@pytest.mark.parametrize("suffix", [".pdf", ".html", ".htm", ".xhtml", ".docx"])
def test_missing_library_names_the_extra(tmp_path, monkeypatch, suffix):
    # a None entry in sys.modules makes the import raise ImportError, as for a library that is not installed
    monkeypatch.setitem(sys.modules, formats._LIBRARY[FORMAT_SUFFIXES[suffix]], None)
    path = tmp_path / f"file{suffix}"
    path.write_bytes(b"anything")
    with pytest.raises(ExtractionError) as error:
        extract_text(path)
    expected = (f"reading {suffix} files needs the 'formats' extra (bash scripts/install.sh formats in recemb's clone, "
                'or pip install -e ".[formats]" there)')
    assert str(error.value) == expected
    assert not extractor_available(suffix)
    assert extractor_available(".txt")
    assert metadata_for(path) == {"format": FORMAT_SUFFIXES[suffix]}


# ---------------------------------------------------------------------- PDF
def test_pdf_pages_are_blank_line_separated(tmp_path):
    path = tmp_path / "report.pdf"
    path.write_bytes(make_pdf([
        ["First page, first line.", "Second line (with parens) and café."],
        [],  # an empty page adds no extra blank line
        ["Third page: Größe 42."],
    ], title="Test report"))
    assert extract_text(path) == ("First page, first line.\nSecond line (with parens) and café.\n\n"
                                  "Third page: Größe 42.")
    assert metadata_for(path) == {"format": "PDF", "pages": 3, "title": "Test report"}


def test_pdf_line_end_hyphen_rejoins_the_word(tmp_path):
    path = tmp_path / "hyphen.pdf"
    lines = ["Retrieval needs man-", "agement of long words.", "A state-of-the-art line"]
    path.write_bytes(make_pdf([lines]))
    assert extract_text(path) == "Retrieval needs management of long words.\nA state-of-the-art line"


def test_pdf_without_text_gives_empty_string(tmp_path):
    path = tmp_path / "scan.pdf"
    path.write_bytes(make_pdf([[], []]))
    assert extract_text(path) == ""


@pytest.mark.parametrize("data", [b"%PDF-1.4\nthis is not a PDF body", b"", b"<html>a web page</html>"])
def test_corrupt_pdf_is_an_extraction_error(tmp_path, data):
    path = tmp_path / "broken.pdf"
    path.write_bytes(data)
    with pytest.raises(ExtractionError) as error:
        extract_text(path)
    message = str(error.value)
    assert message.startswith("not a readable PDF (") and "undamaged PDF" in message and "\n" not in message
    assert metadata_for(path) == {"format": "PDF"}  # metadata is best-effort: no exception


def test_password_protected_pdf_says_so(tmp_path):
    path = tmp_path / "locked.pdf"
    path.write_bytes(make_pdf([["secret"]], encrypt=True))
    with pytest.raises(ExtractionError, match="^this PDF is password-protected; save a copy without"):
        extract_text(path)


# ---------------------------------------------------------------------- DOCX
def test_docx_paragraphs_and_table_rows_in_document_order(tmp_path):
    path = tmp_path / "notes.docx"
    make_docx(path)
    assert extract_text(path) == (
        "Überblick\n\n"
        "First paragraph with naïve café text.\n\n"
        "Second paragraph, bold part and a line\nbreak.\n\n"
        "Name | Größe | Note\n\n"
        "Ärmel | 42\n\n"
        "Kragen | 40 x\n\n"
        "After the table — ends here."
    )
    assert metadata_for(path) == {"format": "DOCX", "title": "Quarterly notes"}


def test_docx_reads_insertions_content_controls_and_text_boxes_but_not_deletions(tmp_path):
    import docx

    document = docx.Document()
    paragraph = document.add_paragraph("Kept ")._p
    inserted, deleted = _w("w:ins"), _w("w:del")
    inserted.append(_run("inserted "))
    deleted_run, deleted_text = _w("w:r"), _w("w:delText")
    deleted_text.text = "deleted "
    deleted_run.append(deleted_text)
    deleted.append(deleted_run)
    paragraph.append(deleted)
    paragraph.append(inserted)
    paragraph.append(_run("words."))
    # a block-level content control wrapping a paragraph (cover pages, forms)
    control, content = _w("w:sdt"), _w("w:sdtContent")
    wrapped = document.add_paragraph("Inside a content control.")._p
    content.append(wrapped)  # moves the paragraph into the control
    control.append(content)
    document.element.body.insert(len(document.element.body) - 1, control)  # before the section properties
    # a legacy (VML) text box anchored in a paragraph: its paragraphs follow the anchoring one
    anchor = document.add_paragraph("Anchor.")._p
    picture, box = _w("w:pict"), _w("w:txbxContent")
    box_paragraph = _w("w:p")
    box_paragraph.append(_run("Text box text."))
    box.append(box_paragraph)
    picture.append(box)
    run = _w("w:r")
    run.append(picture)
    anchor.append(run)
    path = tmp_path / "revisions.docx"
    document.save(path)
    assert extract_text(path) == ("Kept inserted words.\n\nInside a content control.\n\nAnchor.\n\n"
                                  "Text box text.")


def test_docx_text_box_with_a_compatibility_fallback_is_read_once(tmp_path):
    import docx
    from docx.oxml.ns import qn
    from lxml import etree

    mc = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
    document = docx.Document()
    anchor = document.add_paragraph("Anchor.")._p
    run = _w("w:r")
    alternate = etree.SubElement(run, mc + "AlternateContent")
    for branch in ("Choice", "Fallback"):  # Word writes a DrawingML box and a VML copy of the same text
        box = etree.SubElement(etree.SubElement(alternate, mc + branch), qn("w:txbxContent"))
        box_paragraph = _w("w:p")
        box_paragraph.append(_run(f"Box text ({branch})."))
        box.append(box_paragraph)
    anchor.append(run)
    path = tmp_path / "box.docx"
    document.save(path)
    assert extract_text(path) == "Anchor.\n\nBox text (Choice)."


def test_docx_that_is_not_a_zip_is_an_extraction_error(tmp_path):
    path = tmp_path / "fake.docx"
    path.write_text("just text, renamed", encoding="utf-8")
    with pytest.raises(ExtractionError, match=r"^not a valid \.docx file \(not a ZIP archive\); save it"):
        extract_text(path)


def test_docx_zip_without_a_document_is_an_extraction_error(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "not a word document")
    path = tmp_path / "other.docx"
    path.write_bytes(buffer.getvalue())
    with pytest.raises(ExtractionError, match=r"^not a readable \.docx file \(KeyError: "):
        extract_text(path)


# ---------------------------------------------------------------------- HTML
HTML_PAGE = """<!DOCTYPE html>
<html><head>
<meta http-equiv="Content-Type" content="text/html; charset=windows-1252">
<title>Café   menu</title>
<style>p { color: red }</style>
<script>var markup = "<p>not text</p>";</script>
</head>
<body>
<nav><a href="/">Home</a> <a href="/menu">Menu</a></nav>
<div role="navigation">Skip to content</div>
<div><div>
  <h1>Today’s dishes</h1>
  <p>Crème brûlée &amp; coffee&nbsp;€4.</p>
  <p>Line one<br>line   two<script>alert(1)</script> still two</p>
</div>
<ul><li>First</li><li>Second <b>bold</b>item</li></ul>
<noscript>Please enable JavaScript.</noscript>
<template><p>template text</p></template>
<table>
  <tr><th>Dish</th><th>Price</th></tr>
  <tr><td><p>Soup</p></td><td></td><td>3</td></tr>
</table>
<pre>  code
    indented</pre>
text after <!-- a comment --> the pre
</div>
</body></html>
"""


@pytest.mark.parametrize("suffix", [".html", ".htm"])
def test_html_declared_charset_blocks_and_dropped_elements(tmp_path, suffix):
    path = tmp_path / f"menu{suffix}"
    path.write_bytes(HTML_PAGE.encode("cp1252"))
    assert extract_text(path) == (
        "Café menu\n\n"
        "Today’s dishes\n\n"
        "Crème brûlée & coffee €4.\n\n"
        "Line one\nline two still two\n\n"
        "First\n\n"
        "Second bolditem\n\n"
        "Dish | Price\n\n"
        "Soup | 3\n\n"
        "  code\n    indented\n\n"
        "text after the pre"
    )
    assert metadata_for(path) == {"format": "HTML", "title": "Café menu"}


@pytest.mark.parametrize("data, expected", [
    ("\ufeff<p>BOM and café</p>".encode("utf-8"), "BOM and café"),
    ("<p>UTF-16 café</p>".encode("utf-16"), "UTF-16 café"),  # a BOM outranks everything
    # Latin-1 labels are read as windows-1252, as browsers do
    ('<meta charset="iso-8859-1"><p>\x93quoted\x94</p>'.encode("latin-1"), "\u201cquoted\u201d"),
    # a UTF-16 label without a BOM cannot be true: the label itself was found as ASCII bytes
    ("<meta charset=utf-16><p>caf\u00e9</p>".encode("utf-8"), "café"),
    (b"<meta charset=no-such-codec><p>caf\xc3\xa9 \xff</p>", "café \ufffd"),  # UTF-8 with replacement
    (b"<p>no declaration caf\xc3\xa9\x00</p>", "no declaration café"),
])
def test_html_encoding_detection(tmp_path, data, expected):
    path = tmp_path / "page.html"
    path.write_bytes(data)
    assert extract_text(path) == expected


def test_html_nested_tables_and_cells_outside_rows(tmp_path):
    path = tmp_path / "tables.html"
    path.write_text(
        "<table><tr><td>outer<table><tr><td>in 1</td><td>in 2</td></tr></table></td>"
        "<td>next</td></tr></table>"
        "<table><td>no</td><td>row</td></table>"
        "<table><tr><td>a<table><td>stray</td></table>b</td><td>c</td></tr></table>",
        encoding="utf-8",
    )
    assert extract_text(path) == "outer in 1 | in 2 | next\n\nno\n\nrow\n\na stray b | c"


def test_xhtml_with_an_xml_declaration(tmp_path):
    path = tmp_path / "chapter.xhtml"
    path.write_bytes(b'<?xml version="1.0" encoding="iso-8859-15"?>\n'
                     b'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Kapitel</title></head>'
                     b'<body><p>Preis: 5 \xa4</p><p>Zweiter<br/>Absatz</p></body></html>')
    assert extract_text(path) == "Kapitel\n\nPreis: 5 €\n\nZweiter\nAbsatz"


@pytest.mark.parametrize("data", [b"", b"   \n", b"<!-- only a comment -->", b"<html><body></body></html>",
                                  b"<html><head><script>x()</script></head><body><nav>menu</nav></body></html>"])
def test_html_without_text_gives_empty_string(tmp_path, data):
    path = tmp_path / "empty.html"
    path.write_bytes(data)
    assert extract_text(path) == ""
    assert metadata_for(path) == {"format": "HTML"}


def test_extracted_text_is_normalised(tmp_path):
    path = tmp_path / "spaces.html"
    path.write_bytes("<pre>trailing   \r\n\r\n\r\n\r\nnul\x00 gone\tx\u2028line separator</pre>"
                     "<p>soft\xadhy\xadphens</p>".encode("utf-8"))
    assert extract_text(path) == "trailing\n\nnul gone\tx\nline separator\n\nsofthyphens"


def test_metadata_for_text_and_unknown(tmp_path):
    assert metadata_for(tmp_path / "a.md") == {"format": "text"}  # nothing read: no OSError for a text file
    assert metadata_for(tmp_path / "a.xyz") == {"format": "unknown"}
