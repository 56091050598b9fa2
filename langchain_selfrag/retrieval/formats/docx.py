"""Word (.docx) to clean text with python-docx: paragraphs and tables in reading order.

The ``Title`` style is the title, ``Heading N`` styles set the section path, list styles become
``- item`` lines, tables ``a | b`` rows (a merged cell once); the core property ``title`` wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .text import CleanText, TextBuilder


def _heading_level(style: str) -> int | None:
    if style == "Title":
        return 1
    if style.startswith("Heading "):
        number = style.removeprefix("Heading ").strip()
        return int(number) + 1 if number.isdigit() else None
    return None


def _table_rows(table: Any) -> str:
    rows = []
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            text = " ".join(cell.text.split())
            if not cells or cells[-1] != text:  # a merged cell is repeated once per grid column
                cells.append(text)
        rows.append(" | ".join(cells))
    return "\n".join(rows)


def read_docx(path: Path) -> CleanText:
    """Clean text of a .docx file; raises whatever python-docx raises for a broken one."""
    import docx
    from docx.table import Table

    document = docx.Document(str(path))
    out = TextBuilder()
    listing: list[str] = []
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            out.block("\n".join(listing), verbatim=True)
            listing = []
            out.block(_table_rows(block), verbatim=True)
            continue
        style = block.style.name if block.style is not None else ""
        text = block.text
        if style.startswith("List"):
            listing.append("- " + " ".join(text.split()))
            continue
        out.block("\n".join(listing), verbatim=True)
        listing = []
        level = _heading_level(style)
        if level is not None:
            out.heading(level, text)
        else:
            out.block(text)
    out.block("\n".join(listing), verbatim=True)
    return out.build(document.core_properties.title or None)
