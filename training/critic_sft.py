"""Critic SFT (TRL SFTTrainer + PEFT LoRA) and per-aspect accuracy on held-out examples.

The critic reads an aspect instruction and a case (``training.labels``) and writes one
reflection token; the 15 tokens are added to its vocabulary so each label is one token and can be
scored at one position. Accuracy per aspect (the paper's Table 5 analogue) is the share of
held-out examples whose most probable allowed label is the reference label.

Example::

    python -m training.critic_sft --base-model SmolLM2-135M-Instruct.Q4_1.gguf \\
        --train-file runs/data/critic_train.jsonl --eval-file runs/data/critic_eval.jsonl --output-dir runs/critic
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from .cli_common import add_sft_arguments, config_from_args, parse
from .labels import LABELS
from .sft import TrainingError, load_records, load_trained, record_prompt, train_sft


def aspect_of(record: Mapping) -> str:
    """The aspect of a critic record: its ``aspect`` field, else inferred from the label."""
    aspect = record.get("aspect")
    if aspect in LABELS:
        return aspect
    label = record.get("output", "").strip()
    for name, labels in LABELS.items():
        if name != "retrieve_evidence" and label in labels:
            return name
    raise TrainingError(f"cannot tell the aspect of record with output {label!r}")


def evaluate_critic(lm, records: Sequence[Mapping], *, batch_size: int = 8) -> dict[str, dict[str, float]]:
    """Per-aspect accuracy and count of ``lm`` (a ReflectionLM) on critic records, plus ``overall``."""
    by_aspect: dict[str, list[Mapping]] = defaultdict(list)
    for rec in records:
        by_aspect[aspect_of(rec)].append(rec)
    report: dict[str, dict[str, float]] = {}
    total = correct_all = 0
    for aspect, recs in sorted(by_aspect.items()):
        correct = 0
        for start in range(0, len(recs), batch_size):
            chunk = recs[start : start + batch_size]
            probs = lm.candidate_probs([record_prompt(r) for r in chunk], LABELS[aspect])
            correct += sum(max(p, key=p.get) == r["output"].strip() for p, r in zip(probs, chunk))
        report[aspect] = {"accuracy": correct / len(recs), "n": len(recs)}
        total += len(recs)
        correct_all += correct
    report["overall"] = {"accuracy": correct_all / total if total else 0.0, "n": total}
    return report


def evaluate_adapter(adapter_dir: str | Path, eval_file: str | Path, *, base_model: str | None = None) -> dict:
    """Rebuild the trained critic from its adapter and evaluate it on ``eval_file``."""
    from langchain_selfrag.lm.transformers_lm import TransformersReflectionLM

    model, tokenizer, _ = load_trained(adapter_dir, base_model=base_model)
    lm = TransformersReflectionLM(model, tokenizer=tokenizer, device="cpu")
    return evaluate_critic(lm, load_records(eval_file))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.critic_sft", description=__doc__.split("\n\n")[0])
    add_sft_arguments(ap, lr=5e-4, max_length=384)
    ap.add_argument("--eval-only", action="store_true", help="skip training; evaluate output-dir/adapter")
    args = parse(ap, argv)
    try:
        cfg = config_from_args(args)
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
    except TrainingError as exc:
        ap.exit(2, f"error: {exc}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
