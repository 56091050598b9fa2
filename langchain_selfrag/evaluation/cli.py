"""``selfrag eval DATASET``: compare Self-RAG with its baselines and ablations on one data set.

``register(subparsers)`` adds the ``eval`` subcommand to the ``selfrag`` CLI; ``main(argv)`` runs it
standalone (``python -m langchain_selfrag.evaluation``). A data file runs the QA harness
(:func:`.qa.cli.run_qa_command`), ``bio`` the biography task (:func:`.bio.cli.run_bio_command`),
each with this module's :func:`load_model` and :func:`default_model` (patched in tests).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..config_flags import add_config_flags
from .bio.cli import add_bio_arguments, run_bio_command
from .bio.systems import parse_named_model
from .common.errors import DatasetError, EvalError
from .common.models import default_model, load_model
from .qa.cli import run_qa_command
from .qa.loaders import FORMATS
from .qa.systems import SYSTEMS


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
        help="GGUF file or HF model dir (default: the bundled model; when it cannot be built, an error names what "
        "to install); bio: NAME=PATH (repeatable) adds a trained model as system NAME",
    )
    parser.add_argument("--chat-model", metavar="PROVIDER:MODEL",
                        help="a LangChain chat model by init_chat_model's name (openai:gpt-4o-mini): on a QA data set "
                             "the reflection model instead of --model, read from its token log-probabilities "
                             "(ChatReflectionLM); bio: the model of --judge chat / --splitter llm")
    parser.add_argument("--base-url", metavar="URL", help="with --chat-model: the server it talks to")
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
    # The Self-RAG systems' knobs a run may change, generated from SelfRAGConfig as in `selfrag ask`.
    add_config_flags(parser, names=("threshold", "abstain_isrel", "abstain_issup"))
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
    return run_qa_command(args, load_model=load_model, default_model=default_model)


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point: ``python -m langchain_selfrag.evaluation DATASET ...``."""
    parser = argparse.ArgumentParser(
        prog="selfrag eval", description="Compare Self-RAG with its baselines and ablations on one data set."
    )
    add_arguments(parser)
    return run_command(parser.parse_args(argv))
