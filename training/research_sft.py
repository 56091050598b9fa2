"""SFT on the best ReSearch sample of each question (seed 004), through ``training.sft.train_sft``.

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
from pathlib import Path

from .cli_common import config_from_args, parse
from .dpo import add_research_arguments
from .qa_data import write_jsonl
from .research_pairs import ResearchDataError, read_research, selection_rule, sft_records
from .sft import SFTResult, SFTRunConfig, TrainingError, train_sft


def write_sft_data(research_file: str, out_file: Path, rho: float | None, limit: int | None = None) -> int:
    """Best-sample SFT records of a ReSearch file, as JSONL; returns how many."""
    return write_jsonl(out_file, sft_records(read_research(research_file, limit), rho))


def train_research_sft(cfg: SFTRunConfig, rho: float | None = None, *, callbacks=()) -> SFTResult:
    """Convert ``cfg.train_file`` (and ``cfg.eval_file``) from ReSearch data, then ``train_sft``."""
    out = Path(cfg.output_dir)
    research, research_eval = cfg.train_file, cfg.eval_file
    cfg.train_file = str(out / "research_sft_train.jsonl")
    n = write_sft_data(research, Path(cfg.train_file), rho, cfg.limit)
    rule = selection_rule(read_research(research, cfg.limit))
    if research_eval:
        cfg.eval_file = str(out / "research_sft_eval.jsonl")
        write_sft_data(research_eval, Path(cfg.eval_file), rho)
    cfg.extra = dict(cfg.extra) | {"method": "research_sft", "research_data": str(research), "questions": n,
                                   "rho": rho, "selection": rule}
    return train_sft(cfg, callbacks=callbacks)


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
    except (TrainingError, ResearchDataError) as exc:
        ap.exit(2, f"error: {exc}\n")
    print(json.dumps({"adapter": str(result.adapter_dir), "steps": result.steps, "train_loss": result.train_loss,
                      "seconds": round(result.seconds, 1), "dropped_too_long": result.dropped}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
