"""DPO on ReSearch data ("LLMs can learn self-restraint through iterative self-reflection"): TRL's ``DPOTrainer`` +
PEFT LoRA on the 2 best x 2 worst samples.

Pairs come from :func:`training.restraint.pairs.dpo_dataset` (best by expected utility chosen,
worst rejected; pairs of equal utility skipped). The LoRA adapter and the trainable
reflection-token rows are those of ``training.trainers.sft``; ``--init-adapter`` continues an earlier adapter
(the bundled generator, say) and then the reference policy is that adapter as loaded. Evidence
spans (``<paragraph>…</paragraph>``) in a completion are not trained, as in SFT.

Defaults follow the paper's Table 17 (DPO: 400 steps, lr 1e-6, batch 64 = 8 x 8 accumulation,
beta 0.25); scale them down with the flags on a CPU. Resumable from ``--output-dir``; writes
``adapter/`` (+ ``selfrag_training.json``), ``loss_curve.png`` and ``loss_history.json``.

Example::

    python -m training.dpo --data runs/research.jsonl --output-dir runs/dpo \\
        --base-model SmolLM2-135M-Instruct.Q4_1.gguf --init-adapter langchain_selfrag/models/selfrag-smollm2-135m \\
        --max-steps 60 --batch-size 4 --grad-accum 2 --lr 5e-5 --threads 1
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from .core.args import add_research_arguments, parse, research_config
from .core.config import TrainingError
from .core.jsonl import DataFormatError
from .restraint.pairs import ResearchDataError
from .trainers.dpo import train_dpo


def build_parser() -> argparse.ArgumentParser:
    """Options of ``python -m training.dpo`` (Table 17 defaults)."""
    ap = argparse.ArgumentParser(prog="python -m training.dpo", description=__doc__.split("\n\n")[0])
    add_research_arguments(ap, lr=1e-6, steps=400, batch=8, accum=8)
    ap.add_argument("--beta", type=float, default=0.25, help="DPO beta (Table 17: 0.25)")
    ap.add_argument("--n-best", type=int, default=2)
    ap.add_argument("--n-worst", type=int, default=2)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    ap = build_parser()
    args = parse(ap, argv)
    try:
        result = train_dpo(research_config(args, beta=args.beta, n_best=args.n_best, n_worst=args.n_worst))
    except (TrainingError, DataFormatError, ResearchDataError) as exc:
        ap.exit(2, f"error: {exc}\n")
    print(json.dumps({"adapter": str(result.adapter_dir), "steps": result.steps, "train_loss": result.train_loss,
                      "pairs": result.examples, "seconds": round(result.seconds, 1)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
