"""The server's tokenizer for the remote backend, cached, and texts that re-tokenize to given ids."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ..protocol import ReflectionLMError


class LruCache(OrderedDict):
    """A dict that forgets its least recently written entries beyond ``size``.

    Writes hold a lock of their own: ``tokenize`` runs in callers' threads beside a model call
    (see :mod:`langchain_selfrag.lm.scheduler`), and a write is three steps.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self._lock = threading.Lock()

    def __setitem__(self, key, value) -> None:
        with self._lock:
            super().__setitem__(key, value)
            self.move_to_end(key)
            if len(self) > self.size:
                self.popitem(last=False)


class TokenizerMixin:
    """Tokenize and decode through the server (mixed into :class:`~.model.RemoteReflectionLM`)."""

    def _remote_tokenize(self, text: str, *, add_bos: bool, retries: int | None = None) -> list[int]:
        caps = self.capabilities
        if caps.tokenize_path == "/tokenize":
            body = {"model": caps.model, "prompt": text, "add_special_tokens": add_bos}
        else:
            body = {"input": text}
        out = self._http.request("POST", caps.tokenize_path, body, retries=retries)
        ids = out.get("tokens") if isinstance(out, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise ReflectionLMError(f"malformed response from {caps.tokenize_path}: {str(out)[:200]}")
        return ids

    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        """The server's tokenization (cached); safe beside a running request (httpx's client is)."""
        key = (text, add_bos)
        ids = self._tok_cache.get(key)
        if ids is None:
            if self.capabilities.tokenize_path == "/tokenize":
                ids = self._remote_tokenize(text, add_bos=add_bos)
            else:  # /extras/tokenize adds BOS whenever the model wants one
                ids = self._remote_tokenize(text, add_bos=True)
                bos = self._bos_prefix()
                if not add_bos and bos and ids[: len(bos)] == bos:
                    ids = ids[len(bos):]
            self._tok_cache[key] = ids
            if add_bos and tuple(ids) not in self._texts:
                self._texts[tuple(ids)] = text
        return list(ids)

    def _bos_prefix(self) -> list[int]:
        """What the server's tokenizer puts before any text (BOS, or nothing)."""
        if self._bos is None:
            self._bos = self._remote_tokenize("", add_bos=True)
        return self._bos

    def decode(self, ids: Sequence[int]) -> str:
        if not self._splice_specials:
            return self._remote_decode(list(ids)) if ids else ""
        out: list[str] = []
        run: list[int] = []
        for tid in ids:
            piece = self.id_to_reflection.get(tid, self._pieces.get(tid))
            if piece is None and tid >= 0:
                run.append(tid)
                continue
            if run:
                out.append(self._remote_decode(run))
                run = []
            out.append(piece or "")
        if run:
            out.append(self._remote_decode(run))
        return "".join(out)

    def _remote_decode(self, ids: list[int]) -> str:
        caps = self.capabilities
        body: dict[str, Any] = {"tokens": ids}
        if caps.detokenize_path == "/detokenize":
            body["model"] = caps.model
        try:
            out = self._http.request("POST", caps.detokenize_path, body)
        except ReflectionLMError:
            if len(ids) == 1:  # e.g. a lone byte of a multi-byte character
                return "\ufffd"
            return "".join(self._remote_decode([i]) for i in ids)
        text = out.get("prompt", out.get("text")) if isinstance(out, dict) else None
        if not isinstance(text, str):
            raise ReflectionLMError(f"malformed response from {caps.detokenize_path}: {str(out)[:200]}")
        return text

    def _context_text(self, ids: list[int]) -> str:
        """Text whose server-side tokenization is ``ids`` (text mode); approximate if none is."""
        text = None
        for cut in range(len(ids), 0, -1):
            known = self._texts.get(tuple(ids[:cut]))
            if known is not None:
                if cut == len(ids):
                    return known
                text = known + self.decode(ids[cut:])
                break
        if text is None:
            bos = self._bos_prefix()
            text = self.decode(ids[len(bos):] if bos and ids[: len(bos)] == bos else ids)
        if self.tokenize(text, add_bos=True) != ids:
            self._mark_approximate("a context built from generated tokens re-tokenizes differently")
        return text
