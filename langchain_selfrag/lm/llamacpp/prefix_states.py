"""Passages read once: the llama.cpp KV-cache state of a prompt's passage, kept on disk by its tokens.

A model whose questions put the passage first (the ``chatml-questions`` layout) reads the same passage,
as the same tokens at the same positions, in every question that retrieves it. The KV cells of that
prefix (``llama_state_seq_get_data``) are saved under a hash of the model and the tokens and restored
into a sequence instead of decoded again (``llama_state_seq_set_data``): the IsRel questions about
passages read before prefill only their question part. Restored cells differ from freshly decoded ones
as much as two batch layouts do (measured: IsRel within 0.02, the spread of the layouts themselves).

The folder keeps at most ``$SELFRAG_PREFIX_CACHE_MB`` (default 1024; 0 turns it off), the least
recently used states leaving first. A 1.5B Qwen2 passage of 190 tokens is about 5.4 MB (f16 cells).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["DEFAULT_MAX_MB", "PrefixStates", "passage_prefix_length", "prefix_cache_mb"]

DEFAULT_MAX_MB = 1024
ENV_MAX_MB = "SELFRAG_PREFIX_CACHE_MB"
SUFFIX = ".kv"


def prefix_cache_mb() -> int:
    """``$SELFRAG_PREFIX_CACHE_MB`` (0 turns the cache off), else :data:`DEFAULT_MAX_MB`."""
    raw = os.environ.get(ENV_MAX_MB, "").strip()
    if not raw:
        return DEFAULT_MAX_MB
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"${ENV_MAX_MB} must be a whole number of megabytes, not {raw!r}") from None
    if value < 0:
        raise ValueError(f"${ENV_MAX_MB} must be 0 (off) or more, not {value}")
    return value


def passage_prefix_length(pieces: Sequence[bytes], marker: bytes, shortest: int = 0) -> int | None:
    """How many leading tokens lie wholly before the last ``marker`` in the text ``pieces`` spell.

    The token that holds the marker's first byte is left out (a tokenizer may join it to the passage's
    last character): what remains is the passage as every question about it tokenizes it. None when
    the marker is absent or ``shortest`` tokens or fewer come before it.
    """
    text = b"".join(pieces)
    at = text.rfind(marker) if marker else -1
    if at < 0:
        return None
    end = 0
    for n, piece in enumerate(pieces):
        end += len(piece)
        if end > at:
            return n if n > shortest else None
    return None


class PrefixStates:
    """KV-cache states of prompt prefixes under ``folder``, named by ``model_key`` and the prefix's tokens.

    ``max_bytes`` bounds the folder; :meth:`put` removes the least recently used states beyond it.
    Writes are atomic (a temporary file renamed), so processes sharing the folder never read half a state.
    """

    def __init__(self, folder: str | os.PathLike, model_key: str, max_bytes: int) -> None:
        self.folder = Path(folder)
        self.model_key = model_key
        self.max_bytes = int(max_bytes)

    def path_of(self, ids: Sequence[int]) -> Path:
        digest = hashlib.sha256(self.model_key.encode("utf-8"))
        digest.update(np.asarray(ids, dtype="<i4").tobytes())
        return self.folder / (digest.hexdigest()[:40] + SUFFIX)

    def has(self, ids: Sequence[int]) -> bool:
        return self.path_of(ids).is_file()

    def get(self, ids: Sequence[int]) -> bytes | None:
        """The state saved for ``ids`` (marked as just used), or None."""
        path = self.path_of(ids)
        try:
            data = path.read_bytes()
            os.utime(path)
        except OSError:  # absent, or removed by another process's eviction meanwhile
            return None
        return data or None

    def put(self, ids: Sequence[int], data: bytes) -> None:
        """Save ``data`` for ``ids``, then keep the folder within ``max_bytes``; a state larger than
        that is not kept, and a folder that cannot be written only loses the speed-up."""
        if not data or len(data) > self.max_bytes:
            return
        path = self.path_of(ids)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            return
        self.evict(keep=path)

    def size(self) -> int:
        """The bytes the folder's states take."""
        return sum(size for _, size, _ in self._files())

    def _files(self) -> list[tuple[int, int, Path]]:
        """(last use, bytes, path) of each saved state."""
        files: list[tuple[int, int, Path]] = []
        try:
            entries = list(os.scandir(self.folder))
        except OSError:
            return files
        for entry in entries:
            if entry.name.endswith(SUFFIX):
                try:
                    stat = entry.stat()
                except OSError:
                    continue
                files.append((stat.st_mtime_ns, stat.st_size, Path(entry.path)))
        return files

    def evict(self, keep: Path | None = None) -> None:
        """Remove the least recently used states until the folder holds at most ``max_bytes``."""
        files = self._files()
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files, key=lambda f: f[0]):
            if total <= self.max_bytes:
                break
            if path == keep:
                continue
            path.unlink(missing_ok=True)
            total -= size
