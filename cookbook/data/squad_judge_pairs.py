"""Relevance-judge pairs from SQuAD 2.0 articles: each question on its own paragraph, label 1 when the
paragraph answers it and 0 for the unanswerable questions written against it (a name or date swapped,
a negation: the near misses a judge must refuse)::

    python -m cookbook.data.squad_judge_pairs --data ../shared/data --articles Packet_switching,1973_oil_crisis,Immune_system \\
        --per-label 100 --out runs/judge/eval_pairs.jsonl

The pairs are what ``training.judge_sft --eval-file`` reads (``{question, title, passage, label, variant}``),
with the variants of :data:`training.relevance_head.CONTRASTS` (``squad_pair_relevant``,
``squad_unanswerable_more``), so its report gives their AUC apart. Made for held-out articles, such as
the three the Qwen recipe's training file leaves out (``cookbook/selfrag_qwen/build_data.sh``).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path

from langchain_selfrag.evaluation.common.errors import DatasetError
from langchain_selfrag.evaluation.qa.data import Dataset
from langchain_selfrag.evaluation.qa.loaders import load_dataset, select_articles
from training.core.jsonl import write_jsonl

SQUAD_FILE = "squad2_dev_half.json"


def squad_judge_pairs(dataset: Dataset, articles: Sequence[str], *, per_label: int, seed: int = 0) -> list[dict]:
    """Up to ``per_label`` answerable and as many unanswerable questions of ``articles`` (of a SQuAD
    :class:`~langchain_selfrag.evaluation.qa.data.Dataset`), each on its own paragraph, in a seeded random
    order; an unknown article raises :class:`~langchain_selfrag.evaluation.common.errors.DatasetError`."""
    chosen = select_articles(dataset, list(articles))
    passages = {p.id: p for p in chosen.corpus}
    answerable, unanswerable = [], []
    for title in articles:
        for ex in chosen.examples:
            if ex.meta["article"] != title.replace("_", " "):
                continue
            passage = passages[ex.gold_passage]
            (answerable if ex.answerable else unanswerable).append({
                "question": ex.question, "title": passage.title, "passage": passage.text,
                "label": int(bool(ex.answerable)), "id": ex.id,
                "variant": "squad_pair_relevant" if ex.answerable else "squad_unanswerable_more"})
    rng = random.Random(seed)
    rng.shuffle(answerable)
    rng.shuffle(unanswerable)
    pairs = answerable[:per_label] + unanswerable[:per_label]
    rng.shuffle(pairs)
    return pairs


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cookbook.data.squad_judge_pairs", description=__doc__.split("::")[0])
    ap.add_argument("--data", required=True, help=f"folder holding {SQUAD_FILE}")
    ap.add_argument("--articles", required=True, help="comma-separated article titles (as in the file: Immune_system)")
    ap.add_argument("--per-label", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        pairs = squad_judge_pairs(load_dataset(Path(args.data) / SQUAD_FILE, "squad"),
                                  [a for a in args.articles.split(",") if a], per_label=args.per_label, seed=args.seed)
    except DatasetError as exc:
        ap.exit(2, f"error: {exc}\n")
    write_jsonl(args.out, pairs)
    labels = sum(p["label"] for p in pairs)
    print(f"{len(pairs)} pairs ({labels} answerable, {len(pairs) - labels} unanswerable) -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
