"""Critique cases, the critic prompt, and the labellers that answer them.

A :class:`Case` is one question for the critic about one aspect (Retrieve, IsRel, IsSup, IsUse).
Three labellers answer cases with a reflection-token string:

* :class:`GoldLabeller` — rules over QA data with known answers (no model);
* :class:`~training.selfrag.teacher.TeacherLabeller` — any LangChain chat model;
* :class:`LMCriticLabeller` — a trained critic (any :class:`~langchain_selfrag.lm.ReflectionLM`).

The instructions are written in this project's words after the definitions in the paper's
appendix D; the same instruction text is the critic's training prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from langchain_selfrag import tokens as T
from langchain_selfrag.prompts import format_prompt

from ..core.text import contains_answer, normalize_answer, token_overlap
from .qa_data import Passage

Aspect = Literal["retrieve", "retrieve_evidence", "isrel", "issup", "isuse"]
ASPECTS: tuple[Aspect, ...] = ("retrieve", "retrieve_evidence", "isrel", "issup", "isuse")

#: Allowed answers per aspect (reflection-token strings).
LABELS: dict[str, tuple[str, ...]] = {
    "retrieve": (T.RETRIEVAL, T.NO_RETRIEVAL),
    "retrieve_evidence": (T.RETRIEVAL, T.NO_RETRIEVAL, T.CONTINUE),
    "isrel": (T.RELEVANT, T.IRRELEVANT),
    "issup": (T.FULLY_SUPPORTED, T.PARTIALLY_SUPPORTED, T.NO_SUPPORT),
    "isuse": T.UTILITY,
}

#: Task instructions per aspect (own wording, after the paper's appendix D definitions).
INSTRUCTIONS: dict[str, str] = {
    "retrieve": (
        "Decide whether looking up external documents (for example Wikipedia) would help to write a better "
        "response to the task. Answer [Retrieval] if factual knowledge from documents would help, or "
        "[No Retrieval] if the task is creative, personal, a matter of reasoning or rewriting, or needs no facts."
    ),
    "retrieve_evidence": (
        "Given a task, the evidence used so far and the next output sentence, decide what the sentence needs. "
        "Answer [Continue to Use Evidence] if the evidence alone verifies it, [No Retrieval] if it needs no "
        "factual verification (opinion, common sense), or [Retrieval] if other documents are needed to verify it."
    ),
    "isrel": (
        "Decide whether the evidence is relevant to the task: it must give useful information for completing "
        "it (for a question, information that answers it). Answer [Relevant] or [Irrelevant]."
    ),
    "issup": (
        "Judge how well the evidence supports the output, using only the evidence and no outside knowledge. "
        "Answer [Fully supported] if everything in the output is stated in the evidence, [Partially supported] "
        "if only part of it is, or [No support / Contradictory] if the output ignores, goes beyond or "
        "contradicts the evidence."
    ),
    "isuse": (
        "Rate how useful the output is as a response to the task, regardless of whether it is true: "
        "[Utility:5] complete and informative, [Utility:4] mostly fulfils the need, [Utility:3] acceptable but "
        "needs major additions, [Utility:2] addresses the request but is incomplete or off target, "
        "[Utility:1] barely on topic or irrelevant."
    ),
}


@dataclass
class Case:
    """One critique question. ``answers`` (gold) and ``kind`` are only read by the gold labeller."""

    aspect: Aspect
    instruction: str
    output: str | None = None
    evidence: Passage | None = None
    preceding: str | None = None
    answers: Sequence[str] = field(default_factory=tuple)
    kind: Literal["qa", "instruction"] = "qa"

    def __post_init__(self) -> None:
        if self.aspect not in LABELS:
            raise ValueError(f"unknown aspect {self.aspect!r}; expected one of {sorted(LABELS)}")
        needs_output = self.aspect in ("retrieve_evidence", "issup", "isuse")
        needs_evidence = self.aspect in ("retrieve_evidence", "isrel", "issup")
        if needs_output and self.output is None:
            raise ValueError(f"a {self.aspect} case needs an output")
        if needs_evidence and self.evidence is None:
            raise ValueError(f"a {self.aspect} case needs evidence")


def case_input(case: Case) -> str:
    """The case's input block (task, preceding sentences, evidence, output), untrusted text neutralised."""
    parts = [f"Task: {T.neutralise(case.instruction)}"]
    if case.preceding:
        parts.append(f"Preceding sentences: {T.neutralise(case.preceding)}")
    if case.evidence is not None:
        title = f"{case.evidence.title}\n" if case.evidence.title else ""
        parts.append(f"Evidence: {T.neutralise(title + case.evidence.text)}")
    if case.output is not None:
        parts.append(f"Output: {T.neutralise(case.output)}")
    return "\n".join(parts)


