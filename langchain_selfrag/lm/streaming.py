"""Streamed answer text (``generate(on_token=...)``): what of a growing generation is settled."""

from __future__ import annotations

import re

from .. import tokens as T
from .protocol import TokenCallback

#: Strings that may still be growing into a reflection token (or ``</s>``) at the end of a text.
_MARKUP = (*T.REFLECTION_TOKENS, "</s>")
_EVIDENCE_SPAN = re.compile(re.escape(T.PARAGRAPH_START) + r".*?" + re.escape(T.PARAGRAPH_END), re.DOTALL)


def settled_answer(text: str) -> str:
    """The answer text of a generation so far that later tokens cannot change (pure).

    ``T.strip_reflection_tokens`` of ``text`` cut before an evidence paragraph still open, a tail
    that may be the start of a reflection token or ``</s>``, and trailing U+FFFD (a character whose
    UTF-8 bytes are not all decoded yet).
    """
    end = 0
    for match in _EVIDENCE_SPAN.finditer(text):
        end = match.end()
    open_at = text.find(T.PARAGRAPH_START, end)
    if open_at >= 0:
        text = text[:open_at]
    text = text[: len(text) - _partial_markup(text)].rstrip("\ufffd")
    return T.strip_reflection_tokens(text)


def _partial_markup(text: str) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of a markup string."""
    longest = 0
    for mark in _MARKUP:
        for n in range(min(len(mark) - 1, len(text)), longest, -1):
            if text.endswith(mark[:n]):
                longest = n
                break
    return longest


class AnswerStream:
    """One prompt's answer text, passed on piece by piece as its tokens are decoded.

    :meth:`update` takes the whole generated text so far (reflection tokens kept) after each token
    and sends ``on_token(index, piece)`` what became certain: the :func:`settled_answer` text
    common to this update and the previous one (one token late, so a tokenizer that rewrites the
    end of a text when the next token comes, e.g. ``" n't"``, cannot change what was sent), and only
    when it extends what was sent. :meth:`finish` sends the rest of the final answer.
    """

    def __init__(self, on_token: TokenCallback, index: int) -> None:
        self.on_token = on_token
        self.index = index
        self.sent = ""
        self._last: str | None = None

    def update(self, text: str) -> None:
        current = settled_answer(text)
        last, self._last = self._last, current
        if last is not None:
            self._send(_common_prefix(last, current))

    def finish(self, answer: str) -> None:
        self._send(answer)

    def _send(self, ready: str) -> None:
        if len(ready) > len(self.sent) and ready.startswith(self.sent):
            piece, self.sent = ready[len(self.sent) :], ready
            self.on_token(self.index, piece)


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]
