"""Put the restraint recipe's measured results on the model card.

Reads ``RUN`` (``eval/report.json`` and its plot, the ReSearch JSONL files, the ``training.*``
outputs ``dpo``/``sft``/``rloo``) and writes, into the model folder, ``restraint_eval.json`` (the
``selfrag eval bio`` report plus a ``recipe`` block computed from those files) and
``restraint_tradeoff.png``. ``python -m cookbook.selfrag_smollm2.model_card`` then renders them.

    python -m cookbook.restraint_smollm2.summarize --run runs/restraint \\
        [--card langchain_selfrag/models/selfrag-smollm2-135m]
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cookbook.selfrag_smollm2.card.restraint import (
    RESTRAINT_DISTRACTORS_REPORT,
    RESTRAINT_PLOT,
    RESTRAINT_REPORT,
    RESTRAINT_TRAINED,
)
from langchain_selfrag.bundled import bundle_dir
from langchain_selfrag.evaluation.bio.report import PLOT_FILE
from langchain_selfrag.evaluation.bio.systems import best_sample, load_research

CARD = bundle_dir()


def research_summary(path: Path) -> dict[str, Any] | None:
    """Counts of a ReSearch JSONL file: questions, samples, iterations, and how often abstaining was best."""
    if not path.is_file():
        return None
    records = list(load_research(path).values())
    if not records:
        return None
    samples = [list(r.get("samples") or []) for r in records]
    return {
        "file": path.name,
        "questions": len(records),
        "method": records[0].get("method"),
        "rho": records[0].get("rho"),
        "iterations": max((int(s.get("iteration") or 0) for row in samples for s in row), default=0),  # 1..K
        "samples_per_question": round(sum(len(row) for row in samples) / len(records), 2),
        "abstention_best": sum(bool(best_sample(r).get("abstain")) for r in records),
    }


def training_summary(run_dir: Path) -> dict[str, Any] | None:
    """Steps, batch, learning rate, beta and minutes of one ``training.*`` output folder."""
    meta_path = run_dir / "adapter" / "selfrag_training.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    config = meta.get("config") or {}
    return {
        "method": meta.get("method") or run_dir.name,
        "steps": meta.get("steps"),
        "batch": (config.get("batch_size") or 0) * (config.get("grad_accum") or 1),
        "learning_rate": config.get("learning_rate"),
        "beta": config.get("beta"),
        "minutes": round(float(meta.get("seconds_total") or meta.get("seconds") or 0) / 60, 1),
        "examples": meta.get("examples"),
        "questions": meta.get("questions"),
    }


def recipe_block(run: Path, report: Mapping[str, Any]) -> dict[str, Any]:
    """What the recipe ran, computed from its files."""
    model = str((report.get("run") or {}).get("model") or "")
    return {
        "run": str(run),
        "policy_model_file": Path(model).name if model else None,
        "research": research_summary(run / "research.jsonl"),
        "research_eval": research_summary(run / "research_eval.jsonl"),
        "training": {name: s for name in RESTRAINT_TRAINED if (s := training_summary(run / name))},
    }


def summarize(run: str | Path, card: str | Path = CARD) -> Path:
    """Write ``restraint_eval.json`` (and copy the plot) into ``card``; returns the JSON's path."""
    run, card = Path(run), Path(card)
    report_path = run / "eval" / "report.json"
    if not report_path.is_file():
        raise SystemExit(f"{report_path} is missing: run cookbook/restraint_smollm2/run.sh first")
    report = json.loads(report_path.read_text())
    out = card / RESTRAINT_REPORT
    out.write_text(json.dumps({**report, "recipe": recipe_block(run, report)}, indent=1) + "\n")
    plot = run / "eval" / PLOT_FILE
    if plot.is_file():
        shutil.copyfile(plot, card / RESTRAINT_PLOT)
    distractors = run / "eval_distractors" / "report.json"
    if distractors.is_file():  # step 5 of run.sh: invented people given a real person's passages
        shutil.copyfile(distractors, card / RESTRAINT_DISTRACTORS_REPORT)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="the recipe's RUN folder")
    ap.add_argument("--card", default=str(CARD), help="the model folder (default %(default)s)")
    args = ap.parse_args(argv)
    print(summarize(args.run, args.card))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
