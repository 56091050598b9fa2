"""One generator training file from several, shuffled with a seed (the GPU recipe's data).

``build_data``'s phase-2 rows train the answer after ``[Irrelevant]`` with ``[Utility:5]``;
``varied_data``'s read that answer without training it and train ``[Utility:1]``. Mixed as they are,
the two teach opposite things after the same token, so ``--answer-after-irrelevant untrained``
rewrites the first kind to the second's convention::

    python -m cookbook.data.mix --out runs/v5/mix.jsonl --answer-after-irrelevant untrained \\
        runs/v5/varied/generator_train.jsonl runs/v5/base/generator_phase2.jsonl
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_selfrag import tokens as T
from training.core.jsonl import DataFormatError, read_jsonl, write_jsonl


def answer_untrained_after_irrelevant(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with an answer that ends the output after ``[Irrelevant]`` read but not trained, then
    ``[Utility:1]``; rows without one, or with no-loss spans already, come back unchanged."""
    out = dict(row)
    output = str(row.get("output", ""))
    head, _, tail = output.partition(T.IRRELEVANT)
    utility = next((u for u in T.UTILITY if tail.endswith(u)), None)
    answer = tail[: -len(utility)] if utility else ""
    if (utility is None or row.get("no_loss_spans") or output.count(T.IRRELEVANT) != 1
            or any(tok in answer for tok in T.REFLECTION_TOKENS)):
        return out
    start = len(head) + len(T.IRRELEVANT)
    out["output"] = output[: start + len(answer)] + T.UTILITY[0]
    out["no_loss_spans"] = [[start, start + len(answer)]]
    return out


def mix(files: Iterable[Sequence[Mapping[str, Any]]], *, seed: int = 0, untrained_after_irrelevant: bool = False
        ) -> list[dict[str, Any]]:
    """The rows of every file in one seeded shuffle."""
    convert = answer_untrained_after_irrelevant if untrained_after_irrelevant else dict
    rows = [convert(r) for rows in files for r in rows]
    random.Random(seed).shuffle(rows)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cookbook.data.mix", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="generator JSONL files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--answer-after-irrelevant", choices=("as-is", "untrained"), default="as-is")
    args = ap.parse_args(argv)
    try:
        files = [list(read_jsonl(f)) for f in args.files]
    except DataFormatError as exc:
        ap.exit(2, f"error: {exc}\n")
    rows = mix(files, seed=args.seed, untrained_after_irrelevant=args.answer_after_irrelevant == "untrained")
    write_jsonl(Path(args.out), rows)
    print(f"{len(rows)} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
