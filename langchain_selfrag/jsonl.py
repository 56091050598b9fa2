"""Reading JSONL files with errors that name the file and line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any


def iter_jsonl(
    path: str | os.PathLike, error: type[Exception] = ValueError, *, encoding_errors: str = "strict"
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; bad JSON or a non-object raises ``error``."""
    try:
        fh = open(path, encoding="utf-8", errors=encoding_errors)
    except FileNotFoundError as exc:
        raise error(f"file not found: {path}") from exc
    with fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{path}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(record, dict):
                raise error(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            yield lineno, record
