"""Critic cases for the four aspects, drawn from QA data with known passages and answers (SQuAD v2
JSON, Self-RAG JSONL with ``ctxs``) and from instruction data (no-retrieval tasks), and labelled by
any :class:`~training.selfrag.labels.Labeller`:

* Retrieve: questions (retrieval helps) and instruction tasks;
* IsRel: each question with its answer-bearing passage and with a retrieved passage lacking the answer;
* IsSup: the answer-bearing passage with the gold answer, or with another question's answer;
* IsUse: questions with the gold answer or a wrong one, instruction tasks with their reference output.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence

from ..core.text import contains_answer, split_sentences
from .labels import Case, Labeller, critic_example
from .qa_data import InstructionItem, Passage, QAItem, instruction_text

Retriever = Callable[[str, int], list[Passage]]


def shorten(text: str, max_words: int = 60) -> str:
    """Whole sentences up to ``max_words`` words (at least the first sentence)."""
    out, n = [], 0
    for sent in split_sentences(text) or [text]:
        words = len(sent.split())
        if out and n + words > max_words:
            break
        out.append(sent)
        n += words
    return " ".join(out)


def build_cases(
    questions: Sequence[QAItem],
    instructions: Sequence[InstructionItem],
    retriever: Retriever,
    by_id: dict[str, Passage],
    rng: random.Random,
    per_aspect: int,
) -> list[Case]:
    """Critic cases, about ``per_aspect`` per aspect, balanced between the classes the data allows."""
    cases: list[Case] = []
    qs = [q for q in questions if q.answerable and q.gold and q.answers]
    rng.shuffle(qs)
    half = per_aspect // 2
    cases += [Case("retrieve", q.question, kind="qa", answers=q.answers) for q in qs[:half]]
    cases += [Case("retrieve", instruction_text(i), kind="instruction") for i in instructions[:half]]
    for q in qs[:half]:
        pos = by_id[q.gold[0]]
        negs = [p for p in retriever(q.question, 5) if p.id not in q.gold and not contains_answer(p.text, q.answers)]
        cases.append(Case("isrel", q.question, evidence=pos, answers=q.answers))
        if negs:
            cases.append(Case("isrel", q.question, evidence=rng.choice(negs), answers=q.answers))
    for n, q in enumerate(qs[half : half + per_aspect]):
        pos = by_id[q.gold[0]]
        if n % 2:
            other = rng.choice(qs)
            output = other.answers[0] if not contains_answer(pos.text, other.answers) else q.answers[0]
        else:
            output = q.answers[0]
        cases.append(Case("issup", q.question, output=output, evidence=pos, answers=q.answers))
    for n, q in enumerate(qs[:half]):
        output = q.answers[0] if n % 2 == 0 else rng.choice(qs).answers[0]
        cases.append(Case("isuse", q.question, output=output, answers=q.answers))
    for i in instructions[: half // 2]:
        cases.append(Case("isuse", instruction_text(i), output=shorten(i.output), kind="instruction"))
    return cases


def label_cases(cases: Sequence[Case], labeller: Labeller) -> tuple[list[dict], Counter]:
    """Critic examples for the cases the labeller answered, and per-aspect counts of dropped cases."""
    labels = labeller.label(list(cases))
    rows, dropped = [], Counter()
    for case, label in zip(cases, labels):
        if label is None:
            dropped[case.aspect] += 1
        else:
            rows.append(critic_example(case, label))
    return rows, dropped
