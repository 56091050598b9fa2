"""Command line for ReSearch data (Algorithm 1 of "LLMs can learn self-restraint through iterative self-reflection"):
``python -m training.research``.

Questions come from a text file of ``Who is X?`` lines (``bio_entities.txt``) or a JSONL file of
``{"question", "entity"?, "id"?, "passages"?}`` records; ``--passages`` adds passages line by line
in the ``bio_retrieved_passages.txt`` format (:mod:`training.restraint.questions`). The policy is a
reflection model (``--model bundled``, a GGUF file or a Hugging Face directory), the claim splitter
one claim per sentence, the evaluator
:class:`~langchain_selfrag.restraint.consistency.IsSupConsistencyScorer` on the same model
(``--scorer consistency``, the paper's self-evaluation) or
:class:`~langchain_selfrag.restraint.scoring.IsSupScorer` against each question's passages
(``--scorer passages``: a retrieval-grounded evaluator, like the paper's oracle; IsRel-weighted over
the passages, calibrated when a calibration was fitted for the model file). The
output JSONL is appended record by record; rerunning skips the questions already in it
(:mod:`training.restraint.algorithm`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from statistics import fmean
from typing import Any

from langchain_selfrag.restraint.calibration import calibration_for
from langchain_selfrag.restraint.claims import SentenceSplitter
from langchain_selfrag.restraint.consistency import IsSupConsistencyScorer
from langchain_selfrag.restraint.ranking import rank_samples
from langchain_selfrag.restraint.scoring import IsSupScorer

from .restraint.algorithm import ReflectionLMPolicy, ResearchConfig, ResearchRun, run
from .restraint.questions import read_questions


def load_lm(model: str, threads: int | None = None, n_ctx: int = 4096) -> Any:
    """The reflection LM at ``model`` (``bundled``: the bundled model, built on first use)."""
    from langchain_selfrag.lm import load_reflection_lm, resolve_backend

    if model == "bundled":
        from langchain_selfrag.bundled import BundleError, default_model_path

        try:
            model = str(default_model_path())
        except BundleError as exc:
            raise SystemExit(f"the bundled model is not available here ({exc}); pass --model PATH") from exc
    options: dict[str, Any] = {}
    if resolve_backend(model) == "llamacpp":
        options = {"n_ctx": n_ctx} | ({"n_threads": threads} if threads else {})
    elif threads:
        import torch

        torch.set_num_threads(threads)
    return load_reflection_lm(model, **options)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m training.research", description=__doc__.split("\n\n")[0])
    ap.add_argument("--entities", required=True, help="'Who is X?' lines, or JSONL of {question, entity, id, passages}")
    ap.add_argument("--passages", help="one line of ' [sep] '-separated 'title // text' passages per question")
    ap.add_argument("--model", default="bundled", help="'bundled', a GGUF file or a Hugging Face model directory")
    ap.add_argument("--out", required=True, help="JSONL output; questions already in it are skipped")
    ap.add_argument("-K", "--iterations", type=int, default=3)
    ap.add_argument("-J", "--samples", type=int, default=16)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--method", choices=["research", "search"], default="research")
    ap.add_argument("--max-facts", type=int, help="at most this many facts in P_rewrite (default: all)")
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--scorer", choices=["consistency", "passages"], default="consistency",
                    help="claim probabilities: self-consistency with the samples so far (the paper) or IsSup "
                         "against each question's --passages")
    ap.add_argument("--n-subsets", type=int, default=4, help="sentence subsets per claim (self-consistency)")
    ap.add_argument("--subset-size", type=int, default=5, help="sentences per subset")
    ap.add_argument("--n-ctx", type=int, default=4096, help="llama.cpp context length")
    ap.add_argument("--offset", type=int, default=0, help="skip the first N questions")
    ap.add_argument("--limit", type=int, help="only the first N questions (after --offset)")
    ap.add_argument("--threads", type=int, help="CPU threads for the model")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def main(argv: Sequence[str] | None = None, *, lm: Any = None) -> int:
    """Run the command; ``lm`` replaces ``--model`` (tests pass a fake)."""
    args = build_parser().parse_args(argv)
    try:
        config = ResearchConfig(iterations=args.iterations, samples=args.samples, rho=args.rho,
                                temperature=args.temperature, top_p=args.top_p, seed=args.seed, method=args.method,
                                max_facts=args.max_facts)
        questions = read_questions(args.entities, args.passages)[args.offset:]
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.limit is not None:
        questions = questions[: args.limit]
    if args.scorer == "passages" and not all(q.passages for q in questions):
        print("error: --scorer passages needs passages for every question (--passages or a passages field)",
              file=sys.stderr)
        return 2
    model = lm if lm is not None else load_lm(args.model, args.threads, args.n_ctx)
    scorer = (IsSupScorer(model, calibration=calibration_for(model)) if args.scorer == "passages"
              else IsSupConsistencyScorer(model, args.n_subsets, args.subset_size, args.seed))
    research = ResearchRun(ReflectionLMPolicy(model, max_new_tokens=args.max_new_tokens), SentenceSplitter(),
                           scorer, config)
    best: list[float] = []
    abstained: list[bool] = []

    def note(record: dict[str, Any]) -> None:
        top = rank_samples(record["samples"], config.method)[0]
        best.append(top["expected_utility"])
        abstained.append(bool(top["abstain"]))

    written = run(questions, research, args.out, progress=not args.quiet, on_record=note)
    summary = {"out": str(args.out), "questions": len(questions), "written": written,
               "skipped": len(questions) - written, "mean_best_expected_utility": fmean(best) if best else None,
               "best_is_abstention": fmean(abstained) if abstained else None}
    print(json.dumps(summary))
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
