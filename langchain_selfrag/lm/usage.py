"""Token usage of one run: what the model calls made inside it read and wrote.

:func:`counting_tokens` opens a count in the current context; every model call made through the
model's :class:`~langchain_selfrag.lm.scheduler.BatchScheduler` from that context (graph nodes run
in copies of it, threads and tasks alike) adds the tokens of its prompts (``input_tokens``: each
prompt of each call, so a prompt read by two calls counts twice, as a server bills it) and the
tokens it generated (``output_tokens``: every candidate segment, not only the answer chosen).
``ChatSelfRAG`` reports it as ``usage_metadata``. Without an open count nothing is counted.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

__all__ = ["TokenUsage", "counting_tokens", "current_usage"]


@dataclass
class TokenUsage:
    """Tokens read (``input_tokens``) and generated (``output_tokens``) by the calls counted so far."""

    input_tokens: int = 0
    output_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, *, input_tokens: int = 0, output_tokens: int = 0) -> None:
        with self._lock:  # calls of one run may finish in several threads at once
            self.input_tokens += input_tokens
            self.output_tokens += output_tokens

    def as_usage_metadata(self) -> dict[str, int]:
        """LangChain's ``UsageMetadata``: input, output and total tokens."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "total_tokens": self.input_tokens + self.output_tokens}


_current: ContextVar[TokenUsage | None] = ContextVar("selfrag_token_usage", default=None)


def current_usage() -> TokenUsage | None:
    """The count open in this context, if any."""
    return _current.get()


@contextlib.contextmanager
def counting_tokens() -> Iterator[TokenUsage]:
    """Count the tokens of the model calls made in this context (and its copies) until the block ends."""
    usage = TokenUsage()
    token = _current.set(usage)
    try:
        yield usage
    finally:
        _current.reset(token)
