"""The comparable figures of an ``eval.json`` and the acceptance bars judged on them."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cells import fmt

#: ``figures()["evaluation"]`` of a report measured through SelfRAGChain.
CHAIN = "SelfRAGChain"
#: ``figures()["evaluation"]`` of a report of the separate Self-RAG loop used before the chain evaluation.
LEGACY = "separate loop (pre-chain)"


def figures(ev: Mapping[str, Any]) -> dict[str, Any]:
    """The comparable figures of an ``eval.json`` (the chain report, or the separate loop's before it).

    Chain-only figures are None for a separate-loop report; its IsRel / IsSup / retrieve figures were
    forced-prompt measurements and appear as the ``probe_*`` figures.
    """
    chain = ev.get("chain")
    m = ev.get("match") or {}
    model = ev.get("model")
    model_file = model.get("file") if isinstance(model, Mapping) else (Path(model).name if model else None)
    common = {"n_match": m.get("n"), "match_subset": m.get("selfrag"), "no_retrieval_match": m.get("no_retrieval"),
              "base_top1_match": m.get("base_with_top1_passage"), "base_closed_book_match": m.get("base_closed_book"),
              "seconds": ev.get("seconds"), "model_file": model_file, "retrieval": ev.get("retrieval", "bm25")}
    if chain is None:
        return {"evaluation": LEGACY, "n": m.get("n"), "match": m.get("selfrag"), "abstained_or_empty": None,
                "abstained_or_empty_share": None, "isrel_auc": None, "isrel_auc_ci95": None, "issup_agreement": None,
                "issup_n": None, "top1_match": None, **common,
                "probe_retrieve_auc": (ev.get("retrieve") or {}).get("auc"),
                "probe_isrel_auc": (ev.get("isrel") or {}).get("auc"),
                "probe_issup_agreement": (ev.get("issup") or {}).get("agreement")}
    probes = ev.get("probes") or {}
    return {"evaluation": CHAIN, "n": chain.get("n"), "match": chain.get("match"),
            "abstained_or_empty": chain.get("abstained_or_empty"),
            "abstained_or_empty_share": chain.get("abstained_or_empty_share"),
            "isrel_auc": (chain.get("isrel") or {}).get("auc"), "isrel_auc_ci95": (chain.get("isrel") or {}).get("auc_ci95"),
            "issup_agreement": (chain.get("issup") or {}).get("agreement"), "issup_n": (chain.get("issup") or {}).get("n"),
            "top1_match": m.get("selfrag_top1"), **common,
            "probe_retrieve_auc": (probes.get("retrieve") or {}).get("auc"),
            "probe_isrel_auc": (probes.get("isrel_forced_gold") or {}).get("auc"),
            "probe_issup_agreement": (probes.get("issup_forced") or {}).get("agreement")}


@dataclass(frozen=True)
class Bar:
    """An acceptance bar: ``figures[key] op target`` (plus ``figures[reference]`` when given)."""

    label: str
    key: str
    op: str
    target: float
    reference: str | None = None
    percent: bool = False

    def threshold(self, fig: Mapping[str, Any]) -> float | None:
        if self.reference is None:
            return self.target
        ref = fig.get(self.reference)
        return None if ref is None else ref + self.target

    def describe(self, fig: Mapping[str, Any]) -> str:
        sign = "≥" if self.op == ">=" else "≤"
        if self.reference is None:
            return f"{sign} {self.target:.0%}" if self.percent else f"{sign} {self.target:.2f}"
        ref = fig.get(self.reference)
        return f"{sign} {fmt(ref, 2)} + {self.target:.2f}" if ref is not None else f"{sign} {self.reference} + {self.target:.2f}"


#: The acceptance bars of the bundled model (issue 9), all on chain figures.
ACCEPTANCE: tuple[Bar, ...] = (
    Bar("abstained or empty answers on answerable questions", "abstained_or_empty_share", "<=", 0.03, percent=True),
    Bar("Self-RAG answer match", "match", ">=", 0.55),
    Bar("Self-RAG match vs plain RAG top-1 (untrained SmolLM2, top passage)", "match_subset", ">=", 0.05, "base_top1_match"),
    Bar("Self-RAG match vs plain RAG top-1 (this model, chain mode always, k=1)", "match_subset", ">=", 0.05, "top1_match"),
    Bar("IsRel ROC AUC (chain trace)", "isrel_auc", ">=", 0.90),
    Bar("IsSup argmax agreement (chain trace)", "issup_agreement", ">=", 0.75),
)
OPS = {">=": operator.ge, "<=": operator.le}


def acceptance(ev: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each bar with the measured value and ``met`` True / False, or None when not measured through the chain."""
    fig = figures(ev)
    rows = []
    for bar in ACCEPTANCE:
        value = fig.get(bar.key) if fig["evaluation"] == CHAIN else None
        limit = bar.threshold(fig)
        met = None if value is None or limit is None else bool(OPS[bar.op](value, limit))
        shown = "n/a" if value is None else (f"{value:.1%}" if bar.percent else f"{value:.3f}")
        status = "not measured" if met is None else ("met" if met else "**missed**")
        rows.append({"label": bar.label, "key": bar.key, "value": value, "shown": shown, "bar": bar.describe(fig),
                     "met": met, "status": status})
    return rows
