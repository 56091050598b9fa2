"""SFT on the best ReSearch sample of each question ("LLMs can learn self-restraint through iterative
self-reflection"), through ``training.trainers.sft.train_sft``.

The best sample (highest expected utility; ties: fewer claims, so the abstention wins a tie at 0)
becomes a ``{prompt, output}`` record: the policy's exact prompt and the sample's raw completion.
The records are written to ``<output-dir>/research_sft_train.jsonl`` (and ``_eval.jsonl`` for
``--eval-file``) and trained like the generator: LoRA + reflection-token rows, evidence spans
masked, resumable, loss curve. Defaults follow Table 17 (SFT: 2000 steps, lr 5e-6, batch 16).

Example::

    python -m training.research_sft --data runs/research.jsonl --base-model SmolLM2-135M-Instruct.Q4_1.gguf \\
        --init-adapter langchain_selfrag/models/selfrag-smollm2-135m --output-dir runs/research_sft --max-steps 50
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from .core.args import add_research_arguments, config_from_args, parse
from .core.config import TrainingError
from .core.jsonl import DataFormatError
from .restraint.pairs import ResearchDataError
from .trainers.sft import train_research_sft


def build_parser() -> argparse.ArgumentParser:
    """Options of ``python -m training.research_sft`` (Table 17 defaults)."""
    ap = argparse.ArgumentParser(prog="python -m training.research_sft", description=__doc__.split("\n\n")[0])
    add_research_arguments(ap, lr=5e-6, steps=2000, batch=8, accum=2)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    ap = build_parser()
    args = parse(ap, argv)
    try:
        result = train_research_sft(config_from_args(args), args.rho)
    except (TrainingError, DataFormatError, ResearchDataError) as exc:
        ap.exit(2, f"error: {exc}\n")
    print(json.dumps({"adapter": str(result.adapter_dir), "steps": result.steps, "train_loss": result.train_loss,
                      "seconds": round(result.seconds, 1), "dropped_too_long": result.dropped}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
