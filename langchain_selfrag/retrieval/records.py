"""A LangChain ``RecordManager`` in one SQLite file: which chunk ids were written, for which file, when.

``langchain_core.indexing.index`` asks it which chunks already exist (they are not embedded
again) and records every chunk it writes; :mod:`.sync` lists the records of files that are gone
or changed to delete their chunks. Guarantees: each ``update``/``delete_keys`` call is one SQLite
transaction (all or nothing); times are ``time.time()`` of this machine, and ``update`` refuses a
``time_at_least`` in the future (a clock that went backwards), as LangChain's SQL record manager
does; one file may hold many namespaces (one per store and collection). Concurrent writers are
serialised by SQLite's lock (``timeout`` seconds of waiting).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from langchain_core.indexing import RecordManager

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    group_id TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX IF NOT EXISTS records_group ON records (namespace, group_id, updated_at);
"""


class SQLiteRecordManager(RecordManager):
    """Records of one ``namespace`` in the SQLite file ``path`` (made on first use)."""

    def __init__(self, namespace: str, path: str | Path, *, timeout: float = 60.0) -> None:
        super().__init__(namespace)
        self.path = Path(path)
        self.timeout = timeout
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), timeout=self.timeout, check_same_thread=False)
            self._conn.executescript(_SCHEMA)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def create_schema(self) -> None:
        self._db()

    async def acreate_schema(self) -> None:
        self.create_schema()

    def get_time(self) -> float:
        return time.time()

    async def aget_time(self) -> float:
        return self.get_time()

    def update(self, keys: Sequence[str], *, group_ids: Sequence[str | None] | None = None,
               time_at_least: float | None = None) -> None:
        if group_ids is not None and len(keys) != len(group_ids):
            raise ValueError("Length of keys must match length of group_ids")
        now = self.get_time()
        if time_at_least is not None and time_at_least > now:
            raise ValueError(f"time_at_least ({time_at_least}) is in the future ({now}): the clock went backwards")
        groups = list(group_ids) if group_ids is not None else [None] * len(keys)
        with self._db() as db:
            db.executemany(
                "INSERT INTO records (namespace, key, group_id, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (namespace, key) DO UPDATE SET updated_at = excluded.updated_at, "
                "group_id = COALESCE(excluded.group_id, records.group_id)",
                [(self.namespace, key, group, now) for key, group in zip(keys, groups, strict=True)])

    async def aupdate(self, keys: Sequence[str], *, group_ids: Sequence[str | None] | None = None,
                      time_at_least: float | None = None) -> None:
        self.update(keys, group_ids=group_ids, time_at_least=time_at_least)

    def exists(self, keys: Sequence[str]) -> list[bool]:
        found: set[str] = set()
        db = self._db()
        for start in range(0, len(keys), 500):
            part = list(keys[start : start + 500])
            marks = ",".join("?" * len(part))
            found.update(row[0] for row in db.execute(
                f"SELECT key FROM records WHERE namespace = ? AND key IN ({marks})", [self.namespace, *part]))
        return [key in found for key in keys]

    async def aexists(self, keys: Sequence[str]) -> list[bool]:
        return self.exists(keys)

    def list_keys(self, *, before: float | None = None, after: float | None = None,
                  group_ids: Sequence[str] | None = None, limit: int | None = None) -> list[str]:
        sql, args = "SELECT key FROM records WHERE namespace = ?", [self.namespace]
        if before is not None:
            sql, args = sql + " AND updated_at < ?", [*args, before]
        if after is not None:
            sql, args = sql + " AND updated_at > ?", [*args, after]
        if group_ids is not None:
            if not group_ids:
                return []
            sql += f" AND group_id IN ({','.join('?' * len(group_ids))})"
            args.extend(group_ids)
        sql += " ORDER BY key"
        if limit:
            sql, args = sql + " LIMIT ?", [*args, limit]
        return [row[0] for row in self._db().execute(sql, args)]

    async def alist_keys(self, *, before: float | None = None, after: float | None = None,
                         group_ids: Sequence[str] | None = None, limit: int | None = None) -> list[str]:
        return self.list_keys(before=before, after=after, group_ids=group_ids, limit=limit)

    def delete_keys(self, keys: Sequence[str]) -> None:
        with self._db() as db:
            db.executemany("DELETE FROM records WHERE namespace = ? AND key = ?", [(self.namespace, k) for k in keys])

    async def adelete_keys(self, keys: Sequence[str]) -> None:
        self.delete_keys(keys)

    # -- beyond the RecordManager interface: what :mod:`.sync` needs to plan -------------------------
    def groups(self) -> dict[str, set[str]]:
        """Every group id of the namespace with its keys."""
        out: dict[str, set[str]] = {}
        for key, group in self._db().execute("SELECT key, group_id FROM records WHERE namespace = ?",
                                             [self.namespace]):
            out.setdefault(group or "", set()).add(key)
        return out

    def count(self) -> int:
        return int(self._db().execute("SELECT COUNT(*) FROM records WHERE namespace = ?",
                                      [self.namespace]).fetchone()[0])

    def clear(self) -> None:
        """Forget every record of the namespace (when the store no longer holds what they describe)."""
        with self._db() as db:
            db.execute("DELETE FROM records WHERE namespace = ?", [self.namespace])
