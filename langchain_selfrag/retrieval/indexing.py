"""``selfrag index``: load, chunk and embed every file under a path into the store and its lexical index, and
keep both in step with the path."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from ..errors import NoDocumentsError
from .hybrid import HybridStore, in_step, refill_lexical
from .loading import load_file, scan_folder, split_documents
from .records import SQLiteRecordManager
from .store import DEFAULT_COLLECTION, DEFAULT_STORE, open_store, store_size
from .sync import SyncPlan, plan_sync, sync_chunks

#: The record manager's file inside an embedded store's folder.
RECORDS_FILE = "selfrag-records.sqlite3"


@dataclass(frozen=True)
class IndexReport:
    """What :func:`index_path` did (or, with ``dry_run``, would do): files and chunks indexed, the
    store's size, the files skipped with their reasons, and the sync plan (files added, changed,
    removed, unchanged; chunks embedded, kept, deleted).

    ``report["files"]`` etc. still work for code written against the old dict result.
    """

    files: int
    chunks: int
    total: int
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    plan: SyncPlan = field(default_factory=SyncPlan)
    dry_run: bool = False

    def __getitem__(self, key: str) -> Any:
        if key not in {f.name for f in fields(self)}:
            raise KeyError(key)
        return getattr(self, key)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (paths as strings)."""
        return {"files": self.files, "chunks": self.chunks, "total": self.total,
                "skipped": [[str(p), reason] for p, reason in self.skipped], "sync": self.plan.as_dict(),
                "dry_run": self.dry_run}


def format_plan(plan: SyncPlan, *, dry_run: bool = False, limit: int = 10) -> str:
    """The files a sync adds, replaces and removes (lines with none are left out) and its chunk
    counts, for the terminal."""
    def names(items: list[str]) -> str:
        shown = ", ".join(items[:limit])
        return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")

    verbs = ("would add", "would replace", "would remove") if dry_run else ("added", "replaced", "removed")
    groups = [(verbs[0], "new file(s)", plan.added), (verbs[1], "changed file(s)", plan.changed),
              (verbs[2], "file(s) that are gone", plan.removed)]
    lines = [f"  {verb} {len(items)} {what}: {names(items)}" for verb, what, items in groups if items]
    if plan.unchanged:
        lines.append(f"  {len(plan.unchanged)} file(s) unchanged")
    delete = "to delete" if dry_run else "deleted"
    lines.append(f"  chunks: {plan.chunks_to_embed} {'to embed' if dry_run else 'embedded'}, {plan.chunks_kept} "
                 f"kept, {plan.chunks_to_delete} {delete}"
                 + (f", {plan.unrecorded} written without records replaced" if plan.unrecorded else ""))
    return "\n".join(lines)


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


def records_path(store: str | os.PathLike = DEFAULT_STORE, chroma_url: str | None = None) -> Path:
    """Where the records of a store live: inside an embedded store's folder; for a Chroma server,
    ``.selfrag/records.sqlite3`` (of the current folder)."""
    return Path(DEFAULT_STORE).parent / "records.sqlite3" if chroma_url else Path(store) / RECORDS_FILE


def _namespace(chroma_url: str | None, collection: str) -> str:
    """The records' namespace: the collection (the record file lives in the store's folder, which
    may move), or the collection on a server."""
    return collection if chroma_url is None else f"{collection}@{chroma_url}"


def _unrecorded(vs: VectorStore, names: list[str], known: Callable[[list[str]], list[bool]]) -> list[str]:
    """Ids of chunks in the store that carry one of ``names`` as ``file`` and that no record explains
    (``known``: written before records were kept, or by another record file): they are replaced."""
    ids: list[str] = []
    for first in range(0, len(names), 500):
        found = vs.get(where={"file": {"$in": names[first : first + 500]}}, include=[])["ids"]  # type: ignore[attr-defined]
        ids.extend(i for i, seen in zip(found, known(found), strict=True) if not seen)
    return ids


