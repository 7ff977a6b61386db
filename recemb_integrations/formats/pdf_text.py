"""PDF text through pypdfium2 (PDFium), page by page: the one source of a PDF's text and of its page starts."""

from __future__ import annotations

import threading
from types import ModuleType

from recemb_integrations.formats.text import ExtractionError, one_line, tidy

__all__ = ["PAGE_SEPARATOR", "PDFIUM_LOCK", "pdf_pages", "pdf_text"]

# PDFium is not thread-safe; one lock keeps concurrent callers (a thread pool in a caller) correct.
PDFIUM_LOCK = threading.Lock()
# PDFium replaces a hyphen that breaks a word at a line end by one of these (and drops the line break);
# removing them rejoins the word, which is what a search for it needs.
_PDFIUM_LINE_END_HYPHENS = str.maketrans("", "", "\x02\ufffe")
# Between the texts of two pages in extract_text (and so in pdf_page_starts' offsets).
PAGE_SEPARATOR = "\n\n"


def pdf_text(pdfium: ModuleType, raw: bytes) -> str:
    return PAGE_SEPARATOR.join(text for _, text in pdf_pages(pdfium, raw))


def pdf_pages(pdfium: ModuleType, raw: bytes) -> list[tuple[int, str]]:
    """(page number from 1, tidied text) of each page with text, in order: the one source of ``extract_text``'s PDF
    text and of ``pdf_page_starts``, so the two cannot disagree."""
    with PDFIUM_LOCK:
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
            raise ExtractionError(f"cannot read the text of this PDF ({one_line(e)}); open it in a PDF "
                                  "viewer and save or print a new copy to sync it") from e
        finally:
            document.close()
    # an empty page (a blank or scanned one) adds nothing, not an extra blank line
    tidied = ((number, tidy(text)) for number, text in enumerate(pages, 1))
    return [(number, text) for number, text in tidied if text]


def _pdf_open_failure(error: Exception) -> str:
    reason = one_line(error)
    if "password" in reason.lower():
        return "this PDF is password-protected; save a copy without a password to sync it"
    return (f"not a readable PDF ({reason}); check that the file is a complete, undamaged PDF (open it in a "
            "PDF viewer and save a new copy)")
