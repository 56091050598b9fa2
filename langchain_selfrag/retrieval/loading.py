"""Loading files into Documents and chunking them: what ``selfrag index`` reads and how it splits it.

Every format reaches the store as clean text (rendered by :mod:`.formats`: markdown, reStructuredText,
HTML, PDF, Word .docx, plain text): one Document per section or page, the heading path in
``metadata["section"]``, the page in ``metadata["page"]``, the document title in ``metadata["title"]``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from langchain_core.documents import Document

from ..errors import InvalidInputError, NoDocumentsError
from ..jsonl import iter_jsonl
from . import formats

#: File types ``load_file`` reads.
TEXT_SUFFIXES = formats.TEXT_SUFFIXES
MARKDOWN_SUFFIXES = formats.MD_SUFFIXES + formats.RST_SUFFIXES
JSONL_SUFFIXES = (".jsonl",)
SUPPORTED_SUFFIXES = formats.SUFFIXES + JSONL_SUFFIXES


#: Why a symbolic link under an indexed folder that leads out of it is not read.
OUTSIDE_LINK = "a symbolic link to {what} outside the folder: not followed"


def _outside(root: Path, path: Path) -> bool:
    """True when ``path`` (under ``root``) resolves to a place outside ``root``."""
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return True
    return False


def scan_folder(path: str | os.PathLike) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Files at ``path`` (a file, or every file under a folder but hidden ones, sorted): the supported
    ones, and the others each with the reason it is not read. A symbolic link under the folder that
    leads out of it (a file or a folder elsewhere) is not followed, and is listed with its reason: a
    folder handed over by someone else must not pull a private file into the store."""
    root = Path(path)
    if not root.exists():
        raise NoDocumentsError(f"no such file or folder: {root}")
    if root.is_file():
        found, others = [root], []
    else:
        visible = [p for p in root.rglob("*") if not any(part.startswith(".") for part in p.relative_to(root).parts)]
        links = [p for p in visible if p.is_symlink() and _outside(root, p)]
        others = [(p, OUTSIDE_LINK.format(what="a folder" if p.is_dir() else "a file")) for p in links]
        found = sorted(p for p in visible if p.is_file() and p not in links)
    supported = [p for p in found if p.suffix.lower() in SUPPORTED_SUFFIXES]
    others += [(p, f"unsupported format {p.suffix.lower() or '(no suffix)'}") for p in found
               if p.suffix.lower() not in SUPPORTED_SUFFIXES]
    return supported, sorted(others)


def iter_files(path: str | os.PathLike) -> list[Path]:
    """Supported files at ``path`` (a file, or every supported file under a folder, sorted)."""
    return scan_folder(path)[0]


def load_file(path: Path, source: str | None = None) -> list[Document]:
    """Documents of one file as clean text: .jsonl one per line (``text`` / ``title`` fields), else one
    per section (markdown, reStructuredText, HTML, .docx), per page (PDF) or the whole file (plain text).

    Each has ``source`` and ``title`` (the document's title, else the file name without suffix)
    and, where the file has them, ``section`` (the heading path, ``Install > From source``) and
    ``page`` (PDF, 1-based). NoDocumentsError for a broken file or a missing optional package.
    """
    source = source or str(path)
    if path.suffix.lower() in JSONL_SUFFIXES:
        docs = []
        for n, row in iter_jsonl(path, NoDocumentsError, encoding_errors="replace"):
            text = row.get("text") or row.get("contents") or row.get("content")
            if not isinstance(text, str) or not text.strip():
                raise NoDocumentsError(f"{path}:{n}: expected an object with a 'text' field")
            title = row.get("title") or f"{path.stem} #{n}"
            docs.append(Document(text, metadata={"source": f"{source}#{n}", "title": str(title)}))
        return docs
    clean = formats.read_clean(path)
    title = clean.title or path.stem
    return [Document(text, metadata={"source": source, "title": title, **extra})
            for text, extra in clean.segments()]


def check_chunking(chunk_size: int, chunk_overlap: int) -> None:
    """InvalidInputError for chunk settings the splitter cannot take, named as the caller gave them."""
    if chunk_size < 1:
        raise InvalidInputError(f"chunk_size must be positive, not {chunk_size}")
    if chunk_overlap < 0:
        raise InvalidInputError(f"chunk_overlap must be at least 0, not {chunk_overlap}")
    if chunk_overlap >= chunk_size:
        raise InvalidInputError(f"chunk_overlap ({chunk_overlap}) must be smaller than chunk_size ({chunk_size})")


def split_documents(docs: Iterable[Document], *, chunk_size: int = 800, chunk_overlap: int = 100) -> list[Document]:
    """Chunk documents (at paragraphs, then lines, then words) and number the chunks per source."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    check_chunking(chunk_size, chunk_overlap)
    splitter = RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    numbers: dict[str, int] = {}
    out: list[Document] = []
    for doc in docs:
        source = str(doc.metadata.get("source", ""))
        for chunk in splitter.split_documents([doc]):
            chunk.metadata["chunk"] = numbers.get(source, 0)
            numbers[source] = chunk.metadata["chunk"] + 1
            out.append(chunk)
    return out


def chunk_id(doc: Document, file: str | None = None) -> str:
    """The store id of a chunk: a SHA-256 of its file (``file``, else its ``source``), its text and its
    metadata. The same chunk of the same file always gets the same id, so writing it again updates
    instead of duplicating; ``selfrag index`` passes the file's absolute path."""
    owner = file if file is not None else doc.metadata.get("source")
    payload = json.dumps([owner, doc.page_content, doc.metadata], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def document_title(doc: Document) -> str:
    """The document's title: metadata ``title``, else the source file name."""
    title = doc.metadata.get("title")
    if title:
        return str(title)
    source = doc.metadata.get("source")
    return Path(str(source)).stem if source else ""


def section_heading(title: str, section: object) -> str:
    """``Title > Section > Subsection``: ``title``, then the parts of the section path ``section`` (a chunk's
    ``metadata["section"]``) other than the title."""
    parts = [p.strip() for p in str(section or "").split(">")]
    return " > ".join([title] * bool(title) + [p for p in parts if p and p != title])


def passage_heading(doc: Document) -> str:
    """The title shown inside ``<paragraph>``: :func:`document_title`, then the chunk's section path when its
    metadata has one, so that the model reads where the passage stands."""
    return section_heading(document_title(doc), doc.metadata.get("section"))
