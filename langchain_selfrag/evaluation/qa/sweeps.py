"""Inference-knob sweeps computed from recorded runs, and their plots.

Both sweeps replay recorded outputs instead of re-running the model:

* retrieval threshold delta (paper Figure 3c): adaptive Self-RAG retrieves iff the normalised
  p([Retrieval]) > delta, and then answers exactly as always-retrieve Self-RAG does, else as
  no-retrieval. With p from the adaptive run and the answers of the ``no_retrieval`` and
  ``selfrag_always`` runs, every delta is a lookup.
* IsSup weight: short-form Self-RAG picks the candidate (one per passage) with the highest
  segment score; the trace of a run records each candidate's seq_prob, IsRel, IsSup and IsUse,
  so the pick can be redone for any ``w_sup``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import metrics as M
from .data import Example
from .metrics import choose_option

THRESHOLDS = tuple(round(0.1 * i, 2) for i in range(11))
ISSUP_WEIGHTS = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0)


def _quality(example: Example, record: Mapping[str, Any]) -> float | None:
    """Accuracy (closed set) or match (open, answerable) of one record; None if not measurable."""
    if example.options:
        return float(record.get("option") == example.label)
    if not example.answers:
        return None
    return M.match("" if record.get("abstained") else str(record.get("answer", "")), example.answers)


def threshold_sweep(
    examples: Sequence[Example],
    retrieve_probability: Mapping[str, float],
    never: Mapping[str, Mapping[str, Any]],
    always: Mapping[str, Mapping[str, Any]],
    thresholds: Sequence[float] = THRESHOLDS,
) -> list[dict[str, float | None]]:
    """Per delta: retrieval frequency and answer quality of adaptive retrieval at that delta."""
    usable = [ex for ex in examples if ex.id in retrieve_probability and ex.id in never and ex.id in always]
    rows = []
    for delta in thresholds:
        retrieved, quality = [], []
        for ex in usable:
            chosen = always[ex.id] if retrieve_probability[ex.id] > delta else never[ex.id]
            retrieved.append(retrieve_probability[ex.id] > delta)
            q = _quality(ex, chosen)
            if q is not None:
                quality.append(q)
        rows.append(
            {"delta": float(delta), "retrieval_frequency": M.retrieval_frequency(retrieved), "quality": M.mean(quality)}
        )
    return rows


def rerank(
    trace: Sequence[Mapping[str, Any]],
    w_sup: float,
    w_rel: float = 1.0,
    w_use: float = 0.5,
    options: Mapping[str, str] | None = None,
) -> Mapping[str, Any] | None:
    """The candidate short-form Self-RAG would pick with these weights (None without candidates).

    Candidates marked ``dropped`` (hard constraints) are skipped. For closed-set questions the
    scores of candidates naming the same option are summed and the best option's top candidate
    is returned.
    """
    live = [t for t in trace if not t.get("dropped")]
    if not live:
        return None

    def score(t: Mapping[str, Any]) -> float:
        return (
            float(t.get("seq_prob") or 0.0)
            + w_rel * float(t.get("isrel") or 0.0)
            + w_sup * float(t.get("issup") or 0.0)
            + w_use * float(t.get("isuse") or 0.0)
        )

    if options:
        totals: dict[str | None, float] = {}
        for t in live:
            label = choose_option(str(t.get("text", "")), options)
            totals[label] = totals.get(label, 0.0) + score(t)
        best_label = max(totals, key=totals.__getitem__)
        live = [t for t in live if choose_option(str(t.get("text", "")), options) == best_label]
    return max(live, key=score)


def issup_sweep(
    examples: Sequence[Example],
    records: Mapping[str, Mapping[str, Any]],
    weights: Sequence[float] = ISSUP_WEIGHTS,
    w_rel: float = 1.0,
    w_use: float = 0.5,
    support_threshold: float = 0.5,
) -> list[dict[str, float | None]]:
    """Per IsSup weight: match and F1 on answerable questions (accuracy for closed sets) of the
    re-ranked pick, and the share of picks whose IsSup is at least ``support_threshold``."""
    rows = []
    for w in weights:
        matches, f1s, supported = [], [], []
        for ex in examples:
            record = records.get(ex.id)
            if record is None or not record.get("trace"):
                continue
            pick = rerank(record["trace"], w, w_rel, w_use, ex.options)
            if pick is None:
                continue
            text = str(pick.get("text", ""))
            if ex.options:
                matches.append(float(choose_option(text, ex.options) == ex.label))
            elif ex.answers:
                matches.append(M.match(text, ex.answers))
                f1s.append(M.f1(text, ex.answers))
            supported.append(float((pick.get("issup") or 0.0) >= support_threshold))
        rows.append({"w_sup": float(w), "match": M.mean(matches), "f1": M.mean(f1s), "supported": M.mean(supported)})
    return rows


def plot_threshold(rows: Sequence[Mapping[str, Any]], path: Path, metric: str, title: str = "") -> Path:
    """Figure 3c: quality and retrieval frequency against delta, and quality against frequency."""
    plt = _pyplot()
    deltas = [r["delta"] for r in rows]
    freq = [_pct(r["retrieval_frequency"]) for r in rows]
    qual = [_pct(r["quality"]) for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(deltas, qual, "o-", label=metric)
    left.plot(deltas, freq, "s--", label="retrieval frequency")
    left.set_xlabel("retrieval threshold δ")
    left.set_ylabel("%")
    left.set_ylim(-3, 103)
    left.legend()
    left.grid(alpha=0.3)
    right.plot(freq, qual, "o-")
    for label, (x, y) in _point_labels(deltas, freq, qual):
        right.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    right.set_xlabel("retrieval frequency (%)")
    right.set_ylabel(f"{metric} (%)")
    right.grid(alpha=0.3)
    fig.suptitle(title or f"Retrieval threshold: {metric} vs retrieval frequency")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_issup(rows: Sequence[Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """Answer quality and support of the pick against the IsSup weight."""
    plt = _pyplot()
    ws = [r["w_sup"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, style in (("match", "o-"), ("f1", "s-"), ("supported", "^--")):
        values = [_pct(r[key]) for r in rows]
        if any(v == v for v in values):
            ax.plot(ws, values, style, label=key)
    ax.set_xlabel("IsSup weight w_sup")
    ax.set_ylabel("%")
    ax.set_ylim(-3, 103)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(title or "IsSup weight vs answer quality")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _point_labels(deltas: Sequence[float], xs: Sequence[float], ys: Sequence[float]) -> list[tuple[str, tuple]]:
    """One label per distinct point: the delta, or the range of deltas that land on it."""
    groups: dict[tuple[float, float], list[float]] = {}
    for d, x, y in zip(deltas, xs, ys):
        groups.setdefault((round(x, 6), round(y, 6)), []).append(d)
    out = []
    for point, ds in groups.items():
        label = f"δ={ds[0]:g}" if len(ds) == 1 else f"δ={min(ds):g}–{max(ds):g}"
        out.append((label, point))
    return out


def _pct(value: float | None) -> float:
    return float("nan") if value is None else 100.0 * value


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
