"""RLOO on ReSearch prompts ("LLMs can learn self-restraint through iterative self-reflection"): TRL's ``RLOOTrainer``
+ PEFT LoRA, reward = expected utility.

The reward of a sampled completion is its E[U] at rho* (Eq. 4) under a FROZEN evaluator: a
``ClaimSplitter`` breaks the answer into claims and a ``ClaimScorer`` gives each a probability of
being true; an abstention (empty, the record's own abstention, or a one-sentence refusal) scores 0.
The online reward is computed on the sampled completion itself. Command line: claims are sentences
(:class:`~langchain_selfrag.restraint.claims.SentenceSplitter`), scored by the
``--evaluator-model`` reflection model with ``--evaluator passages`` (default:
:class:`~langchain_selfrag.restraint.scoring.IsSupScorer` over the passages each record carries,
``"passages": [{"title", "text"}]``) or ``--evaluator consistency``
(:class:`~langchain_selfrag.restraint.consistency.IsSupConsistencyScorer` against the record's
stored samples: the paper's self-consistency, for data made without passages). A scorer that needs
passages refuses records without them (:func:`check_evidence`) instead of scoring every claim 0.5.

``--offline`` rewards from the fixed ReSearch data instead: a completion equal to one of the
question's samples gets that sample's E[U]; otherwise each claim's probability is looked up among
the question's scored claims, and a claim not found there is scored by the evaluator when one is
given, else gets ``--unknown-p`` (default: the mean probability of the question's claims). TRL
samples new completions, so most claims may miss and the reward then measures little more than
length: the hit / miss / fallback counts (:meth:`UtilityReward.counts`) go into the training
metadata (``reward_counts``), and a claim miss rate above :data:`MISS_RATE_WARN` is warned about.

Defaults follow Table 17 (RLOO: 600 steps, lr 1e-6, batch 512 = 8 x 64 accumulation, KL 0.1);
advantages are normalised to standard deviation 1, as in the paper. Writes what ``training.dpo``
writes, plus ``reward_curve.png``.

Example::

    python -m training.rloo --data runs/research.jsonl --output-dir runs/rloo --offline \\
        --base-model SmolLM2-135M-Instruct.Q4_1.gguf --init-adapter langchain_selfrag/models/selfrag-smollm2-135m \\
        --max-steps 30 --batch-size 8 --grad-accum 1 --num-generations 4 --max-completion-length 96 --lr 2e-5
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from langchain_selfrag.lm import ReflectionLMError

from .core.args import add_research_arguments, parse, research_config
from .core.config import META_FILE, TrainingError
from .core.jsonl import DataFormatError
from .restraint.pairs import ResearchDataError, read_research
from .restraint.reward import EVALUATORS, default_evaluator
from .trainers.rloo import train_rloo


def build_parser() -> argparse.ArgumentParser:
    """Options of ``python -m training.rloo`` (Table 17 defaults)."""
    ap = argparse.ArgumentParser(prog="python -m training.rloo", description=__doc__.split("\n\n")[0])
    add_research_arguments(ap, lr=1e-6, steps=600, batch=8, accum=64)
    ap.add_argument("--beta", type=float, default=0.1, help="KL coefficient (Table 17 regularization: 0.1)")
    ap.add_argument("--num-generations", type=int, default=4, help="completions per prompt (the leave-one-out group)")
    ap.add_argument("--max-completion-length", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--raw-advantages", action="store_true", help="do not normalise advantages to std 1")
    ap.add_argument("--evaluator-model", help="frozen judge for IsSup claim scores (a GGUF path)")
    ap.add_argument("--evaluator", choices=EVALUATORS, default="passages",
                    help="judge claims against each record's passages, or by self-consistency with its samples")
    ap.add_argument("--offline", action="store_true", help="rewards from the fixed ReSearch data (see the module doc)")
    ap.add_argument("--unknown-p", type=float, help="offline: probability of a claim not in the data")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    ap = build_parser()
    args = parse(ap, argv)
    try:
        cfg = research_config(args, beta=args.beta)
        records = read_research(cfg.train_file, cfg.limit)
        splitter, scorer = default_evaluator(records, args.evaluator_model, offline=args.offline,
                                             unknown_p=args.unknown_p, threads=args.threads,
                                             evaluator=args.evaluator)
        result = train_rloo(cfg, splitter=splitter, scorer=scorer, offline=args.offline, records=records,
                            num_generations=args.num_generations, max_completion_length=args.max_completion_length,
                            temperature=args.temperature, top_p=args.top_p,
                            normalize_advantages=not args.raw_advantages)
    except (TrainingError, DataFormatError, ResearchDataError, ReflectionLMError) as exc:
        ap.exit(2, f"error: {exc}\n")
    counts = json.loads((result.adapter_dir / META_FILE).read_text()).get("reward_counts")
    print(json.dumps({"adapter": str(result.adapter_dir), "steps": result.steps, "train_loss": result.train_loss,
                      "prompts": result.examples, "seconds": round(result.seconds, 1), "reward_counts": counts},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
