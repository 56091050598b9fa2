"""Which candidates cite their passage, and the ``[n]`` markers and citations of an answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from ... import scoring as S
from ... import tokens as T


def judged_relevant(cand: Mapping[str, Any]) -> bool:
    """The model judged the candidate's passage [Relevant]: the IsRel token it generated, or when it
    generated none, p([Relevant]) > p([Irrelevant]) at the first position."""
    token = cand.get("isrel_token")
    if token is not None:
        return token == T.RELEVANT
    probs = cand.get("first_probs") or {}
    return probs.get(T.RELEVANT, 0.0) > probs.get(T.IRRELEVANT, 0.0)


def cites(cand: Mapping[str, Any]) -> bool:
    """A segment cites its passage iff the model judged it [Relevant] and not [No support / Contradictory]."""
    return (cand.get("passage") is not None and judged_relevant(cand)
            and not S.violates_hard_constraint(cand.get("issup_probs")))


def segment_texts(segments: Sequence[Mapping[str, Any]], passages: Sequence[Document]
                  ) -> tuple[list[str], list[Document]]:
    """Long form: each segment's text as the answer shows it, and the citations in marker order.

    A segment that cites its passage (:func:`cites`) ends with ``[n]``, n its passage's place in
    the citations (from 1, by first citation). The answer is the non-empty texts joined by spaces.
    """
    citations: list[Document] = []
    cite_index: dict[int, int] = {}
    texts = []
    for cand in segments:
        text = cand.get("text", "")
        if cites(cand):
            if cand["passage"] not in cite_index:
                cite_index[cand["passage"]] = len(citations) + 1
                citations.append(passages[cand["passage"]])
            text = f"{text} [{cite_index[cand['passage']]}]" if text else text
        texts.append(text)
    return texts, citations


def short_citations(chosen: Sequence[Mapping[str, Any]], passages: Sequence[Document]) -> list[Document]:
    """Short form: the passages of the chosen candidates that cite theirs, once each, in order."""
    cited: list[int] = []
    for cand in chosen:
        if cites(cand) and cand["passage"] not in cited:
            cited.append(cand["passage"])
    return [passages[i] for i in cited]
