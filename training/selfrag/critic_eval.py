"""Critic accuracy per aspect on held-out examples (the paper's Table 5 analogue): the share of
examples whose most probable allowed label is the reference label."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..core.adapters import load_trained
from ..core.config import TrainingError
from ..core.records import load_records, record_prompt
from .labels import LABELS


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
