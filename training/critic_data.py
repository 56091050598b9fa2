"""Critic training data for the four aspects, labelled by gold rules or by a teacher chat model.

Cases are drawn from QA data with known passages and answers (SQuAD v2 JSON, Self-RAG JSONL with
``ctxs``) and from instruction data (no-retrieval tasks):

* Retrieve: questions (retrieval helps) and instruction tasks;
* IsRel: each question with its answer-bearing passage and with a retrieved passage lacking the answer;
* IsSup: the answer-bearing passage with the gold answer, or with another question's answer;
* IsUse: questions with the gold answer or a wrong one, instruction tasks with their reference output.

``--labeller gold`` applies :class:`~training.labels.GoldLabeller`; ``--teacher MODULE:CLASS`` asks
any LangChain chat model (for example ``langchain_openai:ChatOpenAI`` with
``--teacher-kwargs '{"model": "Qwen2.5-72B-Instruct", "base_url": "http://localhost:8000/v1"}'``
for a vLLM server); cases it does not answer parseably are dropped and counted.

``python -m training.critic_data --squad squad.json --instructions tasks.jsonl --out critic.jsonl``
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import sys
from collections import Counter
from collections.abc import Callable, Sequence

from .labels import Case, GoldLabeller, Labeller, critic_example
from .qa_data import InstructionItem, Passage, QAItem, instruction_text
from .text import contains_answer, split_sentences

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


def load_chat_model(spec: str, kwargs: dict):
    """Instantiate ``module:Class`` with ``kwargs`` (any LangChain chat model class)."""
    module_name, _, cls_name = spec.partition(":")
    if not module_name or not cls_name:
        raise ValueError(f"--teacher must look like module:Class, got {spec!r}")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {spec}: {exc}") from exc
    return cls(**kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    from .bm25 import BM25Retriever
    from .qa_data import write_jsonl
    from .sources import add_source_arguments, load_sources
    from .teacher import TeacherLabeller

    ap = argparse.ArgumentParser(prog="python -m training.critic_data", description=__doc__.split("\n\n")[0])
    add_source_arguments(ap)
    ap.add_argument("--per-aspect", type=int, default=300)
    ap.add_argument("--teacher", help="LangChain chat model class as module:Class (default: gold labels)")
    ap.add_argument("--teacher-kwargs", default="{}", help="JSON keyword arguments for the teacher class")
    ap.add_argument("--max-concurrency", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    src = load_sources(ap, args)
    passages, questions, instructions = src.passages, src.questions, src.instructions
    retriever = BM25Retriever(passages) if passages else (lambda q, k: [])
    by_id = {p.id: p for p in passages}
    cases = build_cases(questions, instructions, retriever, by_id, random.Random(args.seed), args.per_aspect)
    if args.teacher:
        try:
            labeller = TeacherLabeller(load_chat_model(args.teacher, json.loads(args.teacher_kwargs)),
                                       max_concurrency=args.max_concurrency)
        except (ValueError, json.JSONDecodeError) as exc:
            ap.error(str(exc))
    else:
        labeller = GoldLabeller()
    rows, dropped = label_cases(cases, labeller)
    random.Random(args.seed).shuffle(rows)
    n = write_jsonl(args.out, rows)
    counts = Counter(r["aspect"] for r in rows)
    print(f"wrote {n} critic examples to {args.out}: {dict(counts)}; unlabelled (dropped): {dict(dropped)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
