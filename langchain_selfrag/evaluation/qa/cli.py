"""``selfrag eval DATASET`` on a QA data set: load it, run the systems, print the table.

The flags are defined by :mod:`langchain_selfrag.evaluation.cli`, which dispatches here.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...config import PAPER_SETTINGS
from ..common.errors import DatasetError, EvalError
from ..common.selection import select_examples
from .loaders import load_corpus, load_dataset, select_articles
from .report import markdown_table
from .runner import EvalOptions, run_evaluation
from .systems import resolve_systems


def run_qa_command(args: argparse.Namespace, *, load_model: Callable[[str], Any],
                   default_model: Callable[[], str]) -> int:
    """``selfrag eval DATASET``: prints the summary table and the output paths."""
    if args.named_models:
        raise ValueError("--model NAME=PATH adds a trained model to `selfrag eval bio`; give a plain path here")
    systems = resolve_systems(args.systems)
    if args.k < 1:
        raise ValueError("--k must be at least 1")
    overrides: dict[str, Any] = {}
    if args.threshold is not None:
        if not 0.0 <= args.threshold <= 1.0:
            raise ValueError("--threshold must lie in [0, 1]")
        overrides["threshold"] = args.threshold
    if args.max_new_tokens is not None:
        if args.max_new_tokens < 1:
            raise ValueError("--max-new-tokens must be at least 1")
        overrides["max_new_tokens"] = args.max_new_tokens
    if args.paper:
        overrides.update(PAPER_SETTINGS)
    for name in ("abstain_isrel", "abstain_issup"):
        value = getattr(args, name)
        if value is not None:
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must lie in [0, 1]")
            overrides[name] = value
    extra = {"max_popularity": args.popqa_max_pop} if args.popqa_max_pop is not None else {}
    dataset = load_dataset(args.dataset, args.format, **extra)
    if args.articles:
        dataset = select_articles(dataset, _article_list(args.articles))
    if args.corpus:
        dataset.corpus = load_corpus(args.corpus)
    examples = select_examples(dataset.examples, args.limit, args.sample, args.seed)
    chat_model = getattr(args, "chat_model", None)
    if chat_model and args.model:
        raise EvalError("--chat-model replaces --model: give one of them")
    model = chat_model or args.model or default_model()
    out = Path(args.out or Path("runs") / f"eval-{Path(args.dataset).stem}")
    print(
        f"selfrag eval: {len(examples)} questions from {args.dataset} ({dataset.format}), "
        f"{len(systems)} systems, model {model}, output {out}",
        file=sys.stderr,
    )
    if chat_model:
        from ...graph.context import chat_lm

        lm = chat_lm(chat_model, getattr(args, "base_url", None))
    else:
        lm = load_model(model)
    options = EvalOptions(
        systems=systems,
        retrieval=args.retrieval,
        k=args.k,
        overrides=overrides,
        sweeps=not args.no_sweeps,
        model_name=str(model),
        cache=not args.no_cache,
        negative_rejection=args.negative_rejection,
    )
    started = time.perf_counter()
    report = run_evaluation(
        dataset, examples, lm, out, options, dataset_path=str(Path(args.dataset).resolve()), progress=not args.quiet
    )
    print(markdown_table(report["systems"]))
    print(f"\nreport: {out / 'report.json'}, table: {out / 'report.md'}", end="")
    plots = report["sweeps"].get("plots", [])
    print(f", plots: {', '.join(str(out / p) for p in plots)}" if plots else "")
    print(f"wall time: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


def _article_list(value: str) -> list[str]:
    if value.startswith("@"):
        path = Path(value[1:])
        if not path.is_file():
            raise DatasetError(f"article list not found: {path}")
        return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return value.split(",")