def critic_prompt(case: Case) -> str:
    """The critic's prompt: the aspect instruction as the instruction, the case as the input."""
    return format_prompt(INSTRUCTIONS[case.aspect], case_input(case))


def critic_example(case: Case, label: str) -> dict:
    """A critic SFT example in the ``{instruction, input, output}`` format plus the aspect."""
    if label not in LABELS[case.aspect]:
        raise ValueError(f"label {label!r} is not valid for aspect {case.aspect}")
    return {"aspect": case.aspect, "instruction": INSTRUCTIONS[case.aspect], "input": case_input(case), "output": label}


class Labeller(Protocol):
    """Answers critique cases with a reflection-token string (None when it cannot decide)."""

    def label(self, cases: Sequence[Case]) -> list[str | None]: ...


class GoldLabeller:
    """Labels from gold answers and data provenance.

    * Retrieve: QA questions need retrieval, instruction tasks do not; with evidence, a sentence
      the evidence supports continues with it.
    * IsRel: a passage containing a gold answer is relevant, any other passage irrelevant.
    * IsSup: the output's words all in the passage -> fully, at least ``partial`` of them ->
      partially, else no support.
    * IsUse: instruction reference outputs -> 5; QA outputs containing a gold answer -> 5,
      sharing at least half an answer's words -> 3, else 1.
    """

    def __init__(self, partial: float = 0.5) -> None:
        self.partial = partial

    def label(self, cases: Sequence[Case]) -> list[str | None]:
        return [self._one(c) for c in cases]

    def _support(self, output: str, passage: Passage) -> str:
        text = f"{passage.title} {passage.text}"
        if normalize_answer(output) and normalize_answer(output) in normalize_answer(text):
            return T.FULLY_SUPPORTED
        overlap = token_overlap(output, text)
        if overlap >= 0.999:
            return T.FULLY_SUPPORTED
        return T.PARTIALLY_SUPPORTED if overlap >= self.partial else T.NO_SUPPORT

    def _one(self, case: Case) -> str | None:
        if case.aspect == "retrieve":
            return T.RETRIEVAL if case.kind == "qa" else T.NO_RETRIEVAL
        if case.aspect == "retrieve_evidence":
            if case.kind != "qa":
                return T.NO_RETRIEVAL
            return T.CONTINUE if self._support(case.output, case.evidence) == T.FULLY_SUPPORTED else T.RETRIEVAL
        if case.aspect == "isrel":
            if case.kind != "qa" or not case.answers:
                return None
            return T.RELEVANT if contains_answer(case.evidence.text, case.answers) else T.IRRELEVANT
        if case.aspect == "issup":
            return self._support(case.output, case.evidence)
        if case.kind != "qa":
            return T.UTILITY[4]
        if not case.answers:
            return None
        if contains_answer(case.output, case.answers):
            return T.UTILITY[4]
        best = max(token_overlap(a, case.output) for a in case.answers)
        return T.UTILITY[2] if best >= 0.5 else T.UTILITY[0]


class LMCriticLabeller:
    """A trained critic: the most probable allowed token at the first generated position."""

    def __init__(self, lm, batch_size: int = 8) -> None:
        self.lm = lm
        self.batch_size = batch_size

    def probabilities(self, cases: Sequence[Case]) -> list[dict[str, float]]:
        """Per case, the probability of each allowed label (same aspect order as given)."""
        out: list[dict[str, float]] = [{} for _ in cases]
        by_aspect: dict[str, list[int]] = {}
        for i, c in enumerate(cases):
            by_aspect.setdefault(c.aspect, []).append(i)
        for aspect, idx in by_aspect.items():
            for start in range(0, len(idx), self.batch_size):
                chunk = idx[start : start + self.batch_size]
                probs = self.lm.candidate_probs([critic_prompt(cases[i]) for i in chunk], LABELS[aspect])
                for i, p in zip(chunk, probs):
                    out[i] = p
        return out

    def label(self, cases: Sequence[Case]) -> list[str | None]:
        return [max(p, key=p.get) if p else None for p in self.probabilities(cases)]
