"""The IsRel pairs a chat-layout judge is trained on: a training file's draw plus decision-rule documents.

The first ``--limit`` IsRel pairs of a Self-RAG training file, drawn by variant as the relevance head
draws them (:func:`training.relevance_head.judge_pairs`, seed 0: the question model's 400 pairs), and
both pairs (rule stated, rule left out) of the first ``--rules`` documents of a
:mod:`cookbook.data.decision_rules` file, shuffled together with ``--seed``. The output is the
``{question, title, passage, label, variant}`` JSONL that ``training.judge_sft --train-file`` reads, a relevant
pair with its row's ``answer`` (the text after ``[Relevant]``), which ``--answers`` trains::

    python -m cookbook.data.decision_rules --out runs/qwen/data/rules.jsonl --documents 120
    python -m cookbook.data.judge_mix --train-file runs/qwen/data/all.jsonl --limit 400 \\
        --rules-file runs/qwen/data/rules.jsonl --rules 40 --out runs/lora15/pairs.jsonl

Documents after the first ``--rules`` of the rules file stay unseen: they are the held-out check.
"""

from __future__ import annotations

import argparse
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from langchain_selfrag import tokens as T
from training.core.jsonl import read_jsonl, write_jsonl
from training.relevance_head import judge_pairs


def rule_pairs(pairs: Iterable[Mapping], documents: int) -> list[dict]:
    """Both pairs of each of the first ``documents`` questions of a decision-rules file's pairs, in file order."""
    by_question: dict[str, list[dict]] = {}
    for p in pairs:
        by_question.setdefault(p["question"], []).append(dict(p))
    return [p for q in list(by_question)[:documents] for p in by_question[q]]


#: An answer the row's passage fully supports (an ``issup_negative`` row's answer is wrong on purpose).
_ANSWERED = re.compile(r"<paragraph>(.*?)</paragraph>\[Relevant\](.*?)\[Fully supported\]", re.S)


def answers_of(rows: Iterable[Mapping]) -> dict[tuple[str, str], str]:
    """The answer each training row gives after ``[Relevant]`` and its passage fully supports, by (question,
    passage) as :func:`judge_pairs` splits them."""
    out: dict[tuple[str, str], str] = {}
    for row in rows:
        for match in _ANSWERED.finditer(str(row.get("output", ""))):
            passage = match.group(1).partition("\n")[2]
            answer = " ".join(match.group(2).split())
            if answer and not T.find_reflection_tokens(answer):
                out.setdefault((str(row.get("instruction", "")), passage), answer)
    return out


def judge_mix(train_rows: Iterable[Mapping], rule_rows: Iterable[Mapping], *, limit: int, rules: int,
              seed: int = 0) -> list[dict]:
    """The first ``limit`` pairs of ``train_rows`` and the pairs of the first ``rules`` rule documents, shuffled;
    a relevant pair keeps its row's answer as ``answer`` (what ``training.judge_sft --answers`` trains)."""
    train_rows, rule_rows = list(train_rows), list(rule_rows)
    pairs = judge_pairs(train_rows, seed=0)[:limit]
    if len(pairs) < limit:
        raise ValueError(f"the training file has {len(pairs)} IsRel pairs, fewer than --limit {limit}")
    added = rule_pairs(judge_pairs(rule_rows, seed=0), rules)
    if len(added) < 2 * rules:
        raise ValueError(f"the rules file has {len(added) // 2} documents, fewer than --rules {rules}")
    answers = answers_of(train_rows) | answers_of(rule_rows)
    mixed = [p | {"answer": answers[(p["question"], p["passage"])]}
             if p["label"] and (p["question"], p["passage"]) in answers else p for p in pairs + added]
    random.Random(seed).shuffle(mixed)
    return mixed


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cookbook.data.judge_mix", description=__doc__.split("\n\n")[0])
    ap.add_argument("--train-file", required=True, help="a Self-RAG training JSONL with IsRel labels")
    ap.add_argument("--limit", type=int, default=400, help="pairs drawn from it (default 400)")
    ap.add_argument("--rules-file", required=True, help="a cookbook.data.decision_rules JSONL")
    ap.add_argument("--rules", type=int, default=40, help="rule documents added, two pairs each (default 40)")
    ap.add_argument("--seed", type=int, default=0, help="the shuffle's seed")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    try:
        mixed = judge_mix(read_jsonl(args.train_file), read_jsonl(args.rules_file), limit=args.limit,
                          rules=args.rules, seed=args.seed)
    except ValueError as err:
        ap.error(str(err))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out, mixed)
    print(f"{len(mixed)} pairs ({sum(p['label'] for p in mixed)} relevant, {sum('answer' in p for p in mixed)} "
          f"with an answer) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
