"""Loading files into Documents and chunking them: what ``selfrag index`` reads and how it splits it."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from langchain_core.documents import Document

from ..errors import NoDocumentsError
from ..jsonl import iter_jsonl

#: File types ``load_documents`` reads.
TEXT_SUFFIXES = (".txt", ".text")
MARKDOWN_SUFFIXES = (".md", ".markdown", ".rst")
JSONL_SUFFIXES = (".jsonl",)
SUPPORTED_SUFFIXES = TEXT_SUFFIXES + MARKDOWN_SUFFIXES + JSONL_SUFFIXES


def _markdown_title(text: str, fallback: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return fallback


def iter_files(path: str | os.PathLike) -> list[Path]:
    """Supported files at ``path`` (a file, or every supported file under a folder, sorted)."""
    root = Path(path)
    if not root.exists():
        raise NoDocumentsError(f"no such file or folder: {root}")
    if root.is_file():
        return [root] if root.suffix.lower() in SUPPORTED_SUFFIXES else []
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def load_file(path: Path, source: str | None = None) -> list[Document]:
    """Documents of one file: .txt/.md/.rst whole, .jsonl one per line (``text`` / ``title`` fields)."""
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
    try:
        raw = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise NoDocumentsError(f"cannot read {path}: {exc}") from exc
    if not raw.strip():
        return []
    title = _markdown_title(raw, path.stem) if path.suffix.lower() in MARKDOWN_SUFFIXES else path.stem
    return [Document(raw, metadata={"source": source, "title": title})]


def split_documents(docs: Iterable[Document], *, chunk_size: int = 800, chunk_overlap: int = 100) -> list[Document]:
    """Chunk documents (markdown-aware for .md/.rst sources) and number the chunks per source."""
    from langchain_text_splitters import Language, RecursiveCharacterTextSplitter

    md = RecursiveCharacterTextSplitter.from_language(Language.MARKDOWN, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    plain = RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    out: list[Document] = []
    for doc in docs:
        source = str(doc.metadata.get("source", ""))
        splitter = md if source.lower().endswith(MARKDOWN_SUFFIXES) else plain
        for i, chunk in enumerate(splitter.split_documents([doc])):
            chunk.metadata["chunk"] = i
            out.append(chunk)
    return out


def chunk_id(doc: Document) -> str:
    """A stable id for a chunk, so re-indexing the same file updates instead of duplicating."""
    key = f"{doc.metadata.get('source')}\x00{doc.metadata.get('chunk')}\x00{doc.page_content}"
    return hashlib.sha1(key.encode("utf-8")).hexdigest()


def document_title(doc: Document) -> str:
    """The title shown inside ``<paragraph>``: metadata ``title``, else the source file name."""
    title = doc.metadata.get("title")
    if title:
        return str(title)
    source = doc.metadata.get("source")
    return Path(str(source)).stem if source else ""
