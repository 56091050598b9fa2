"""The questions of a QA data set: :class:`Example`, :class:`Passage` and :class:`Dataset`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Passage:
    """One passage of a data set's own corpus."""

    title: str
    text: str
    id: str = ""


@dataclass
class Example:
    """One evaluation question.

    answers: gold answer strings (empty for an unanswerable question).
    answerable: False for unanswerable questions, None when the data set does not say.
    options: label -> text for multiple choice; ``label`` is then the gold option label.
    passages: passages given with the question (Self-RAG ``ctxs``), in their given order.
    gold_passage: id of the corpus passage the question was written from (SQuAD).
    """

    id: str
    question: str
    answers: list[str] = field(default_factory=list)
    answerable: bool | None = None
    options: dict[str, str] | None = None
    label: str | None = None
    instruction: str | None = None
    passages: list[Passage] | None = None
    gold_passage: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Dataset:
    """Examples plus the pooled corpus of the data set's own passages (possibly empty)."""

    name: str
    format: str
    examples: list[Example]
    corpus: list[Passage] = field(default_factory=list)

    @property
    def closed_set(self) -> bool:
        return any(ex.options for ex in self.examples)

    @property
    def has_unanswerable(self) -> bool:
        return any(ex.answerable is False for ex in self.examples)

    @property
    def has_given_passages(self) -> bool:
        return any(ex.passages for ex in self.examples)
