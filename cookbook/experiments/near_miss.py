"""Phase-3 data: near misses, passages about the question's subject that do not answer it.

The shipped model judges a passage about the asked entity relevant even when it lacks the asked
detail, and then copies a span from it. SQuAD 2.0's unanswerable questions are that case: each was
written against one paragraph, and the chunk holding its *plausible* answer is on topic but does not
answer it. Each becomes an ``[Irrelevant]`` example (the plausible answer after it is not trained;
``[Utility:1]`` is). Against each, an answerable question of the same paragraph with its gold chunk
(``[Relevant]`` answer ``[Fully supported]`` ``[Utility:5]``) keeps the contrast on the same text.
With ``--gap-documents N``, invented documents (:mod:`cookbook.data.gap_corpus`) add the same contrast in a
plainer form: a question on a detail the document does not state (``[Irrelevant]``) against one on
a detail it does. Phase 2's examples in a smaller dose (gold vs BM25 hard negatives, IsSup
negatives, no-retrieval instructions) keep the other heads in practice.

Only training articles are used, and the abstention validation sample
(:func:`cookbook.selfrag_smollm2.abstention.squad_questions`) is left out. (For the shipped v4's
lineage that sample was already trained in phase 2 of v3 and v4, which together used every
answerable question of the training articles.)

``python -m cookbook.experiments.near_miss --data ../shared/data --out runs/smollm2v5/data``
then phase 2 of ``cookbook/selfrag_smollm2/train.sh`` on that file, continuing the shipped adapter
(the runs and their verdicts: ``cookbook/EXPERIMENTS.md``).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from langchain_selfrag import bundled
from langchain_selfrag import tokens as T
from langchain_selfrag.prompts import format_evidence
from training.core.jsonl import write_jsonl
from training.selfrag.bm25 import BM25Retriever
from training.selfrag.qa_data import Passage, QAItem, load_squad

from cookbook.data.gap_corpus import GapDocument, gap_corpus, invented_corpus_texts
from cookbook.selfrag_smollm2.abstention import squad_questions
from cookbook.selfrag_smollm2.build_data import instruction_split, instruction_tasks, isrel_pairs, issup_negatives


def paragraph_of(passage_id: str) -> str:
    """``article/paragraph`` of a chunk id ``article/paragraph/chunk``."""
    return passage_id.rsplit("/", 1)[0]


def near_miss_row(q: QAItem, passage: Passage) -> dict:
    """``[Irrelevant]`` for an unanswerable question's own chunk; its plausible answer is not trained."""
    head = T.RETRIEVAL + format_evidence(passage.title, passage.text) + T.IRRELEVANT
    plausible = q.plausible_answers[0]  # its chunk is gold because it holds this answer
    return {"instruction": q.question, "input": "", "output": head + plausible + T.UTILITY[0], "id": q.id,
            "variant": "near_miss", "passage": passage.id,
            "no_loss_spans": [[len(head), len(head) + len(plausible)]]}


def contrast_row(q: QAItem, passage: Passage) -> dict:
    """An answerable question of the same paragraph, read from its gold chunk."""
    output = (T.RETRIEVAL + format_evidence(passage.title, passage.text) + T.RELEVANT + q.answers[0]
              + T.FULLY_SUPPORTED + T.UTILITY[4])
    return {"instruction": q.question, "input": "", "output": output, "id": q.id, "variant": "near_miss_contrast",
            "passage": passage.id}


def gap_rows(docs: Sequence[GapDocument], rng: random.Random) -> list[dict]:
    """Per invented document, a gap question on it (``[Irrelevant]``; after it, the stated answer of the
    pair's question is read but not trained, ``[Utility:1]`` is) and that stated question
    (``[Relevant]`` answer ``[Fully supported]`` ``[Utility:5]``), on the same text."""
    rows: list[dict] = []
    for doc in docs:
        if not doc.gaps:
            continue
        title = doc.source.removesuffix(".md")  # the title `selfrag index` gives a file: its stem
        evidence = T.RETRIEVAL + format_evidence(title, doc.text)
        question, answer = rng.choice(doc.answerable)
        head = evidence + T.IRRELEVANT
        rows.append({"instruction": rng.choice(doc.gaps), "input": "", "output": head + answer + T.UTILITY[0],
                     "id": f"{doc.source}/gap", "variant": "gap", "no_loss_spans": [[len(head), len(head) + len(answer)]]})
        rows.append({"instruction": question, "input": "", "id": f"{doc.source}/stated", "variant": "gap_contrast",
                     "output": evidence + T.RELEVANT + answer + T.FULLY_SUPPORTED + T.UTILITY[4]})
    return rows


