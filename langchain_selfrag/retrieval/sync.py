"""Keeping a store in step with a folder: LangChain's indexing API plus a sweep of what is gone.

Every chunk's id is a hash of its file's absolute path, its text and its metadata (:func:`.loading.chunk_id`);
the record manager (:class:`~.records.SQLiteRecordManager`) remembers which ids were written for
which file (the group). :func:`plan_sync` compares the chunks of a folder with those records:
files whose chunks are all recorded are unchanged (nothing is embedded), files with new chunks are
added or changed, files with records but no longer under the folder are removed.
:func:`sync_chunks` writes the plan with ``langchain_core.indexing.index`` (skips recorded chunks,
writes the rest in batches, records them only after the store accepted them) and then deletes the
chunks of the folder's files that this run did not produce (changed and gone files) through the
same record-manager calls that ``index(cleanup=...)`` makes. Only files under the folder being
indexed are ever deleted: indexing another folder into the same store leaves this one alone.

An interrupted run leaves the store holding what it wrote plus the old chunks (nothing is deleted
before everything was written); the next run skips what was written and finishes, with no chunk
twice (ids are content hashes, and Chroma upserts).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore

from .loading import chunk_id
from .records import SQLiteRecordManager

def under(group: str, root: Path) -> bool:
    """Whether the file ``group`` (an absolute path) is ``root`` or lies below it."""
    top = str(root)
    return group == top or group.startswith(top.rstrip(os.sep) + os.sep)


@dataclass
class SyncPlan:
    """What re-indexing a folder does: files (as given in ``source``) and chunk counts."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    chunks_to_embed: int = 0
    chunks_kept: int = 0
    chunks_to_delete: int = 0
    #: Chunks in the store written before records were kept: replaced file by file (first sync only).
    unrecorded: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_sync(chunks: Sequence[Document], group_of: Callable[[Document], str], records: dict[str, set[str]],
              root: Path, name_of: Callable[[str], str]) -> SyncPlan:
    """Compare a folder's chunks with the records.

    ``group_of`` gives a chunk's file as an absolute path; ``records`` maps each recorded file to
    its chunk ids; ``name_of`` turns an absolute path into the name shown to the user.
    """
    new: dict[str, set[str]] = {}
    for doc in chunks:
        group = group_of(doc)
        new.setdefault(group, set()).add(chunk_id(doc, group))
    plan = SyncPlan()
    for group in sorted(new):
        old = records.get(group, set())
        keys = new[group]
        (plan.unchanged if keys == old else plan.changed if old else plan.added).append(name_of(group))
        plan.chunks_to_embed += len(keys - old)
        plan.chunks_kept += len(keys & old)
        plan.chunks_to_delete += len(old - keys)
    for group in sorted(g for g in records if under(g, root) and g not in new):
        plan.removed.append(name_of(group))
        plan.chunks_to_delete += len(records[group])
    return plan


def sync_chunks(chunks: Sequence[Document], group_of: Callable[[Document], str], store: VectorStore,
                records: SQLiteRecordManager, root: Path, *, batch_size: int = 256,
                progress: Callable[[int], None] | None = None) -> dict[str, int]:
    """Write ``chunks`` with ``langchain_core.indexing.index``, then delete the folder's chunks this run
    did not produce. Returns ``index``'s counts plus ``num_deleted``."""
    from langchain_core.indexing import index

    start = records.get_time()

    def counted(docs: Iterable[Document]) -> Iterator[Document]:
        for doc in docs:
            yield doc
            if progress is not None:
                progress(1)

    result = dict(index(counted(chunks), records, store, batch_size=batch_size, cleanup=None,
                        source_id_key=group_of, key_encoder=lambda d: chunk_id(d, group_of(d))))
    folder_groups = [g for g in records.groups() if under(g, root)]
    deleted = 0
    for first in range(0, len(folder_groups), 500):  # SQLite's limit on bound parameters
        while keys := records.list_keys(before=start, group_ids=folder_groups[first : first + 500], limit=1000):
            store.delete(ids=keys)
            records.delete_keys(keys)
            deleted += len(keys)
    result["num_deleted"] = deleted
    return result
