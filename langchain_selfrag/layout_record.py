"""Where a model records its prompt layout, and reading it back (thin adapters over files).

* a GGUF file: the string metadata key ``selfrag.prompt_layout``;
* a transformers folder: ``selfrag_prompt_layout`` in ``config.json``;
* a training output or PEFT adapter folder: the same key in ``selfrag_training.json``.

A model with no record has the paper's layout (:data:`~langchain_selfrag.prompt_layouts.PAPER_LAYOUT`).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from pathlib import Path

from .prompt_layouts import CONFIG_KEY, GGUF_KEY, PromptLayout, PromptLayoutError, layout_named

_GGUF_MAGIC = b"GGUF"
# GGUF value types: sizes of the fixed-size ones; 8 is a string, 9 an array
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


def gguf_string_value(path: str | os.PathLike, key: str) -> str | None:
    """The string value of metadata ``key`` in the GGUF file at ``path``, None when the file has no such key.

    Reads the header only (pure Python, no llama.cpp or gguf package). Raises
    :class:`PromptLayoutError` for a file that is not GGUF or whose header is cut short.
    """
    path = Path(path)
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        try:
            if buf[:4] != _GGUF_MAGIC:
                raise PromptLayoutError(f"{path} is not a GGUF file")
            version, _, n_kv = struct.unpack_from("<IQQ", buf, 4)
            if version < 2:
                raise PromptLayoutError(f"{path}: GGUF version {version} is too old")
            pos = 24
            for _ in range(n_kv):
                (n,) = struct.unpack_from("<Q", buf, pos)
                name = bytes(buf[pos + 8 : pos + 8 + n]).decode("utf-8", "replace")
                pos += 8 + n
                (vtype,) = struct.unpack_from("<I", buf, pos)
                pos += 4
                if name == key:
                    if vtype != _STRING:
                        raise PromptLayoutError(f"{path}: {key} is not a string")
                    (n,) = struct.unpack_from("<Q", buf, pos)
                    return bytes(buf[pos + 8 : pos + 8 + n]).decode("utf-8")
                pos = _skip(buf, pos, vtype)
        except struct.error as exc:
            raise PromptLayoutError(f"{path}: the GGUF header is cut short ({exc})") from None
    return None


def _skip(buf, pos: int, vtype: int) -> int:
    if vtype in _FIXED:
        return pos + _FIXED[vtype]
    if vtype == _STRING:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if vtype == _ARRAY:
        item, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if item in _FIXED:
            return pos + _FIXED[item] * count
        for _ in range(count):
            pos = _skip(buf, pos, item)
        return pos
    raise PromptLayoutError(f"unknown GGUF value type {vtype}")


def folder_record(folder: str | os.PathLike) -> str | None:
    """The layout name a transformers folder (``config.json``) or a training output / adapter folder
    (``selfrag_training.json``) records, None when it records none."""
    folder = Path(folder)
    for name in ("config.json", "selfrag_training.json"):
        path = folder / name
        if not path.is_file():
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise PromptLayoutError(f"{path} is not JSON: {exc}") from None
        value = record.get(CONFIG_KEY) if isinstance(record, dict) else None
        if value is not None:
            if not isinstance(value, str):
                raise PromptLayoutError(f"{path}: {CONFIG_KEY} must be a string, not {value!r}")
            return value
    return None


def path_record(path: str | os.PathLike | None) -> str | None:
    """The layout name the model at ``path`` (a GGUF file or a folder) records, None when it records none."""
    if path is None:
        return None
    path = Path(path)
    if path.is_dir():
        return folder_record(path)
    if path.is_file() and path.suffix.lower() == ".gguf":
        return gguf_string_value(path, GGUF_KEY)
    return None


def layout_of_path(path: str | os.PathLike | None) -> PromptLayout:
    """The layout the model at ``path`` records; the paper's when it records none."""
    return layout_named(path_record(path))


def layout_of_sources(*records: str | None) -> PromptLayout:
    """The layout of the first record that is not None (an adapter's before its base's); the paper's if none."""
    return layout_named(next((r for r in records if r is not None), None))