def near_miss_pairs(questions: Sequence[QAItem], by_id: Mapping[str, Passage], rng: random.Random, n: int,
                    keep_out: Collection[str] = frozenset()) -> list[dict]:
    """Up to ``n`` unanswerable questions with a plausible-answer chunk, each with an answerable
    question of the same paragraph (its gold chunk) when one is left; ``keep_out`` ids are never used."""
    answerable: dict[str, list[QAItem]] = {}
    for q in questions:
        if q.answerable and q.gold and q.answers and q.id not in keep_out:
            answerable.setdefault(paragraph_of(q.gold[0]), []).append(q)
    unanswerable = [q for q in questions if not q.answerable and q.gold and q.id not in keep_out]
    rows: list[dict] = []
    used: set[str] = set()
    for q in rng.sample(unanswerable, min(n, len(unanswerable))):
        rows.append(near_miss_row(q, by_id[q.gold[0]]))
        partners = [a for a in answerable.get(paragraph_of(q.gold[0]), []) if a.id not in used]
        if partners:
            partner = min(partners, key=lambda a: (a.gold[0] != q.gold[0], a.id))  # the same chunk first
            used.add(partner.id)
            rows.append(contrast_row(partner, by_id[partner.gold[0]]))
    return rows


def build(data: Path, split: Mapping, *, seed: int = 0, near_miss: int = 1100, phase2_questions: int = 150,
          phase2_negatives: int = 2, replay: int = 100, issup_fraction: float = 0.5, validation_n: int = 150,
          validation_seed: int = 0, gap_documents: int = 0, gap_varied: bool = False) -> list[dict]:
    """The phase-3 rows, shuffled: near misses with their contrasts, gap questions on invented documents
    (:mod:`cookbook.data.gap_corpus`, with names that share no word with the project's invented corpora), then
    phase 2's kinds in a smaller dose."""
    corpus = load_squad(data / "squad2_dev_half.json", max_passage_chars=split["max_passage_chars"])
    train = corpus.subset(split["train_articles"])
    by_id = corpus.by_id()
    keep_out = {q.id for q in squad_questions(corpus, split, "validation", validation_n, validation_seed)}
    rng = random.Random(seed + 3)
    rows = near_miss_pairs(train.questions, by_id, rng, near_miss, keep_out) if near_miss > 0 else []
    used = {r["id"] for r in rows}
    if gap_documents > 0:
        rows += gap_rows(gap_corpus(gap_documents, seed, avoid=invented_corpus_texts(), varied=gap_varied), rng)
    instr_train, _ = instruction_split(instruction_tasks(data), split["seed"])
    rest = [q for q in train.questions if q.id not in keep_out and q.id not in used]
    phase2 = isrel_pairs(rest, instr_train, BM25Retriever(train.passages), by_id, rng, replay=replay,
                         negatives=phase2_negatives, max_questions=phase2_questions)
    phase2_ids = {r["id"] for r in phase2}
    phase2 += issup_negatives([q for q in rest if q.id in phase2_ids], by_id, rng, issup_fraction)
    rows += phase2
    rng.shuffle(rows)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--out", default="runs/smollm2v5/data", help="folder for generator_phase3.jsonl")
    ap.add_argument("--split", default=str(bundled.bundle_dir() / "split.json"),
                    help="the build's split.json (training articles and passage size)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--near-miss", type=int, default=1100, help="unanswerable questions used (each with a contrast)")
    ap.add_argument("--phase2-questions", type=int, default=150, help="gold vs hard-negative questions mixed in")
    ap.add_argument("--phase2-negatives", type=int, default=2, help="hard negatives per mixed-in question")
    ap.add_argument("--replay", type=int, default=100, help="no-retrieval instruction examples mixed in")
    ap.add_argument("--phase2-issup-fraction", type=float, default=0.5,
                    help="IsSup negatives per mixed-in question (a wrong answer to its gold passage, [No support])")
    ap.add_argument("--gap-documents", type=int, default=0,
                    help="invented documents, each with a question on a detail it lacks and one it states")
    ap.add_argument("--gap-varied", action="store_true",
                    help="gap documents with more kinds of detail and several phrasings of each question")
    ap.add_argument("--validation-n", type=int, default=150,
                    help="the abstention validation sample's size (its questions are left out)")
    args = ap.parse_args(argv)
    data, out = Path(args.data), Path(args.out)
    split = json.loads(Path(args.split).read_text())
    rows = build(data, split, seed=args.seed, near_miss=args.near_miss, phase2_questions=args.phase2_questions,
                 phase2_negatives=args.phase2_negatives, replay=args.replay, validation_n=args.validation_n,
                 gap_documents=args.gap_documents, issup_fraction=args.phase2_issup_fraction,
                 gap_varied=args.gap_varied)
    write_jsonl(out / "generator_phase3.jsonl", rows)
    variants = {v: sum(r["variant"] == v for r in rows) for v in sorted({r["variant"] for r in rows})}
    summary = {"examples": len(rows), "variants": variants, "seed": args.seed, "validation_left_out": args.validation_n,
               "gap_documents": args.gap_documents, "gap_varied": args.gap_varied}
    (out / "phase3.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
