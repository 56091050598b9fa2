"""Critic SFT (TRL SFTTrainer + PEFT LoRA) and per-aspect accuracy on held-out examples.

The critic reads an aspect instruction and a case (:mod:`training.selfrag.labels`) and writes one
reflection token; the 15 tokens are added to its vocabulary so each label is one token and can be
scored at one position. Accuracy per aspect (the paper's Table 5 analogue) is the share of
held-out examples whose most probable allowed label is the reference label
(:mod:`training.selfrag.critic_eval`).

Example::

    python -m training.critic_sft --base-model SmolLM2-135M-Instruct.Q4_1.gguf \\
        --train-file runs/data/critic_train.jsonl --eval-file runs/data/critic_eval.jsonl --output-dir runs/critic
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from .core.args import add_sft_arguments, config_from_args, parse
from .core.config import TrainingError
from .core.jsonl import DataFormatError
from .selfrag.critic_eval import evaluate_adapter
from .trainers.sft import train_sft


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.critic_sft", description=__doc__.split("\n\n")[0])
    add_sft_arguments(ap, lr=5e-4, max_length=384)
    ap.add_argument("--eval-only", action="store_true", help="skip training; evaluate output-dir/adapter")
    args = parse(ap, argv)
    try:
        cfg = config_from_args(args)
        if cfg.prompt_layout not in (None, "paper"):
            raise TrainingError("the critic is trained in the paper's prompt layout (it labels data for the generator); "
                                "a model in a chat layout writes its own reflection tokens: train it with training.generator_sft")
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        if not args.eval_only:
            # held-out records are scored for accuracy after training, not for loss during it
            result = train_sft(dataclasses.replace(cfg, eval_file=None))
            print(json.dumps({"adapter": str(result.adapter_dir), "steps": result.steps, "train_loss": result.train_loss,
                              "seconds": round(result.seconds, 1)}, indent=1))
        if args.eval_file:
            report = evaluate_adapter(Path(args.output_dir) / "adapter", args.eval_file)
            Path(args.output_dir, "critic_accuracy.json").write_text(json.dumps(report, indent=1))
            print(json.dumps(report, indent=1))
    except (TrainingError, DataFormatError) as exc:
        ap.exit(2, f"error: {exc}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
