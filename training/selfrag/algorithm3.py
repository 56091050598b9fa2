"""Generator training data: the paper's Algorithm 3 with a critic (any labeller) and a retriever.

For each ``(x, y)``: the critic decides Retrieve on ``x``. Without retrieval the output is
``[No Retrieval]{y}[Utility:k]``. With retrieval, ``y`` is split into sentences; the first sentence
uses passages retrieved for ``x`` + the whole ``y``, and for each later sentence the critic decides
(given the current evidence) between continuing with it, no retrieval, and retrieving again with
``x`` + the sentence as query. Each retrieved passage gets IsRel and IsSup; the passage kept is the
highest-ranked one that is relevant and (fully or partially) supported, else a random one. The
utility token closes the output. The result is written in the published format::

    [Retrieval]<paragraph>{title}\\n{text}</paragraph>[Relevant]{sentence}[Fully supported]...[Utility:5]

Extension (off by default, ``contrast=N``): up to N extra copies of a retrieval example in which
a passage the critic judged irrelevant replaces the kept one. As in the paper's data, the text
after ``[Irrelevant]`` is the model's own answer and is trained like any other output (no IsSup
token follows an irrelevant passage); leaving it untrained teaches the model to jump from
``[Irrelevant]`` straight to ``[Utility:k]``, i.e. to give empty answers.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from tqdm import tqdm

from langchain_selfrag import tokens as T
from langchain_selfrag.prompts import format_evidence

from ..core.text import split_sentences
from .labels import Case, Labeller
from .qa_data import Passage

Retriever = Callable[[str, int], list[Passage]]


@dataclass
class SourceExample:
    """One ``(x, y)`` pair for Algorithm 3; ``answers``/``kind`` feed a gold labeller only."""

    instruction: str
    output: str
    input: str = ""
    kind: str = "qa"
    answers: Sequence[str] = field(default_factory=tuple)
    id: str = ""


@dataclass
class Algorithm3:
    """Build Self-RAG generator examples with ``critic`` labels and ``retriever`` passages."""

    critic: Labeller
    retriever: Retriever
    k: int = 5
    contrast: int = 0
    seed: int = 0
    segment_sentences: bool = True

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _label(self, case: Case, default: str) -> str:
        label = self.critic.label([case])[0]
        return label or default

    def _pick(self, ex: SourceExample, query: str, sentence: str) -> tuple[Passage | None, str, str | None, list[tuple[Passage, str]]]:
        """Kept passage, its IsRel and IsSup, and the passages judged irrelevant."""
        passages = self.retriever(query, self.k)
        if not passages:
            return None, T.IRRELEVANT, None, []
        x = _x(ex)
        rel_cases = [Case("isrel", x, evidence=p, answers=ex.answers, kind=ex.kind) for p in passages]
        rels = [lab or T.IRRELEVANT for lab in self.critic.label(rel_cases)]
        relevant = [p for p, r in zip(passages, rels) if r == T.RELEVANT]
        sups: dict[str, str] = {}
        if relevant:
            sup_cases = [Case("issup", x, output=sentence, evidence=p, answers=ex.answers, kind=ex.kind) for p in relevant]
            sups = {p.id: lab or T.NO_SUPPORT for p, lab in zip(relevant, self.critic.label(sup_cases))}
        irrelevant = [(p, r) for p, r in zip(passages, rels) if r == T.IRRELEVANT]
        for p in relevant:  # highest retrieval rank first
            if sups.get(p.id) in (T.FULLY_SUPPORTED, T.PARTIALLY_SUPPORTED):
                return p, T.RELEVANT, sups[p.id], irrelevant
        i = self.rng.randrange(len(passages))
        chosen, rel = passages[i], rels[i]
        return chosen, rel, sups.get(chosen.id) if rel == T.RELEVANT else None, irrelevant

    def build(self, ex: SourceExample) -> list[dict]:
        """The generator example(s) for one source pair: the main one, then any contrast copies."""
        x = _x(ex)
        first = self._label(Case("retrieve", x, answers=ex.answers, kind=ex.kind), T.NO_RETRIEVAL)
        use = self._label(Case("isuse", x, output=ex.output, answers=ex.answers, kind=ex.kind), T.UTILITY[4])
        if first != T.RETRIEVAL:
            return [self._record(ex, T.NO_RETRIEVAL + ex.output + use, [], "no_retrieval")]
        sentences = split_sentences(ex.output) if self.segment_sentences else [ex.output.strip()]
        sentences = sentences or [ex.output.strip()]
        parts: list[str] = []
        evidence: Passage | None = None
        contrast_slot: tuple[int, str, list[tuple[Passage, str]]] | None = None
        for t, sentence in enumerate(sentences):
            if t == 0:
                decision = T.RETRIEVAL
            else:
                case = Case("retrieve_evidence", x, output=sentence, evidence=evidence, preceding=" ".join(sentences[:t]),
                            answers=ex.answers, kind=ex.kind)
                decision = self._label(case, T.NO_RETRIEVAL)
            if decision == T.RETRIEVAL:
                query = f"{ex.instruction} {ex.input} {ex.output if t == 0 else sentence}".strip()
                passage, rel, sup, irrelevant = self._pick(ex, query, sentence)
                if passage is None:
                    parts.append(T.NO_RETRIEVAL + sentence)
                    continue
                if contrast_slot is None and irrelevant and rel == T.RELEVANT:
                    contrast_slot = (len(parts), sentence, irrelevant)
                parts.append(_retrieval_part(passage, rel, sentence, sup))
                evidence = passage
            elif decision == T.CONTINUE and evidence is not None:
                parts.append(T.CONTINUE + sentence)
            else:
                parts.append(T.NO_RETRIEVAL + sentence)
        records = [self._record(ex, "".join(parts) + use, [], "retrieval")]
        if self.contrast and contrast_slot is not None:
            slot, sentence, irrelevant = contrast_slot
            for passage, _ in self.rng.sample(irrelevant, min(self.contrast, len(irrelevant))):
                head = "".join(parts[:slot]) + T.RETRIEVAL + format_evidence(passage.title, passage.text) + T.IRRELEVANT
                output = head + sentence + "".join(parts[slot + 1 :]) + use
                records.append(self._record(ex, output, [], "contrast"))
        return records

    @staticmethod
    def _record(ex: SourceExample, output: str, no_loss: list[list[int]], variant: str) -> dict:
        rec = {"instruction": ex.instruction, "input": ex.input, "output": output, "id": ex.id, "variant": variant}
        if no_loss:
            rec["no_loss_spans"] = no_loss
        return rec

    def run(self, examples: Iterable[SourceExample], *, progress: bool = True) -> list[dict]:
        examples = list(examples)
        out: list[dict] = []
        for ex in tqdm(examples, desc="Algorithm 3", disable=not progress, file=sys.stderr):
            out.extend(self.build(ex))
        return out


def _x(ex: SourceExample) -> str:
    return f"{ex.instruction}\n{ex.input}".strip() if ex.input else ex.instruction


def _retrieval_part(passage: Passage, rel: str, sentence: str, sup: str | None) -> str:
    part = T.RETRIEVAL + format_evidence(passage.title, passage.text) + rel + sentence
    if rel == T.RELEVANT:
        part += sup or T.NO_SUPPORT
    return part
