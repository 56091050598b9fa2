"""How well a model trained on the IsRel question (``training.judge_sft``) tells held-out pairs apart, beside
its untrained base: the AUC of its IsRel (``P(Yes) / (P(Yes) + P(No))`` at the IsRel question of
:class:`~langchain_selfrag.questions.ReflectionQuestions`) over all pairs and on each contrast the pairs hold (SQuAD 2.0's unanswerable
questions, documentation near misses), with the run that trained it::

    python -m cookbook.data.squad_judge_pairs --data ../shared/data \\
        --articles Packet_switching,1973_oil_crisis,Immune_system --out runs/judge/eval_pairs.jsonl
    python -m benchmarks.judge_heldout --adapter runs/judge/l0/adapter --eval-file runs/judge/eval_pairs.jsonl \\
        --json benchmarks/results/judge_heldout_q05_l0.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout (the command its results file records)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: what the results file keeps of the training run's metadata (``selfrag_training.json``)
RUN_KEYS = ("steps", "train_loss", "seconds_total", "examples", "tokens_seen_approx", "bf16")
CONFIG_KEYS = ("pairs", "train_from_layer", "lora_r", "learning_rate", "batch_size", "epochs", "limit")


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.record import Run

    run = Run("judge_heldout")
    ap = argparse.ArgumentParser(prog="python -m benchmarks.judge_heldout", description=__doc__.split("::")[0])
    ap.add_argument("--adapter", required=True, help="a training.judge_sft run's adapter/ folder")
    ap.add_argument("--eval-file", required=True, help="held-out pairs, or a Self-RAG training file of held-out rows")
    ap.add_argument("--threads", type=int, help="torch CPU threads")
    ap.add_argument("--json", help="write the results file here")
    args = ap.parse_args(argv)

    from training.core.config import META_FILE, TrainingError
    from training.core.run_identity import file_sha256
    from training.judge_sft import evaluate

    meta_path = Path(args.adapter) / META_FILE
    if not meta_path.is_file():
        ap.exit(2, f"error: {args.adapter} is not a training.judge_sft adapter (no {META_FILE})\n")
    meta = json.loads(meta_path.read_text())
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        report = evaluate(meta["base_model"], Path(args.adapter), args.eval_file)
    except TrainingError as exc:
        ap.exit(2, f"error: {exc}\n")
    config = meta["config"]
    figures = {"heldout": report, "training": {k: meta.get(k) for k in RUN_KEYS} | {k: config.get(k) for k in CONFIG_KEYS}}
    print(json.dumps(figures, indent=1))
    if args.json:
        run.write(args.json, {"adapter": args.adapter, "eval_file": args.eval_file,
                              "eval_file_sha256": file_sha256(args.eval_file), "base_model": meta["base_model"]}, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