def index_path(path: str | os.PathLike, store: str | os.PathLike = DEFAULT_STORE, *, chunk_size: int = 800,
               chunk_overlap: int = 100, embeddings: Embeddings | None = None, collection: str = DEFAULT_COLLECTION,
               progress: bool = True, batch_size: int = 256, strict: bool = False,
               chroma_url: str | None = None, dry_run: bool = False,
               records: str | os.PathLike | None = None) -> IndexReport:
    """Index every supported file under ``path`` into the store and keep the store in step with it.

    The store is the folder ``store``, or the Chroma server at ``chroma_url`` when given. Unchanged
    files are not embedded again, changed files are replaced, and the chunks of files that are no
    longer under ``path`` are deleted (:mod:`.sync`); the records of what was written are kept in
    ``records`` (default :func:`records_path`). ``dry_run`` only plans: the report says what would be
    added, replaced and removed; nothing is embedded, written or deleted (an embedded store's
    folder is not even made).

    A file that cannot be loaded (unsupported format, broken, malformed JSONL, unreadable, no text)
    is skipped and listed in ``IndexReport.skipped`` with its reason; with ``strict=True`` any such
    file raises NoDocumentsError before the store is touched. NoDocumentsError also when nothing is indexable.
    """
    from tqdm.auto import tqdm

    root = Path(path)
    files, unsupported = scan_folder(root)
    if not files and not unsupported:
        raise NoDocumentsError(f"no files under {root}")
    docs, loaded, skipped = _load_all(root, files)
    skipped = sorted(unsupported + skipped)
    if skipped and strict:
        raise NoDocumentsError(f"{len(skipped)} file(s) under {root} cannot be indexed (strict mode, nothing "
                               f"was written):\n{format_skipped(skipped)}")
    chunks = split_documents(docs, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    if not chunks:
        raise NoDocumentsError(f"no file under {root} could be indexed:\n{format_skipped(skipped)}")
    top = root.resolve()

    def group_of(doc: Document) -> str:
        return str(top / str(doc.metadata["file"])) if root.is_dir() else str(top)

    def name_of(group: str) -> str:
        return os.path.relpath(group, top) if root.is_dir() else Path(group).name

    record_file = Path(records) if records is not None else records_path(store, chroma_url)
    exists = chroma_url is not None or Path(store).is_dir()
    if dry_run and not exists:
        plan = plan_sync(chunks, group_of, {}, top, name_of)
        return IndexReport(len(loaded), len(chunks), 0, skipped, plan, dry_run=True)
    if chroma_url is None and not dry_run:
        Path(store).mkdir(parents=True, exist_ok=True)
    vs = open_store(store, embeddings=embeddings, collection=collection, must_exist=False, chroma_url=chroma_url,
                    lexical=not dry_run)
    manager = SQLiteRecordManager(_namespace(chroma_url, collection), record_file)
    try:
        if isinstance(vs, HybridStore) and not in_step(vs.dense, vs.lexical):
            refill_lexical(vs.dense, vs.lexical)
        size = store_size(vs)
        readable = record_file.is_file() or not dry_run  # a dry run makes no record file
        recorded = manager.count() if readable else 0
        stale = recorded > size  # the store lost chunks the records describe: forget them, write again
        plan = plan_sync(chunks, group_of, {} if stale else (manager.groups() if recorded else {}), top, name_of)
        names = sorted({str(c.metadata["file"]) for c in chunks})
        known = manager.exists if readable else (lambda ids: [False] * len(ids))
        orphans = _unrecorded(vs, names, known) if size > (0 if stale else recorded) else []
        plan.unrecorded = len(orphans)
        if dry_run:
            return IndexReport(len(loaded), len(chunks), size, skipped, plan, dry_run=True)
        if stale:
            manager.clear()
        if orphans:
            vs.delete(ids=orphans)
        bar = tqdm(total=len(chunks), desc="indexing", unit="chunk", disable=not progress)
        sync_chunks(chunks, group_of, vs, manager, top, batch_size=batch_size, progress=bar.update)
        bar.close()
        return IndexReport(len(loaded), len(chunks), store_size(vs), skipped, plan)
    finally:
        manager.close()
        if isinstance(vs, HybridStore):
            vs.lexical.close()
