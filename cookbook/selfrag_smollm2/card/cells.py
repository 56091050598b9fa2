"""Table cells and short phrases of the card: numbers, shares, intervals, training steps and times."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def fmt(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def share_cell(count, share) -> str:
    return "n/a" if share is None else f"{count} ({share:.1%})"


def ci_cell(result: Mapping[str, Any]) -> str:
    """`` (95% CI a–b)`` from a bootstrap interval stored as ``auc_ci95``, else nothing."""
    ci = result.get("auc_ci95")
    return f" (95% CI {ci[0]:.3f}–{ci[1]:.3f})" if ci else ""


def paired_cell(diff: Mapping[str, Any] | None) -> str:
    """``; Self-RAG − this +0.033 (95% CI …), better on a, worse on b`` from a paired difference, else nothing."""
    if not diff or diff.get("value") is None:
        return ""
    ci = diff.get("ci95")
    interval = f" (95% CI {ci[0]:+.3f} to {ci[1]:+.3f})" if ci else ""
    return f"; Self-RAG − this {diff['value']:+.3f}{interval}, better on {diff['better']}, worse on {diff['worse']}"


def steps_cell(meta: dict) -> str:
    if not meta.get("steps"):
        return "n/a"
    cfg = meta.get("config", {})
    return f"{meta['steps']} × {int(cfg.get('batch_size', 1)) * int(cfg.get('grad_accum', 1))}"


def lr_cell(meta: dict) -> str:
    cfg = meta.get("config", {})
    return f"{cfg.get('learning_rate', 'n/a')} / {cfg.get('token_learning_rate', 'n/a')}" if cfg else "n/a"


def minutes_cell(seconds) -> str:
    return "n/a" if seconds is None else f"{seconds / 60:.1f} min"


def seen_cell(meta: dict) -> str:
    cfg = meta.get("config", {})
    if not meta.get("steps"):
        return "n/a"
    return str(int(meta["steps"]) * int(cfg.get("batch_size", 1)) * int(cfg.get("grad_accum", 1)))
