"""``RelevanceJudge``: IsRel read from a chat model asked whether a passage states the answer.

A reflection model's IsRel is what abstention works with: the chain answers only when some passage
clears its bar. A small Self-RAG model judges relevance poorly on text unlike its training data
(SmolLM2-135M's IsRel tells package-documentation questions a document answers from near misses at
AUC 0.69); an instruction-tuned chat model asked in its own layout does far better untrained
(Qwen2.5-Coder-1.5B: 0.89 there; issue 55). The judge turns that model's next-token probabilities of
``Yes`` and ``No`` into the IsRel pair::

    judge = RelevanceJudge(load_reflection_lm(model_path("qwen2.5-coder-1.5b-instruct")))
    lm = ReaderCriticLM(critic, reader, judge=judge)

``p([Relevant]) = P(Yes) / (P(Yes) + P(No))``; a prompt without a passage gets no judgement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import tokens as T
from .chat import ChatPrompt, ReaderTurn
from .scheduler import scheduler_for


@dataclass(frozen=True)
class JudgePrompt(ChatPrompt):
    """The judge's question about one passage, in a chat layout, and the two words it answers with."""

    ask: str = ("Passage ({title}):\n{passage}\n\nQuestion: {question}\n\n"
                "Does the passage state the answer to the question? Answer Yes or No.")
    yes: str = "Yes"
    no: str = "No"

    def __call__(self, turn: ReaderTurn) -> str:
        if turn.passage is None:
            raise ValueError("the judge asks about a passage; this turn has none")
        return self.chat(self.system, self.fill(self.ask, turn), "")


def isrel_from_answer(yes: float, no: float) -> dict[str, float]:
    """The IsRel pair of a judge's ``Yes`` / ``No`` probabilities (an even split when both are 0)."""
    total = yes + no
    relevant = yes / total if total > 0 else 0.5
    return {T.RELEVANT: relevant, T.IRRELEVANT: 1.0 - relevant}


class RelevanceJudge:
    """IsRel of Self-RAG turns from a chat model (any LM of this package's backends) and a :class:`JudgePrompt`.

    The model is called through its one scheduler, as :class:`~langchain_selfrag.lm.reader.ReaderCriticLM`
    calls its reader, so a judge that is also the reader is never run by two threads at once.
    """

    def __init__(self, lm: Any, prompt: JudgePrompt | None = None) -> None:
        self.lm = scheduler_for(lm)
        self.prompt = prompt or JudgePrompt()

    @property
    def model_path(self) -> Any:
        return getattr(self.lm, "model_path", None)

    def isrel(self, turns: Sequence[ReaderTurn]) -> list[dict[str, float]]:
        """The IsRel probabilities of each turn (each must hold a passage), in one batched call."""
        if not turns:
            return []
        words = [self.prompt.yes, self.prompt.no]
        probs = self.lm.candidate_probs([self.prompt(t) for t in turns], words)
        return [isrel_from_answer(p.get(words[0], 0.0), p.get(words[1], 0.0)) for p in probs]
