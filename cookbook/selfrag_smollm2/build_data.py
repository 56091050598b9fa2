"""Step 1: critic and generator training data for ``selfrag-smollm2-135m`` from ``../shared/data``.

* SQuAD v2 (dev half) is split by article; only train articles are used here, and the held-out
  article titles are written to ``split.json`` for the evaluation step.
* Generator data: Algorithm 3 (:mod:`training.selfrag.algorithm3`) with the gold labeller as critic and
  BM25 over the train articles' passages (no held-out text is trained on, not even as a negative),
  plus one irrelevant-passage contrast copy per question (its answer trained, as in the paper), plus
  IsSup negatives (another question's answer after the gold passage, not trained as text, followed
  by the trained ``[No support / Contradictory]``).
* Phase-2 data: gold passage vs several BM25 hard negatives per question, IsSup negatives mixed in.
* Instruction tasks (self-instruct seed tasks + user-oriented instructions) are the no-retrieval
  cases; a seeded part is held out for the retrieve-decision evaluation.
* Critic data: gold-labelled cases of all aspects from train articles and train instructions, and
  a held-out critic set from the held-out articles/instructions.

Usage: ``python -m cookbook.selfrag_smollm2.build_data --data ../shared/data --out runs/smollm2/data``
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path

from langchain_selfrag import tokens as T
from langchain_selfrag.prompts import format_evidence
from training.core.jsonl import write_jsonl
from training.core.text import contains_answer
from training.selfrag.algorithm3 import Algorithm3, SourceExample
from training.selfrag.bm25 import BM25Retriever
from training.selfrag.critic_cases import build_cases, label_cases, shorten
from training.selfrag.labels import Case, GoldLabeller
from training.selfrag.qa_data import (
    InstructionItem,
    instruction_text,
    load_instructions,
    load_squad,
    split_articles,
)

HELDOUT_ARTICLES = 4
HELDOUT_INSTRUCTIONS = 100
MAX_PASSAGE_CHARS = 400


#: The instruction-task files of ``../shared/data`` (the no-retrieval cases).
INSTRUCTION_FILES = ("self_instruct_seed_tasks.jsonl", "user_oriented_instructions.jsonl")


def instruction_tasks(data: Path) -> list[InstructionItem]:
    """Every instruction task of ``data`` (self-instruct seed tasks, then user-oriented instructions)."""
    return [item for name in INSTRUCTION_FILES for item in load_instructions(data / name)]


def instruction_split(items: list[InstructionItem], seed: int) -> tuple[list[InstructionItem], list[InstructionItem]]:
    rng = random.Random(seed)
    items = sorted(items, key=lambda i: i.id)
    rng.shuffle(items)
    return items[HELDOUT_INSTRUCTIONS:], items[:HELDOUT_INSTRUCTIONS]


def issup_negatives(questions, by_id, rng: random.Random, fraction: float) -> list[dict]:
    """Gold passage + an answer to another question of the same article that the passage lacks."""
    rows = []
    by_article: dict[str, list] = {}
    for q in questions:
        by_article.setdefault(q.article, []).append(q)
    for q in questions:
        if rng.random() >= fraction or not q.gold:
            continue
        gold = by_id[q.gold[0]]
        others = [o.answers[0] for o in by_article[q.article] if o.id != q.id and not contains_answer(gold.text, o.answers)]
        if not others:
            continue
        wrong = rng.choice(others)
        head = T.RETRIEVAL + format_evidence(gold.title, gold.text) + T.RELEVANT
        label = GoldLabeller().label([Case("issup", q.question, output=wrong, evidence=gold)])[0]
        output = head + wrong + label + T.UTILITY[0]
        rows.append({"instruction": q.question, "input": "", "output": output, "id": q.id, "variant": "issup_negative",
                     "no_loss_spans": [[len(head), len(head) + len(wrong)]]})
    return rows


def isrel_pairs(questions, instructions, retriever, by_id, rng: random.Random, replay: int, negatives: int = 2,
                max_questions: int | None = None, exclude_ids: frozenset[str] = frozenset()) -> list[dict]:
    """Phase-2 data: train questions with their gold passage and with ``negatives`` hard negatives.

    A hard negative is a passage of the question's own BM25 top 5 (query: the question alone, as at
    inference) that lacks every answer. As in the paper's data, the answer after ``[Irrelevant]``
    is trained like any other output (no IsSup token follows it). ``replay`` no-retrieval
    instruction examples keep the retrieve decision in practice. Questions in ``exclude_ids``
    (an earlier build's phase 2, when continuing it) are left out.
    """
    rows = []
    usable = [q for q in questions if q.answerable and q.gold and q.answers and q.id not in exclude_ids]
    if max_questions is not None and max_questions < len(usable):
        usable = rng.sample(usable, max_questions)
    for q in usable:
        gold = by_id[q.gold[0]]
        answer = q.answers[0]
        pos = T.RETRIEVAL + format_evidence(gold.title, gold.text) + T.RELEVANT + answer + T.FULLY_SUPPORTED + T.UTILITY[4]
        rows.append({"instruction": q.question, "input": "", "output": pos, "id": q.id, "variant": "isrel_positive"})
        negs = [p for p in retriever(q.question, 5) if p.id not in q.gold and not contains_answer(p.text, q.answers)]
        for neg in rng.sample(negs, min(negatives, len(negs))):
            head = T.RETRIEVAL + format_evidence(neg.title, neg.text) + T.IRRELEVANT
            rows.append({"instruction": q.question, "input": "", "output": head + answer + T.UTILITY[4], "id": q.id,
                         "variant": "isrel_negative"})
    for item in instructions[:replay]:
        rows.append({"instruction": instruction_text(item), "input": "", "id": item.id, "variant": "no_retrieval",
                     "output": T.NO_RETRIEVAL + shorten(item.output) + T.UTILITY[4]})
    rng.shuffle(rows)
    return rows


def phase2_ids_in(paths: Sequence[Path]) -> set[str]:
    """Question ids of earlier phase-2 files (rows of every variant carry their question's id)."""
    ids: set[str] = set()
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            ids.update(json.loads(line)["id"] for line in fh if line.strip())
    return ids


def critic_cases(questions, instructions, retriever, by_id, rng: random.Random, per_aspect: int) -> list[dict]:
    """Gold-labelled critic examples (see :func:`training.selfrag.critic_cases.build_cases`)."""
    rows, _ = label_cases(build_cases(questions, instructions, retriever, by_id, rng, per_aspect), GoldLabeller())
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data", help="folder with squad2_dev_half.json and the instruction JSONL files")
    ap.add_argument("--out", default="runs/smollm2/data")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--issup-negative-fraction", type=float, default=0.25)
    ap.add_argument("--critic-per-aspect", type=int, default=300)
    ap.add_argument("--max-questions", type=int, help="use at most this many train questions (CPU budget)")
    ap.add_argument("--phase2-negatives", type=int, default=2, help="hard negatives per question in phase 2")
    ap.add_argument("--phase2-issup-fraction", type=float, default=0.5, help="IsSup negatives per phase-2 question")
    ap.add_argument("--phase2-questions", type=int, help="use at most this many train questions in phase 2 (CPU budget)")
    ap.add_argument("--phase2-exclude-from", type=Path, action="append", default=[],
                    help="a generator_phase2.jsonl of an earlier build: leave its questions out (continuing that build)")
    args = ap.parse_args(argv)
    data, out = Path(args.data), Path(args.out)
    rng = random.Random(args.seed)
    corpus = load_squad(data / "squad2_dev_half.json", max_passage_chars=MAX_PASSAGE_CHARS)
    train_articles, heldout_articles = split_articles(corpus.articles, HELDOUT_ARTICLES, seed=args.seed)
    instructions = instruction_tasks(data)
    instr_train, instr_heldout = instruction_split(instructions, args.seed)
    by_id = corpus.by_id()
    train = corpus.subset(train_articles)
    heldout = corpus.subset(heldout_articles)
    # training rows read only the train articles' passages (their negatives and contrasts too), so no
    # text of a held-out article is ever trained on; the held-out critic set retrieves from everything
    retriever = BM25Retriever(train.passages)
    heldout_retriever = BM25Retriever(corpus.passages)
    qa_sources = [SourceExample(q.question, q.answers[0], kind="qa", answers=q.answers, id=q.id)
                  for q in train.questions if q.answerable and q.gold]
    if args.max_questions:
        qa_sources = random.Random(args.seed).sample(qa_sources, min(args.max_questions, len(qa_sources)))
    in_sources = [SourceExample(instruction_text(i), shorten(i.output), kind="instruction", id=i.id) for i in instr_train]
    algo = Algorithm3(GoldLabeller(), retriever, k=5, contrast=1, seed=args.seed)
    gen_rows = algo.run(qa_sources + in_sources)
    used = {s.id for s in qa_sources}
    gen_rows += issup_negatives([q for q in train.questions if q.id in used], by_id, rng, args.issup_negative_fraction)
    rng.shuffle(gen_rows)
    n_gen = write_jsonl(out / "generator_train.jsonl", gen_rows)
    phase2_rng = random.Random(args.seed + 2)
    phase2 = isrel_pairs(train.questions, instr_train, retriever, by_id, phase2_rng, replay=150,
                         negatives=args.phase2_negatives, max_questions=args.phase2_questions,
                         exclude_ids=frozenset(phase2_ids_in(args.phase2_exclude_from)))
    phase2_ids = {r["id"] for r in phase2}
    # IsSup negatives in phase 2 too, so the IsSup head is not forgotten while IsRel is trained
    phase2 += issup_negatives([q for q in train.questions if q.id in phase2_ids], by_id, phase2_rng,
                              args.phase2_issup_fraction)
    phase2_rng.shuffle(phase2)
    write_jsonl(out / "generator_phase2.jsonl", phase2)
    critic_train = critic_cases(train.questions, instr_train, retriever, by_id, random.Random(args.seed), args.critic_per_aspect)
    critic_eval = critic_cases(heldout.questions, instr_heldout, heldout_retriever, by_id, random.Random(args.seed + 1),
                               100)
    rng.shuffle(critic_train)
    write_jsonl(out / "critic_train.jsonl", critic_train)
    write_jsonl(out / "critic_eval.jsonl", critic_eval)
    write_jsonl(out / "instructions_heldout.jsonl",
                [{"id": i.id, "instruction": i.instruction, "input": i.input, "output": i.output} for i in instr_heldout])
    variants: dict[str, int] = {}
    for r in gen_rows:
        variants[r["variant"]] = variants.get(r["variant"], 0) + 1
    split = {
        "seed": args.seed,
        "train_articles": train_articles,
        "heldout_articles": heldout_articles,
        "max_passage_chars": MAX_PASSAGE_CHARS,
        "passages": len(corpus.passages),
        "train_questions_used": len(qa_sources),
        "heldout_answerable_questions": sum(q.answerable and bool(q.gold) for q in heldout.questions),
        "instructions_train": len(instr_train),
        "instructions_heldout": [i.id for i in instr_heldout],
        "generator_examples": n_gen,
        "generator_variants": variants,
        "generator_phase2_examples": len(phase2),
        "generator_phase2_variants": {v: sum(r["variant"] == v for r in phase2) for v in sorted({r["variant"] for r in phase2})},
        "critic_train_examples": len(critic_train),
        "critic_eval_examples": len(critic_eval),
    }
    (out / "split.json").write_text(json.dumps(split, indent=1))
    print(json.dumps({k: v for k, v in split.items() if k != "instructions_heldout"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
