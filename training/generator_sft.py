"""Generator SFT: the 15 reflection tokens as special tokens, LoRA + trainable token rows.

Completion-only loss: the prompt is not trained, and each ``<paragraph>…</paragraph>`` span is
masked on its own (see :class:`training.core.collate.SelfRAGCollator`). Resumable from ``--output-dir``.

Example::

    python -m training.generator_sft --base-model SmolLM2-135M-Instruct.Q4_1.gguf \\
        --train-file runs/data/generator_train.jsonl --output-dir runs/generator --max-minutes 40
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from .core.args import add_sft_arguments, config_from_args, parse
from .core.config import TrainingError
from .core.jsonl import DataFormatError
from .trainers.sft import train_sft


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.generator_sft", description=__doc__.split("\n\n")[0])
    add_sft_arguments(ap, lr=5e-4, max_length=384)
    args = parse(ap, argv)
    try:
        result = train_sft(config_from_args(args))
    except (TrainingError, DataFormatError) as exc:
        ap.exit(2, f"error: {exc}\n")
    print(json.dumps({"adapter": str(result.adapter_dir), "steps": result.steps, "train_loss": result.train_loss,
                      "seconds": round(result.seconds, 1), "dropped_too_long": result.dropped}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
