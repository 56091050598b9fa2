"""The lexical index of an embedded store: Okapi BM25 over its chunks, in one SQLite file beside Chroma.

SQLite's FTS5 (part of Python's ``sqlite3``: no server, no new dependency) ranks by BM25 with porter
stemming. Each chunk is indexed as :func:`headed_text` (its document's title and section path, then
its text), so a question that names a command, an option or a section finds the chunk under it; the
chunk itself (text and metadata) is kept as Chroma holds it, so a chunk found by both indexes is the
same document. :class:`~.hybrid.HybridStore` keeps the index in step with the Chroma collection.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from langchain_core.documents import Document

from .loading import section_heading

#: The lexical index's file inside an embedded store's folder.
LEXICAL_FILE = "selfrag-lexical.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    rowid INTEGER PRIMARY KEY,
    collection TEXT NOT NULL,
    id TEXT NOT NULL,
    content TEXT NOT NULL,
    metadata TEXT NOT NULL,
    UNIQUE (collection, id)
);
CREATE VIRTUAL TABLE IF NOT EXISTS terms USING fts5(text, tokenize = 'porter unicode61');
"""
_WORD = re.compile(r"\w+")


def headed_text(doc: Document) -> str:
    """The text a chunk is indexed by: ``Title > Section > Subsection`` on the first line (the parts
    the chunk's metadata has), then the chunk."""
    head = section_heading(str(doc.metadata.get("title") or "").strip(), doc.metadata.get("section"))
    return f"{head}\n{doc.page_content}" if head else doc.page_content


def match_query(text: str) -> str:
    """An FTS5 query for any word of ``text``, each quoted (no word is read as an operator); empty when
    the text has no word."""
    return " OR ".join(f'"{w}"' for w in dict.fromkeys(_WORD.findall(text.lower())))


class LexicalIndex:
    """The chunks of one collection in the SQLite file ``path`` (made on first use; ``":memory:"`` for none)."""

    def __init__(self, path: str | Path, collection: str, *, timeout: float = 60.0) -> None:
        self.path = path if str(path) == ":memory:" else Path(path)
        self.collection = collection
        self._lock = threading.Lock()
        if isinstance(self.path, Path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(self.path), timeout=timeout, check_same_thread=False)
        self._conn.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def count(self) -> int:
        """Chunks of the collection in the index."""
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM chunks WHERE collection = ?",
                                          (self.collection,)).fetchone()[0])

    def add(self, ids: Sequence[str], docs: Sequence[Document]) -> None:
        """Index the chunks under their store ids, replacing any chunk already indexed under one (one transaction)."""
        if len(ids) != len(docs):
            raise ValueError(f"{len(ids)} ids for {len(docs)} chunks")
        with self._lock, self._conn:
            self._delete(ids)
            for chunk_id, doc in zip(ids, docs):
                cur = self._conn.execute("INSERT INTO chunks (collection, id, content, metadata) VALUES (?, ?, ?, ?)",
                                         (self.collection, chunk_id, doc.page_content,
                                          json.dumps(doc.metadata, ensure_ascii=False, sort_keys=True)))
                self._conn.execute("INSERT INTO terms (rowid, text) VALUES (?, ?)", (cur.lastrowid, headed_text(doc)))

    def delete(self, ids: Iterable[str]) -> None:
        """Drop the chunks with these store ids (ids not in the index are ignored)."""
        with self._lock, self._conn:
            self._delete(list(ids))

    def _delete(self, ids: Sequence[str]) -> None:
        for first in range(0, len(ids), 500):  # SQLite's limit on bound parameters
            batch = list(ids[first : first + 500])
            marks = ",".join("?" * len(batch))
            rows = [r[0] for r in self._conn.execute(
                f"SELECT rowid FROM chunks WHERE collection = ? AND id IN ({marks})", (self.collection, *batch))]
            self._conn.executemany("DELETE FROM terms WHERE rowid = ?", [(r,) for r in rows])
            self._conn.executemany("DELETE FROM chunks WHERE rowid = ?", [(r,) for r in rows])

    def clear(self) -> None:
        """Drop every chunk of the collection."""
        with self._lock, self._conn:
            rows = [(r[0],) for r in self._conn.execute("SELECT rowid FROM chunks WHERE collection = ?",
                                                         (self.collection,))]
            self._conn.executemany("DELETE FROM terms WHERE rowid = ?", rows)
            self._conn.execute("DELETE FROM chunks WHERE collection = ?", (self.collection,))

    def ids(self) -> set[str]:
        """The store ids of the collection's indexed chunks."""
        with self._lock:
            return {r[0] for r in self._conn.execute("SELECT id FROM chunks WHERE collection = ?", (self.collection,))}

    def search(self, query: str, k: int = 4) -> list[Document]:
        """The ``k`` chunks of the collection that match a word of ``query`` best by BM25, best first
        (each with its store id as ``Document.id``); none when the query has no word."""
        match = match_query(query)
        if not match or k < 1:
            return []
        with self._lock:
            rows = self._conn.execute(
                "SELECT c.id, c.content, c.metadata FROM terms JOIN chunks c ON c.rowid = terms.rowid "
                "WHERE terms MATCH ? AND c.collection = ? ORDER BY bm25(terms), c.rowid LIMIT ?",
                (match, self.collection, k)).fetchall()
        return [Document(content, metadata=json.loads(meta), id=chunk_id) for chunk_id, content, meta in rows]
