"""The reflection an agent's retrieval and answer get: IsRel of each passage for the query, IsSup of the answer
against each kept passage, and what follows from them at the chain's bars.

The model is asked as the chain asks it (:class:`~langchain_selfrag.restraint.scoring.IsSupScorer`'s prompts:
the question's Self-RAG prompt, the passage as evidence, cut to fit the model's context, and for IsSup the
answer after ``[Relevant]``), so any reflection model that ``load_reflection_lm`` returns answers it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import Document

from .. import scoring as S
from ..restraint.scoring import ISREL, IsSupScorer


def passage_relevance(lm: Any, query: str, docs: Sequence[Document], *,
                      max_passage_tokens: int | None = None) -> list[float]:
    """IsRel of each passage for ``query`` (one batched call)."""
    if not docs:
        return []
    frames = IsSupScorer(lm, max_passage_tokens=max_passage_tokens).frames([], question=query, evidence=docs)
    return [S.isrel_score(p or {}) for p in lm.candidate_probs(frames, ISREL)]


def answer_support(lm: Any, question: str, answer: str, docs: Sequence[Document], *,
                   max_passage_tokens: int | None = None) -> list[float]:
    """IsSup of ``answer`` to ``question`` against each passage (one batched call)."""
    if not docs or not answer.strip():
        return [0.0] * len(docs)
    scorer = IsSupScorer(lm, max_passage_tokens=max_passage_tokens)
    issup, _ = scorer.passage_scores([answer], question=question, evidence=docs, relevance=False)
    return issup[0]


def nothing_relevant(query: str, retrieved: int, best: float | None, bar: float) -> str:
    """The tool message when no passage is kept: what was asked, the best IsRel, what the agent may do."""
    if not retrieved:
        found = f"The search for {query!r} returned no passages."
    else:
        found = (f"Nothing relevant was found for {query!r}: {retrieved} passage(s), the best IsRel "
                 f"{best:.2f}, under the bar {bar:g}.")
    return found + " Search again with other words, or say that the sources do not answer this."


@dataclass(frozen=True)
class Verdict:
    """What the final answer gets: ``reason`` is None for an answer that is kept."""

    reason: str | None
    best: float | None
    citations: list[Document]
    scores: list[float]


def verdict(answer: str, passages: Sequence[dict[str, Any]], scores: Sequence[float],
            rounds: Sequence[dict[str, Any]], *, issup_bar: float, isrel_bar: float,
            closed_book_abstains: bool) -> Verdict:
    """The verdict on the final ``answer`` from the IsSup ``scores`` of the kept ``passages`` (pure).

    An answer without a letter or digit says nothing: an abstention, as in the chain.
    No retrieval in the run: an abstention when ``closed_book_abstains`` (the chain's ``abstain_closed_book``),
    else kept unchecked. Retrieval that kept nothing: an abstention naming the best IsRel. Else the best IsSup
    against ``issup_bar`` (0: not checked); the citations are the kept passages whose IsSup reaches the bar
    (and is above 0)."""
    docs = [p["document"] for p in passages]
    best = max(scores, default=None)
    citations = [d for d, s in zip(docs, scores) if s > 0 and s >= issup_bar]
    if not any(ch.isalnum() for ch in answer):
        return Verdict("the agent's answer says nothing", best, [], list(scores))
    if not rounds:
        reason = ("the agent answered without retrieving, and a closed-book answer is not trusted "
                  "(abstain_closed_book)") if closed_book_abstains else None
        return Verdict(reason, None, [], [])
    if not passages:
        best_rel = max((r["best_isrel"] for r in rounds if r.get("best_isrel") is not None), default=None)
        said = f"best IsRel {best_rel:.2f}; " if best_rel is not None else ""
        return Verdict(f"no retrieved passage was judged relevant ({said}the bar is IsRel >= {isrel_bar:g})",
                       None, [], [])
    if issup_bar > 0 and (best or 0.0) < issup_bar:
        return Verdict(f"the answer is not supported by the passages kept (best IsSup {best or 0.0:.2f}; the bar "
                       f"is IsSup >= {issup_bar:g})", best, [], list(scores))
    return Verdict(None, best, citations, list(scores))
