"""The resumable record files of a run: one JSONL file per system, one record per finished question."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_records(path: Path) -> dict[str, dict[str, Any]]:
    """Finished records of one system by example id (a torn last line from a crash is ignored)."""
    records: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "id" in record:
            records[str(record["id"])] = record
    return records


def repair_records(path: Path) -> None:
    """Drop a torn last line (a run killed mid-write) so that appended records start on a new line."""
    if not path.exists():
        return
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        keep = text.splitlines(keepends=True)[:-1]
        path.write_text("".join(keep), encoding="utf-8")
