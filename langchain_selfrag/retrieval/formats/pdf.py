"""PDF to clean text with pypdf (the library behind LangChain's ``PyPDFLoader``): text page by page.

Each page's text is a piece of its own with ``page`` (1-based) as metadata; the outline (bookmarks),
when the file has one, gives each page its ``section``; the title is the document's ``/Title``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .text import SECTION_SEP, CleanText, TextBuilder


def _outline_pages(reader: Any) -> dict[int, str]:
    """Page index -> section path of the outline entries that start on it (deepest last)."""
    starts: dict[int, str] = {}

    def walk(items: list[Any], path: list[str]) -> None:
        last: list[str] = path
        for item in items:
            if isinstance(item, list):
                walk(item, last)
                continue
            title = " ".join(str(getattr(item, "title", "") or "").split())
            try:
                page = reader.get_destination_page_number(item)
            except Exception:  # an outline entry without a page
                continue
            last = [*path, title] if title else path
            if page is not None and page >= 0:
                starts.setdefault(page, SECTION_SEP.join(last))

    try:
        walk(list(reader.outline), [])
    except Exception:  # a broken outline costs the sections, not the text
        return {}
    return starts


def read_pdf(path: Path) -> CleanText:
    """Clean text of a PDF file (pages as pieces); raises whatever pypdf raises for a broken file."""
    from pypdf import PdfReader

    reader = PdfReader(str(path))
    if reader.is_encrypted and not reader.decrypt(""):
        raise ValueError("the PDF is encrypted")
    sections = _outline_pages(reader)
    out = TextBuilder()
    section = None
    for number, page in enumerate(reader.pages):
        section = sections.get(number, section)
        out.mark(page=number + 1, **({"section": section} if section else {}))
        out.block(page.extract_text() or "")
    info = reader.metadata
    title = " ".join(str(info.title).split()) if info is not None and info.title else None
    return out.build(title)
