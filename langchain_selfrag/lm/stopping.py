"""When a generation stops and why: end of sequence, ``[Retrieval]``, or the next segment's marker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .. import tokens as T
from .protocol import StopHook, StopReason

#: The Retrieve tokens that open the next segment of a long-form answer (``stop_at_segment``).
SEGMENT_MARKERS = (T.NO_RETRIEVAL, T.CONTINUE)


def stop_hooks(stop: StopHook | Sequence[StopHook], n: int) -> list[StopHook]:
    """``stop`` as one hook per prompt: the same hook ``n`` times, or a sequence of ``n`` hooks."""
    if callable(stop):
        return [stop] * n
    hooks = list(stop)
    if len(hooks) != n:
        raise ValueError(f"{len(hooks)} stop hooks for {n} prompts")
    return hooks


class StopVocabulary(Protocol):
    """What :class:`_StopRule` reads of its backend (a :class:`~langchain_selfrag.lm.base.ReflectionLMBase`)."""

    eos_ids: set[int]
    reflection_ids: dict[str, int]
    has_reflection_vocab: bool

    def decode(self, ids: Sequence[int]) -> str: ...

    def _has_content(self, ids: Sequence[int]) -> bool: ...


class _StopRule:
    """When a generation stops and why: end of sequence, ``[Retrieval]``, the next segment."""

    def __init__(self, lm: StopVocabulary, stop_at_retrieval: bool, stop_at_segment: bool) -> None:
        self.lm = lm
        self.stop_ids = set(lm.eos_ids)
        if stop_at_retrieval and T.RETRIEVAL in lm.reflection_ids:
            self.stop_ids.add(lm.reflection_ids[T.RETRIEVAL])
        self.segment_ids = {lm.reflection_ids[t] for t in SEGMENT_MARKERS if t in lm.reflection_ids}
        self.stop_at_segment = stop_at_segment
        # Base vocabularies spell the markers in several tokens: look at the decoded text.
        self.text_retrieval = stop_at_retrieval and not lm.has_reflection_vocab
        self.text_segment = stop_at_segment and not lm.has_reflection_vocab

    def stop(self, generated: list[int]) -> bool:
        last = generated[-1]
        if last in self.stop_ids:
            return True
        if self.text_retrieval and self.lm.decode(generated[-8:]).endswith(T.RETRIEVAL):
            return True
        return self._ends_segment(generated)

    def _ends_segment(self, ids: list[int]) -> bool:
        if not self.stop_at_segment or not ids:
            return False
        if not self.text_segment:
            return ids[-1] in self.segment_ids and self.lm._has_content(ids[:-1])
        tail = self.lm.decode(ids[-16:])
        marker = next((m for m in SEGMENT_MARKERS if tail.endswith(m)), None)
        if marker is None:
            return False
        before = self.lm.decode([i for i in ids if i not in self.lm.eos_ids])
        return bool(before.endswith(marker) and T.strip_reflection_tokens(before[: -len(marker)]))

    def reason(self, ids: list[int], text: str, max_new_tokens: int) -> StopReason:
        if ids and ids[-1] in self.lm.eos_ids:
            return "eos"
        if ids and ids[-1] in self.stop_ids:
            return "retrieval"
        if self.text_retrieval and text.rstrip().endswith(T.RETRIEVAL):
            return "retrieval"
        if self._ends_segment(ids):
            return "segment"
        return "length" if len(ids) >= max_new_tokens else "eos"
