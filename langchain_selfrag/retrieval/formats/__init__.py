"""File formats ``selfrag index`` reads, each turned into clean text (:class:`CleanText`).

Pure renderers per format (markdown, reStructuredText); :func:`read_clean` picks one by suffix.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ...errors import NoDocumentsError
from .text import CleanText, TextBuilder

TEXT_SUFFIXES = (".txt", ".text")
MD_SUFFIXES = (".md", ".markdown")
RST_SUFFIXES = (".rst",)


def read_text(path: Path) -> str:
    """The file as text (UTF-8, undecodable bytes replaced); NoDocumentsError for a binary file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise NoDocumentsError(f"cannot read {path}: {exc}") from exc
    if b"\x00" in data[:8192]:
        raise NoDocumentsError(f"{path}: not a text file (binary content)")
    return data.decode("utf-8", errors="replace")


def _plain(path: Path) -> CleanText:
    return CleanText(read_text(path).strip())


def _markdown(path: Path) -> CleanText:
    from .markdown import render_markdown

    return render_markdown(read_text(path))


def _rst(path: Path) -> CleanText:
    from .rst import render_rst

    return render_rst(read_text(path), str(path))


#: Reader of each suffix (lower case): file -> clean text.
READERS: dict[str, Callable[[Path], CleanText]] = {
    **dict.fromkeys(TEXT_SUFFIXES, _plain),
    **dict.fromkeys(MD_SUFFIXES, _markdown),
    **dict.fromkeys(RST_SUFFIXES, _rst),
}


def read_clean(path: Path) -> CleanText:
    """Clean text of one file, by its suffix (KeyError for a suffix without a reader)."""
    return READERS[path.suffix.lower()](path)


__all__ = ["MD_SUFFIXES", "READERS", "RST_SUFFIXES", "TEXT_SUFFIXES", "CleanText", "TextBuilder",
           "read_clean", "read_text"]
