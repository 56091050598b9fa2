"""Fit retrieved passages into the model's context: the token budget of one evidence passage.

A passage is cut, never the question: an evidence prompt is the question prompt (plus, in long
form, earlier segments), the markup ``[Retrieval]<paragraph>title\\n`` ... ``</paragraph>`` and the
passage text, and must leave room for the segment the model generates. :func:`passage_budget` and
:func:`fit_text` are the arithmetic (no model needed); :class:`EvidenceFitter` applies them with a
model's own tokenizer. A question whose prompt cannot fit even without passages raises
:class:`~langchain_selfrag.errors.QuestionExceedsContextError` (see :func:`check_prompt_fits`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import QuestionExceedsContextError
from .prompt_layouts import PromptLayout
from .prompts import with_evidence
from .tokens import neutralise

#: Tokens kept free per segment beyond ``max_new_tokens``: the IsRel / IsSup / IsUse candidates
#: scored after the generated text (a base vocabulary spells one in up to ~10 tokens) and
#: re-tokenisation where the cut passage meets the markup around it.
RESERVED_TOKENS = 16


@dataclass(frozen=True)
class FittedPassage:
    """A passage text as it goes into the prompt: ``tokens`` kept of ``total``."""

    text: str
    tokens: int
    total: int

    @property
    def truncated(self) -> bool:
        return self.tokens < self.total


def passage_budget(
    context_length: int | None,
    frame_tokens: int,
    wrapper_tokens: int,
    max_new_tokens: int,
    *,
    segments: int = 1,
    limit: int | None = None,
    reserve: int = RESERVED_TOKENS,
) -> int | None:
    """Tokens of passage text one evidence prompt may hold (None: no limit at all).

    frame_tokens: the evidence prompt with an empty passage text (question prompt, earlier
    segments, this passage's markup and title). wrapper_tokens: markup and title alone, held free
    for each later segment's passage. segments: segments still to generate, this one included (1
    in short form); the free room is split evenly between their passages, so a long-form answer
    never runs out of context at a later depth. limit: ``max_passage_tokens`` cap, if any.
    Negative when even an empty passage does not fit (the title must be cut too).
    """
    if segments < 1:
        raise ValueError(f"segments must be at least 1, not {segments}")
    if context_length is None:
        return limit
    per_segment = max_new_tokens + reserve
    free = context_length - frame_tokens - per_segment - (segments - 1) * (wrapper_tokens + per_segment)
    room = free // segments if free >= 0 else free
    return room if limit is None else min(room, limit)


def fit_text(text: str, budget: int | None, tokenize: Callable[[str], Sequence[int]],
             decode: Callable[[Sequence[int]], str]) -> FittedPassage:
    """``text`` cut to its first ``budget`` tokens (decoded back to text); whole when it fits."""
    ids = list(tokenize(text)) if text else []
    if budget is None or len(ids) <= budget:
        return FittedPassage(text, len(ids), len(ids))
    keep = max(budget, 0)
    kept = decode(ids[:keep]).rstrip("\ufffd") if keep else ""  # no half of a multi-byte character
    return FittedPassage(kept, keep, len(ids))


def prompt_room(context_length: int, prompt_tokens: int, max_new_tokens: int, *, segments: int = 1,
                reserve: int = RESERVED_TOKENS) -> int:
    """Tokens left over once the prompt and ``segments`` generated segments are in (negative: too long)."""
    return context_length - prompt_tokens - segments * (max_new_tokens + reserve)


def context_length_of(lm: Any) -> int | None:
    """The model's context length (``lm.context_length``), None when it does not say."""
    value = getattr(lm, "context_length", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def can_tokenize(lm: Any) -> bool:
    return callable(getattr(lm, "tokenize", None)) and callable(getattr(lm, "decode", None))


def prompt_tokens(lm: Any, prompt: str) -> int:
    """Tokens of ``prompt`` as ``lm`` reads it: laid out in the model's own prompt layout first."""
    layout = getattr(lm, "prompt_layout", None)
    laid_out = layout.render(prompt) if isinstance(layout, PromptLayout) else prompt
    return len(lm.tokenize(laid_out, add_bos=True))


def check_prompt_fits(lm: Any, prompt: str, max_new_tokens: int, *, segments: int = 1) -> None:
    """Raise QuestionExceedsContextError when ``prompt`` plus its answer cannot fit the model's context.

    Does nothing for a model without a tokenizer or a known context length.
    """
    n_ctx = context_length_of(lm)
    if n_ctx is None or not can_tokenize(lm):
        return
    n_prompt = prompt_tokens(lm, prompt)
    if prompt_room(n_ctx, n_prompt, max_new_tokens, segments=segments) < 0:
        raise QuestionExceedsContextError(n_prompt, segments * (max_new_tokens + RESERVED_TOKENS), n_ctx)


class EvidenceFitter:
    """Evidence prompts whose passage text is cut, with ``lm``'s tokenizer, to fit the context.

    max_new_tokens: the segment budget. segments: segments still to generate (this one included).
    limit: ``max_passage_tokens`` (None: whatever fits). Without a tokenizer on ``lm``, or without
    a context length and a limit, passages go in whole.
    """

    def __init__(self, lm: Any, max_new_tokens: int, *, segments: int = 1, limit: int | None = None) -> None:
        self.lm = lm
        self.context_length = context_length_of(lm)
        self.max_new_tokens = max_new_tokens
        self.segments = segments
        self.limit = limit
        self.active = can_tokenize(lm) and (self.context_length is not None or limit is not None)
        self._counts: dict[str, int] = {}

    def _count(self, prompt: str) -> int:
        if prompt not in self._counts:
            self._counts[prompt] = prompt_tokens(self.lm, prompt)
        return self._counts[prompt]

    def _fit(self, text: str, budget: int | None) -> FittedPassage:
        return fit_text(text, budget, lambda s: self.lm.tokenize(s, add_bos=False), self.lm.decode)

    def prompt(self, base: str, title: str | None, text: str) -> tuple[str, FittedPassage | None]:
        """``with_evidence(base, title, text)`` with ``text`` fitted; None as the fit when inactive."""
        if not self.active:
            return with_evidence(base, title, text), None
        frame = self._count(with_evidence(base, title, ""))
        wrapper = frame - self._count(base)
        budget = passage_budget(self.context_length, frame, wrapper, self.max_new_tokens,
                                segments=self.segments, limit=self.limit)
        fitted = self._fit(neutralise(text), max(budget, 0) if budget is not None else None)
        if budget is not None and budget < 0 and title:  # even the title overflows: cut it too
            safe = neutralise(title)
            title = self._fit(safe, max(len(self.lm.tokenize(safe, add_bos=False)) + budget, 0)).text
        return with_evidence(base, title, fitted.text), fitted
