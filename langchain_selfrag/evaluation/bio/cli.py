"""The command line of ``selfrag eval bio`` (registered by :mod:`langchain_selfrag.evaluation.cli`).

``selfrag eval bio --data ../shared/data --split test --limit N --rho 0.2,0.5,0.8 --model dpo=PATH --out DIR``
runs the biography task (see :mod:`langchain_selfrag.evaluation.bio.run`). The flags shared with
``selfrag eval`` (``--systems``, ``--limit``, ``--sample``, ``--seed``, ``--model``, ``--out``, ``--k``,
``--threshold``, ``--max-new-tokens``, ``--no-cache``, ``--quiet``) keep their meaning; ``--seed`` also
seeds the bootstrap, and ``--model NAME=PATH`` (repeatable) adds a trained model as system ``NAME``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...restraint.claims import LLMClaimSplitter
from ...restraint.utility import check_rho
from ..common.models import chat_model
from . import report as R
from .data import SPLITS, load_bio, select_questions, write_questions
from .judges import ChatJudge
from .metrics import UTILITY_RHOS
from .run import BioOptions, run_bio
from .systems import load_research, model_path, resolve_systems

#: Target accuracies of the Self-RAG + restrain systems by default.
DEFAULT_RHOS = (0.2, 0.5, 0.8)
#: Tokens per answer: the budget ReSearch data is generated with (``training.research``), so that
#: trained models answer at the length they were trained on; P_write asks for up to 4 sentences.
DEFAULT_MAX_NEW_TOKENS = 160


def add_bio_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``selfrag eval bio`` (the shared ones belong to ``selfrag eval``)."""
    group = parser.add_argument_group(
        "biographies (selfrag eval bio)",
        "DATASET 'bio' runs the biography task of 'LLMs can learn self-restraint through iterative self-reflection'; "
        "--model NAME=PATH (repeatable) adds a trained model (GGUF, HF folder or training adapter folder) as system "
        "NAME; --seed also seeds the bootstrap",
    )
    group.add_argument("--data", default="../shared/data",
                       help="folder with bio_entities.txt and bio_retrieved_passages.txt (default ../shared/data)")
    group.add_argument("--split", default="test", choices=SPLITS, help="entities to evaluate (default test)")
    group.add_argument("--split-seed", type=int, default=0, help="seed of the split by entity (default 0)")
    group.add_argument("--invented", type=int, default=30, help="invented people to add (default 30)")
    group.add_argument("--invented-distractors", action="store_true",
                       help="give each invented person a train-split person's passages, so that restraint must "
                            "reject its claims by judging them, not for want of evidence (use its own --out)")
    group.add_argument("--rho", default=",".join(f"{r:g}" for r in DEFAULT_RHOS),
                       help="target accuracies of the Self-RAG + restrain systems (default 0.2,0.5,0.8)")
    group.add_argument("--selfrag-mode", default="adaptive", choices=("adaptive", "always"),
                       help="retrieval mode of the Self-RAG systems given the entity's passages (default adaptive, "
                            "the library's default)")
    group.add_argument("--research", help="ReSearch records (JSONL) of these questions: adds the research system")
    group.add_argument("--judge", default="overlap", choices=("overlap", "issup", "chat"),
                       help="overlap: lexical overlap with the entity's passages (default; shares no signal with the "
                            "restraint scorer); issup: the reflection model's IsSup (weak, self-graded); "
                            "chat: --chat-model")
    group.add_argument("--judge-labels", metavar="FILE",
                       help="hand-labelled claims (JSONL, e.g. tests/data/bio_claims.jsonl): report every judge's "
                            "agreement with them")
    group.add_argument("--judge-threshold", type=float, default=0.5, help="IsSup judge: true iff score > this")
    group.add_argument("--judge-passages", type=int, help="judge against only the first N passages")
    group.add_argument("--splitter", default="sentence", choices=("sentence", "llm"),
                       help="claims: one per sentence (default) or P_splitter through --chat-model")
    group.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000)")
    group.add_argument("--write-questions", metavar="FILE",
                       help="write the selected questions as JSONL {id, question, entity, split} and stop: the "
                       "input of `python -m training.research --entities FILE` (--split train --invented 0 "
                       "for training data; the eval questions for --research)")
    group.add_argument("--with-passages", action="store_true",
                       help="--write-questions also writes each entity's passages (for python -m training.research "
                       "--scorer passages)")


