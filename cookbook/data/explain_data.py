"""A continuation file that teaches answers which explain: the how and why questions that installed
documentation answers in one sentence (:func:`~langchain_selfrag.calibrate.questions.explain_questions`:
"To TASK, DO THIS." asked as *How do I TASK?*, "X is done by DOING ..." as *How is X done?*, "X is Y
because ..." as *Why is X Y?*), each on its chunk with that whole sentence as the answer
(``[Relevant]``, ``[Fully supported]``), and on the same document's best BM25 chunk that lacks the
sentence (``[Irrelevant]``), plus a replay sample of the run's own training file::

    python -m cookbook.data.explain_data --trained runs/g7/all.jsonl \\
        --out runs/x1/explain.jsonl --replay 1200 --seed 0

Documents are read and chunked as ``selfrag index`` does (``varied_data.chunk_texts``). Left out: the
trust suite's packages and this project's own distribution (its README describes what ``make demo``
and the throughput benchmark ask about ``docs/``).
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from langchain_selfrag.calibrate.questions import explain_questions
from training.core.jsonl import DataFormatError, read_jsonl, write_jsonl
from training.core.text import contains_answer
from training.selfrag.bm25 import BM25Retriever
from training.selfrag.doc_sources import installed_docs, normalise, site_dirs
from training.selfrag.qa_data import Passage

from .varied_data import chunk_texts, irrelevant_row, relevant_row, suite_packages

#: This project's distribution: its README is about the ``docs/`` that ``make demo`` asks.
OWN_DISTRIBUTION = "langchain-selfrag"


def explain_rows(chunks: Mapping[str, Sequence[Passage]], *, per_chunk: int = 2) -> list[dict]:
    """For every how/why question a chunk explains: the ``[Relevant]`` row answered with its sentence and,
    when the document has another chunk without that sentence, the ``[Irrelevant]`` row on the best one."""
    pool = [p for ps in chunks.values() for p in ps]
    bm25 = BM25Retriever(pool) if pool else None
    rows = []
    for passages in chunks.values():
        for p in passages:
            for question, sentence in explain_questions(p.text, limit=per_chunk):
                rows.append(relevant_row(question, sentence, p, "doc_explain"))
                hits = [h for h in bm25(question, 40) if h.article == p.article and h.id != p.id
                        and not contains_answer(h.text, [sentence])]
                if hits:
                    rows.append(irrelevant_row(question, hits[0], sentence, "doc_explain_same_document"))
    return rows


def build(trained_file: Path | None, *, replay: int, seed: int = 0, extra_site: Sequence[str] = (),
          exclude: Collection[str] = (), files_per_package: int = 10) -> tuple[list[dict], dict]:
    """The shuffled rows (explaining answers plus ``replay`` rows of ``trained_file``) and a summary."""
    rng = random.Random(seed)
    skip = suite_packages() | {OWN_DISTRIBUTION} | {normalise(n) for n in exclude}
    docs = installed_docs(site_dirs(extra_site), exclude=skip, files_per_package=files_per_package)
    rows = explain_rows(chunk_texts({d.name: d.text for d in docs}, "doc"))
    new = len(rows)
    trained = list(read_jsonl(trained_file)) if trained_file else []
    questions = {r["instruction"] for r in rows}
    pool = [r for r in trained if r.get("instruction") not in questions]
    if pool and replay:
        rows += rng.sample(pool, min(replay, len(pool)))
    rng.shuffle(rows)
    for i, row in enumerate(rows):
        row["id"] = f"{row.get('variant', 'row')}/x{i}"
    summary = {"examples": len(rows), "new": new, "replayed": len(rows) - new,
               "variants": dict(sorted(Counter(r.get("variant", "?") for r in rows).items())),
               "documents": dict(Counter(d.kind for d in docs)), "packages": len({d.package for d in docs}),
               "left_out": sorted(skip), "trained_file": str(trained_file) if trained_file else None, "seed": seed}
    return rows, summary


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cookbook.data.explain_data",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSONL file to write (a .json summary is written beside it)")
    ap.add_argument("--trained", type=Path, help="the run's own training file, to replay a sample of")
    ap.add_argument("--replay", type=int, default=0, help="rows of --trained to mix in")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--site-packages", action="append", default=[],
                    help="another site-packages folder to read documentation from (repeatable)")
    ap.add_argument("--exclude", action="append", default=[], help="a distribution to leave out (repeatable)")
    args = ap.parse_args(argv)
    if args.replay and not args.trained:
        ap.error("--replay needs --trained FILE")
    if args.trained and not args.trained.is_file():
        ap.error(f"--trained {args.trained}: no such file")
    try:
        rows, summary = build(args.trained, replay=args.replay, seed=args.seed, extra_site=args.site_packages,
                              exclude=args.exclude)
    except DataFormatError as exc:
        ap.exit(2, f"error: {exc}\n")
    if not summary["new"]:
        ap.exit(1, "error: no documentation sentence on this machine gave a how/why question\n")
    out = Path(args.out)
    write_jsonl(out, rows)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "left_out"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
