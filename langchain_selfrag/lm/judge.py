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

With a fitted :class:`~langchain_selfrag.lm.relevance_head.RelevanceHead` the model stays frozen and
the head reads its final hidden state at the prompt's last token instead (``training.relevance_head``
fits it on labelled pairs, starting from the ``Yes`` minus ``No`` direction)::

    judge = RelevanceJudge.from_head("relevance_head.json", model_path("qwen2.5-coder-1.5b-instruct"))
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import tokens as T
from .chat import ChatPrompt, ReaderTurn
from .chat_questions import ReflectionQuestions
from .chat_transport import LocalChat
from .relevance_head import RelevanceHead, RelevanceHeadError
from .scheduler import scheduler_for


@dataclass(frozen=True)
class JudgePrompt(ChatPrompt):
    """The judge's question about one passage, in a chat layout, and the two words it answers with."""

    ask: str = ReflectionQuestions.isrel  # the IsRel question every chat model is asked (.chat_questions)
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
    With ``head``, ``lm`` gives hidden states (:class:`~langchain_selfrag.lm.llamacpp.hidden.LlamaCppHiddenStates`)
    and the prompt is the head's; ``head_path`` is where the head was read (its calibration lives beside it).
    """

    def __init__(self, lm: Any, prompt: JudgePrompt | None = None, *, head: RelevanceHead | None = None,
                 head_path: str | os.PathLike | None = None) -> None:
        self.head = head
        self.head_path = Path(head_path) if head_path is not None else None
        if head is None:
            self.lm = scheduler_for(lm)
            self.prompt = prompt or JudgePrompt()
            self._chat = LocalChat(self.lm, self.prompt.chat)
            return
        if not callable(getattr(lm, "last_hidden", None)):
            raise TypeError("a judge with a relevance head reads hidden states: give it a LlamaCppHiddenStates, "
                            f"not {type(lm).__name__}")
        self.lm = lm
        self.prompt = prompt or JudgePrompt(ask=head.ask, system=head.system)

    @classmethod
    def from_head(cls, head_path: str | os.PathLike, model_path: str | os.PathLike, *, head: RelevanceHead | None = None,
                  **options: Any) -> RelevanceJudge:
        """The judge of the head in ``head_path`` on the GGUF at ``model_path``, which must be the file the
        head was fitted on (checked by sha256); ``head``: that file already read; ``options`` go to the
        hidden-state model (``n_threads``...)."""
        from ..bundled.parts import file_sha256
        from .llamacpp.hidden import LlamaCppHiddenStates

        head = head or RelevanceHead.load(head_path)
        found = file_sha256(Path(model_path), progress=False)
        if found != head.model_sha256:
            raise RelevanceHeadError(f"{head_path} was fitted on {head.model_name} (sha256 {head.model_sha256[:12]}...); "
                                     f"{model_path} has sha256 {found[:12]}...")
        return cls(LlamaCppHiddenStates(model_path, **options), head=head, head_path=head_path)

    @property
    def model_path(self) -> Any:
        """Where this judge's calibration lives: beside its head when it has one, else beside its model."""
        return self.head_path if self.head is not None else getattr(self.lm, "model_path", None)

    def close(self) -> None:
        """Close the model (a plain judge's scheduler too)."""
        if self.head is not None:
            self.lm.close()
        else:
            self.lm.close(close_model=True)

    def isrel(self, turns: Sequence[ReaderTurn]) -> list[dict[str, float]]:
        """The IsRel probabilities of each turn (each must hold a passage), in one batched call."""
        if not turns:
            return []
        prompts = [self.prompt(t) for t in turns]
        if self.head is not None:
            relevant = self.head.relevant(self.lm.last_hidden(prompts))
            return [{T.RELEVANT: float(r), T.IRRELEVANT: 1.0 - float(r)} for r in relevant]
        words = [self.prompt.yes, self.prompt.no]
        probs = self._chat.word_probs(
            [(self.prompt.system, self.prompt.fill(self.prompt.ask, t)) for t in turns], [words] * len(turns))
        return [isrel_from_answer(p[words[0]], p[words[1]]) for p in probs]