def parse_rhos(value: str) -> tuple[float, ...]:
    """``"0.2,0.5"`` -> (0.2, 0.5); every value must satisfy 0 <= rho < 1."""
    try:
        rhos = tuple(check_rho(float(v)) for v in value.split(",") if v.strip())
    except ValueError as exc:
        raise ValueError(f"--rho: {exc}") from None
    return tuple(dict.fromkeys(rhos))


def run_bio_command(args: argparse.Namespace, *, load_model: Callable[[str], Any],
                    default_model: Callable[[], str]) -> int:
    """``selfrag eval bio``: prints the held-out table and the output paths."""
    rhos = parse_rhos(args.rho)
    named = list(getattr(args, "named_models", None) or [])
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        raise ValueError("each --model NAME=PATH needs its own NAME")
    if args.bootstrap < 0:
        raise ValueError("--bootstrap must be at least 0")
    systems = resolve_systems(args.systems, rhos, selfrag_mode=args.selfrag_mode, research=bool(args.research),
                              trained=names)
    data = load_bio(args.data, seed=args.split_seed, n_invented=max(0, args.invented),
                    invented_distractors=args.invented_distractors)
    questions = select_questions(data, args.split, limit=args.limit, n_invented=args.invented,
                                 sample=args.sample, sample_seed=args.seed)
    if args.write_questions:
        print(write_questions(questions, args.write_questions, passages=args.with_passages))
        return 0
    settings: dict[str, Any] = {"k": args.k, "max_new_tokens": args.max_new_tokens or DEFAULT_MAX_NEW_TOKENS}
    if args.k < 1 or settings["max_new_tokens"] < 1:
        raise ValueError("--k and --max-new-tokens must be at least 1")
    if args.threshold is not None:
        settings["threshold"] = args.threshold
    model = args.model or default_model()
    out = Path(args.out or Path("runs") / f"eval-bio-{args.split}")
    print(f"selfrag eval bio: {len(questions)} questions ({args.split} split + invented), {len(systems)} systems, "
          f"model {model}, output {out}", file=sys.stderr)
    lm = load_model(model)
    used = {s.model for s in systems if s.model}
    paths = {name: model_path(path) for name, path in named if name in used}
    models = {name: load_model(path) for name, path in paths.items()}
    research = load_research(args.research) if args.research else None
    judge: Any = None
    splitter: Any = None
    if args.judge == "chat" or args.splitter == "llm":
        chat = chat_model(args.chat_model, getattr(args, "base_url", None))
        if args.judge == "chat":
            judge = ChatJudge(chat, max_passages=args.judge_passages or 10, model_name=args.chat_model)
        if args.splitter == "llm":
            splitter = LLMClaimSplitter(chat)
    options = BioOptions(
        systems=systems,
        split=args.split,
        utility_rhos=tuple(sorted(set(UTILITY_RHOS) | set(rhos))),
        settings=settings,
        model_name=str(model),
        model_paths=paths,
        cache=not args.no_cache,
        n_resamples=args.bootstrap,
        seed=args.seed,
        research_path=str(Path(args.research).resolve()) if args.research else "",
        judge_kind=args.judge if args.judge != "chat" else "overlap",
        judge_threshold=args.judge_threshold,
        judge_labels=str(Path(args.judge_labels).resolve()) if args.judge_labels else "",
        judge_passages=args.judge_passages,
    )
    started = time.perf_counter()
    report = run_bio(data, questions, lm, out, options, models=models, judge=judge, splitter=splitter,
                     research=research, progress=not args.quiet)
    print("\n".join(R.markdown_table(report["systems"], "entities", options.utility_rhos, True)))
    print(f"\nreport: {out / 'report.json'}, table: {out / 'report.md'}"
          + "".join(f", plot: {out / p}" for p in report["plots"]))
    print(f"wall time: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0
