"""A continuation file that teaches on-topic unanswerable questions: SQuAD 2.0's unanswerable questions
not yet trained, each on its plausible-answer passage labelled ``[Irrelevant]`` and, for a share of them,
paired with an answerable question of the *same* passage labelled ``[Relevant]``, plus a replay sample
of the run's own training file (so that the rest is not forgotten)::

    python -m cookbook.data.unanswerable_pairs --data ../shared/data \\
        --trained runs/g/all.jsonl --out runs/g6/cont.jsonl --unanswerable 1100 --replay 1500 --seed 7

The trust suite's SQuAD articles are left out (``varied_data.KEEP_OUT_ARTICLES``), and a question
whose text the trained file holds is not used again.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from training.core.jsonl import read_jsonl, write_jsonl

from .varied_data import irrelevant_row, relevant_row, squad_items


def pair_rows(answerable: Sequence[tuple], unanswerable: Sequence[tuple], trained: set[str], n: int,
              rng: random.Random, pair_share: float = 0.6) -> list[dict]:
    """Up to ``n`` untrained unanswerable questions as ``[Irrelevant]`` rows, each followed, with
    probability ``pair_share``, by an answerable question of the same passage as a ``[Relevant]`` row.

    ``answerable``/``unanswerable``: :func:`~cookbook.data.varied_data.squad_items`'s lists."""
    same_passage: dict[str, list[tuple]] = {}
    for question, answer, passage, golds in answerable:
        if answer in golds:  # a span answer, not the gold sentence of a how/why question
            same_passage.setdefault(passage.id, []).append((question, answer, passage))
    fresh = [item for item in unanswerable if item[0] not in trained]
    rng.shuffle(fresh)
    rows = []
    for question, plausible, passage in fresh[:n]:
        rows.append(irrelevant_row(question, passage, plausible, "squad_unanswerable_more"))
        partners = same_passage.get(passage.id)
        if partners and rng.random() < pair_share:
            q, a, p = rng.choice(partners)
            rows.append(relevant_row(q, a, p, "squad_pair_relevant"))
    return rows


def build(data: Path, trained_file: Path, *, unanswerable: int, replay: int, seed: int = 0,
          pair_share: float = 0.6) -> tuple[list[dict], dict]:
    """The shuffled rows (new pairs plus ``replay`` rows of ``trained_file``) and a summary."""
    rng = random.Random(seed)
    trained = list(read_jsonl(trained_file))
    # the pools in varied_data's default order (seed 0); ``seed`` draws from them
    _, answerable, unanswerable_items = squad_items(data / "squad2_dev_half.json", random.Random(0))
    rows = pair_rows(answerable, unanswerable_items, {str(r.get("instruction", "")) for r in trained},
                     unanswerable, rng, pair_share)
    rows += rng.sample(trained, min(replay, len(trained)))
    rng.shuffle(rows)
    for i, row in enumerate(rows):
        row.setdefault("id", f"{row.get('variant', 'row')}/c{i}")
    summary = {"examples": len(rows), "variants": dict(Counter(r.get("variant", "?") for r in rows).most_common()),
               "unanswerable_available": len(unanswerable_items), "trained_file": str(trained_file), "seed": seed}
    return rows, summary


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data", help="folder with squad2_dev_half.json")
    ap.add_argument("--trained", required=True, type=Path, help="the training file of the run to continue")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--unanswerable", type=int, default=1100, help="new unanswerable questions at most")
    ap.add_argument("--replay", type=int, default=1500, help="rows of --trained mixed back in")
    ap.add_argument("--pair-share", type=float, default=0.6,
                    help="share of unanswerable questions paired with an answerable one of the same passage")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not args.trained.is_file():
        ap.error(f"--trained {args.trained}: no such file")
    if not 0.0 <= args.pair_share <= 1.0:
        ap.error("--pair-share must be between 0 and 1")
    rows, summary = build(Path(args.data), args.trained, unanswerable=args.unanswerable, replay=args.replay,
                          seed=args.seed, pair_share=args.pair_share)
    write_jsonl(args.out, rows)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
