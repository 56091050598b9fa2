"""Command-line options shared by the training commands: the SFT options, ``--config`` defaults and
the ReSearch options of the preference and RL commands."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from langchain_selfrag.prompt_layouts import SINGLE_PROMPT_LAYOUTS

from .config import DEFAULT_TARGET_MODULES, ResearchRunConfig, SFTRunConfig


def add_sft_arguments(ap: argparse.ArgumentParser, *, lr: float, max_length: int) -> None:
    ap.add_argument("--config", help="JSON file of option defaults (keys as the long options, with _ or -)")
    ap.add_argument("--base-model", help="HF directory, hub id, or .gguf file of the base causal LM")
    ap.add_argument("--train-file", help="JSONL of {instruction, input, output} records")
    ap.add_argument("--eval-file", help="JSONL of held-out records (loss during training, accuracy after)")
    ap.add_argument("--output-dir", help="checkpoints, adapter/, loss_curve.png; a rerun of the same run (same data and "
                    "settings; steps, epochs and minutes may change) resumes here, another is refused")
    ap.add_argument("--max-length", type=int, default=max_length)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--max-steps", type=int, default=-1)
    ap.add_argument("--max-minutes", type=float, help="stop (and save) after this much wall-clock time")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--lr", type=float, default=lr)
    ap.add_argument("--token-lr", type=float, help="separate learning rate for the reflection-token rows")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--lora-alpha", type=int, default=32)
    ap.add_argument("--lora-dropout", type=float, default=0.05)
    ap.add_argument("--target-modules", default=",".join(DEFAULT_TARGET_MODULES))
    ap.add_argument("--bf16", default="auto", choices=["auto", "true", "false"], help="bf16 autocast (auto: on a GPU that has it, or a CPU that computes bf16 in hardware: "
                    "avx512_bf16 or AMX)")
    ap.add_argument("--threads", type=int, help="torch CPU threads (1 is fastest on a contended machine)")
    ap.add_argument("--save-steps", type=int, default=100)
    ap.add_argument("--logging-steps", type=int, default=10)
    ap.add_argument("--limit", type=int, help="use only the first N training records")
    ap.add_argument("--no-resume", action="store_true", help="start over even if checkpoints exist")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--init-adapter", help="start from this adapter/ of an earlier run (a second phase)")
    ap.add_argument("--train-from-layer", type=int, default=0, metavar="N",
                    help="train only the LoRA weights of decoder layers N and above (and the reflection-token rows of an "
                         "untied output head; the input rows stay as they are): the backward pass stops at layer N, "
                         "so a step costs less")
    ap.add_argument("--prompt-layout", choices=SINGLE_PROMPT_LAYOUTS,
                    help="the prompt layout to train in, recorded in the model and read by every backend: paper (the "
                         "Self-RAG paper's, as the published checkpoints) or chatml (the base's chat layout, Qwen2.5's "
                         "ChatML: the passage in the user's turn). Default: the layout --init-adapter or the base "
                         "records, else paper")
    ap.add_argument("--seed", type=int, default=0)


def config_from_args(args: argparse.Namespace) -> SFTRunConfig:
    return SFTRunConfig(
        base_model=args.base_model,
        train_file=args.train_file,
        output_dir=args.output_dir,
        eval_file=args.eval_file,
        max_length=args.max_length,
        epochs=args.epochs,
        max_steps=args.max_steps,
        max_minutes=args.max_minutes,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        learning_rate=args.lr,
        token_learning_rate=args.token_lr,
        train_from_layer=args.train_from_layer,
        lora_r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        target_modules=tuple(t for t in args.target_modules.split(",") if t),
        bf16=args.bf16,
        threads=args.threads,
        save_steps=args.save_steps,
        logging_steps=args.logging_steps,
        limit=args.limit,
        resume=not args.no_resume,
        gradient_checkpointing=args.gradient_checkpointing,
        seed=args.seed,
        init_adapter=args.init_adapter,
        prompt_layout=args.prompt_layout,
    )


def parse(ap: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse with defaults from ``--config`` (command-line options still win); check required ones."""
    first, _ = ap.parse_known_args(argv)
    if first.config:
        try:
            with open(first.config, encoding="utf-8") as fh:
                values = json.load(fh)
        except (OSError, json.JSONDecodeError) as exc:
            ap.error(f"cannot read --config {first.config}: {exc}")
        known = {a.dest for a in ap._actions}
        defaults = {k.replace("-", "_"): v for k, v in values.items()}
        unknown = sorted(set(defaults) - known)
        if unknown:
            ap.error(f"unknown keys in {first.config}: {', '.join(unknown)}")
        ap.set_defaults(**defaults)
    args = ap.parse_args(argv)
    missing = [name for name in ("base_model", "train_file", "output_dir") if not getattr(args, name)]
    if missing:
        ap.error("missing " + ", ".join("--" + m.replace("_", "-") for m in missing) + " (on the command line or in --config)")
    return args



def add_research_arguments(ap: argparse.ArgumentParser, *, lr: float, steps: int, batch: int, accum: int) -> None:
    """The SFT options (``--data`` names the ReSearch JSONL) with Table 17 defaults, plus ``--rho``."""
    ap.add_argument("--data", dest="train_file", help="ReSearch JSONL (training.research); same as --train-file")
    add_sft_arguments(ap, lr=lr, max_length=512)
    ap.set_defaults(max_steps=steps, batch_size=batch, grad_accum=accum)
    ap.add_argument("--rho", type=float,
                    help="rank samples by E[U] at this rho* (default: the utilities stored in the data)")


def research_config(args: argparse.Namespace, **knobs: Any) -> ResearchRunConfig:
    """A :class:`ResearchRunConfig` from parsed options."""
    return ResearchRunConfig(**asdict(config_from_args(args)), rho=args.rho, **knobs)
