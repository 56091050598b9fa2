"""``selfrag index``: load, chunk and embed every file under a path into the store."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from ..errors import NoDocumentsError
from .loading import SUPPORTED_SUFFIXES, chunk_id, iter_files, load_file, split_documents
from .store import DEFAULT_COLLECTION, DEFAULT_STORE, open_store, store_size


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass(frozen=True)
class IndexReport:
    """What :func:`index_path` did: files and chunks indexed, the store's size, the files skipped.

    ``report["files"]`` etc. still work for code written against the old dict result.
    """

    files: int
    chunks: int
    total: int
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    def __getitem__(self, key: str) -> Any:
        if key not in {f.name for f in fields(self)}:
            raise KeyError(key)
        return getattr(self, key)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (paths as strings)."""
        return {"files": self.files, "chunks": self.chunks, "total": self.total,
                "skipped": [[str(p), reason] for p, reason in self.skipped]}


def format_skipped(skipped: Sequence[tuple[Path, str]], limit: int = 10) -> str:
    """A short ``path: reason`` list of skipped files (at most ``limit`` lines, then a count)."""
    lines = [f"  {path}: {reason}" for path, reason in skipped[:limit]]
    if len(skipped) > limit:
        lines.append(f"  ... and {len(skipped) - limit} more")
    return "\n".join(lines)


def _skip_reason(file: Path, exc: Exception) -> str:
    text = str(exc)
    for prefix in (f"{file}:", f"cannot read {file}:"):
        if text.startswith(prefix):
            text = text[len(prefix):].strip()
            break
    line = re.match(r"(\d+): (.*)", text, re.DOTALL)
    return f"line {line[1]}: {line[2]}" if line else text


def _load_all(root: Path, files: list[Path]) -> tuple[list[Document], list[Path], list[tuple[Path, str]]]:
    docs: list[Document] = []
    loaded: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    for file in files:
        source = str(file.relative_to(root)) if root.is_dir() else file.name
        try:
            file_docs = load_file(file, source)
        except (NoDocumentsError, OSError) as exc:
            skipped.append((file, _skip_reason(file, exc)))
            continue
        if not file_docs:
            skipped.append((file, "holds no text"))
            continue
        for doc in file_docs:
            doc.metadata["file"] = source
        docs.extend(file_docs)
        loaded.append(file)
    return docs, loaded, skipped


def index_path(path: str | os.PathLike, store: str | os.PathLike = DEFAULT_STORE, *, chunk_size: int = 800,
               chunk_overlap: int = 100, embeddings: Embeddings | None = None, collection: str = DEFAULT_COLLECTION,
               progress: bool = True, batch_size: int = 32, strict: bool = False,
               chroma_url: str | None = None) -> IndexReport:
    """Load, chunk and embed every supported file under ``path`` into the store (idempotent per file).

    The store is the folder ``store``, or the Chroma server at ``chroma_url`` when given.

    A file that cannot be loaded (malformed JSONL, unreadable, no text) is skipped and listed in
    ``IndexReport.skipped`` with its reason; with ``strict=True`` any such file raises
    NoDocumentsError before the store is touched. NoDocumentsError also when nothing is indexable.
    """
    from tqdm.auto import tqdm

    root = Path(path)
    files = iter_files(root)
    if not files:
        raise NoDocumentsError(f"no {', '.join(SUPPORTED_SUFFIXES)} files under {root}")
    docs, loaded, skipped = _load_all(root, files)
    if skipped and strict:
        raise NoDocumentsError(f"{len(skipped)} file(s) under {root} cannot be indexed (strict mode, nothing "
                               f"was written):\n{format_skipped(skipped)}")
    chunks = split_documents(docs, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    if not chunks:
        raise NoDocumentsError(f"no file under {root} could be indexed:\n{format_skipped(skipped)}")
    if chroma_url is None:
        Path(store).mkdir(parents=True, exist_ok=True)
    vs = open_store(store, embeddings=embeddings, collection=collection, must_exist=False, chroma_url=chroma_url)
    for file in sorted({str(c.metadata["file"]) for c in chunks}):  # re-indexing a file replaces its chunks
        vs.delete(where={"file": file})
    bar = tqdm(total=len(chunks), desc="indexing", unit="chunk", disable=not progress)
    for batch in _batches(chunks, batch_size):
        vs.add_documents(batch, ids=[chunk_id(c) for c in batch])
        bar.update(len(batch))
    bar.close()
    return IndexReport(files=len(loaded), chunks=len(chunks), total=store_size(vs), skipped=skipped)
