"""File formats ``selfrag index`` reads, each turned into clean text (:class:`CleanText`).

Markdown (markdown-it-py) and reStructuredText (docutils) are core; PDF (pypdf), HTML (Beautiful
Soup + markdownify) and Word .docx (python-docx) need the ``documents`` extra. :func:`read_clean`
picks the reader by suffix; a missing package or a broken file raises NoDocumentsError with a
one-line reason, so ``selfrag index`` lists the file instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ...errors import NoDocumentsError
from .text import CleanText, TextBuilder

TEXT_SUFFIXES = (".txt", ".text")
MD_SUFFIXES = (".md", ".markdown")
RST_SUFFIXES = (".rst",)
PDF_SUFFIXES = (".pdf",)
HTML_SUFFIXES = (".html", ".htm", ".xhtml")
DOCX_SUFFIXES = (".docx",)
#: What each optional reader needs: suffix -> (package to import, package to install).
NEEDS = {**dict.fromkeys(PDF_SUFFIXES, ("pypdf", "pypdf")),
         **dict.fromkeys(HTML_SUFFIXES, ("bs4", "beautifulsoup4 and markdownify")),
         **dict.fromkeys(DOCX_SUFFIXES, ("docx", "python-docx"))}


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


def _pdf(path: Path) -> CleanText:
    from .pdf import read_pdf

    return read_pdf(path)


def _html(path: Path) -> CleanText:
    from .html import render_html

    return render_html(read_text(path))


def _docx(path: Path) -> CleanText:
    from .docx import read_docx

    return read_docx(path)


#: Reader of each suffix (lower case): file -> clean text.
READERS: dict[str, Callable[[Path], CleanText]] = {
    **dict.fromkeys(TEXT_SUFFIXES, _plain),
    **dict.fromkeys(MD_SUFFIXES, _markdown),
    **dict.fromkeys(RST_SUFFIXES, _rst),
    **dict.fromkeys(PDF_SUFFIXES, _pdf),
    **dict.fromkeys(HTML_SUFFIXES, _html),
    **dict.fromkeys(DOCX_SUFFIXES, _docx),
}
SUFFIXES = tuple(READERS)


def read_clean(path: Path) -> CleanText:
    """Clean text of one file, by its suffix (KeyError for a suffix without a reader).

    NoDocumentsError when the reader's package is missing or the file cannot be parsed.
    """
    suffix = path.suffix.lower()
    try:
        return READERS[suffix](path)
    except NoDocumentsError:
        raise
    except ImportError as exc:
        module, package = NEEDS.get(suffix, (exc.name, exc.name))
        raise NoDocumentsError(f"{path}: reading {suffix} files needs {package}: "
                               "pip install 'langchain-selfrag[documents]'") from exc
    except RecursionError as exc:
        raise NoDocumentsError(f"{path}: cannot parse this {suffix} file (nested too deeply)") from exc
    except Exception as exc:  # parsers raise many types for a broken file; one line says which
        detail = " ".join(str(exc).split())[:200]
        raise NoDocumentsError(f"{path}: cannot parse this {suffix} file ({type(exc).__name__}: {detail})") from exc


__all__ = ["DOCX_SUFFIXES", "HTML_SUFFIXES", "MD_SUFFIXES", "PDF_SUFFIXES", "READERS", "RST_SUFFIXES", "SUFFIXES",
           "TEXT_SUFFIXES", "CleanText", "TextBuilder", "read_clean", "read_text"]
