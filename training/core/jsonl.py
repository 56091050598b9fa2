"""The JSONL files of the recipes: reading with line numbers in errors, and writing."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from langchain_selfrag.jsonl import iter_jsonl


class DataFormatError(ValueError):
    """A data file does not have the expected structure."""


def read_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """Yield the JSON objects of a JSONL file, with the line number in any error."""
    return (obj for _, obj in iter_jsonl(path, DataFormatError))


def write_jsonl(path: str | os.PathLike, rows) -> int:
    """Write dicts as JSONL (parent folders created); returns the number of rows."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n
