"""Trust as the selective-QA literature measures it, as pure functions of per-question outcomes.

Each question is an :class:`Outcome`: whether it is answerable from the sources, whether the
system answered (did not abstain), whether that answer is right, and the system's own confidence
in the answer it gave or would have given. From these:

* coverage (answered / all) and selective accuracy (right / answered) (Kamath et al., ACL 2020);
* rejection rate (abstained / unanswerable) and over-refusal (abstained / answerable);
* grounded-refusal F1, ``F1_RG`` of Trust-Score (Song et al., ICLR 2025): the mean of the F1 of
  refusing (positive: abstained; gold: unanswerable) and the F1 of answering (positive: answered;
  gold: answerable);
* the risk-coverage curve from the confidence (answer the most confident questions first; an
  answered unanswerable question is an error) and the area under it, AURC (lower is better);
* percentile-bootstrap intervals over questions for each figure.

A figure that cannot be measured (no answered question, no unanswerable one) is None, never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .bootstrap import percentile_interval, resample_indices


@dataclass(frozen=True)
class Outcome:
    """One question's outcome. ``right`` is about the answer given (or the one the system would have
    given when it abstained); ``confidence`` ranks answers for the risk-coverage curve (None: lowest)."""

    answerable: bool
    answered: bool
    right: bool
    confidence: float | None = None


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _f1(tp: int, fp: int, fn: int) -> float | None:
    if tp + fp + fn == 0:
        return None
    return 2 * tp / (2 * tp + fp + fn)


def coverage(items: Sequence[Outcome]) -> float | None:
    return _ratio(sum(o.answered for o in items), len(items))


def selective_accuracy(items: Sequence[Outcome]) -> float | None:
    """Right answers among answered questions (an answered unanswerable question is never right)."""
    answered = [o for o in items if o.answered]
    return _ratio(sum(o.right and o.answerable for o in answered), len(answered))


def rejection_rate(items: Sequence[Outcome]) -> float | None:
    unanswerable = [o for o in items if not o.answerable]
    return _ratio(sum(not o.answered for o in unanswerable), len(unanswerable))


def over_refusal(items: Sequence[Outcome]) -> float | None:
    answerable = [o for o in items if o.answerable]
    return _ratio(sum(not o.answered for o in answerable), len(answerable))


def grounded_refusal_f1(items: Sequence[Outcome]) -> float | None:
    """Trust-Score's F1_RG: mean of the refusal F1 and the answer F1 (None when either is undefined)."""
    ref_tp = sum(not o.answered and not o.answerable for o in items)
    ref_fp = sum(not o.answered and o.answerable for o in items)
    ref_fn = sum(o.answered and not o.answerable for o in items)
    ans_tp = sum(o.answered and o.answerable for o in items)
    ans_fp = ref_fn
    ans_fn = ref_fp
    refusal, answer = _f1(ref_tp, ref_fp, ref_fn), _f1(ans_tp, ans_fp, ans_fn)
    if refusal is None or answer is None:
        return None
    return (refusal + answer) / 2


def risk_coverage_curve(items: Sequence[Outcome]) -> tuple[np.ndarray, np.ndarray]:
    """``(coverage, risk)`` answering the ``i`` most confident questions, ``i = 1..n``.

    Ties in confidence are broken towards the wrong answers (a pessimistic curve), so an
    uninformative confidence cannot look better than chance.
    """
    good, conf = ranking_arrays(items)
    return risk_coverage_arrays(good, conf)


def ranking_arrays(items: Sequence[Outcome]) -> tuple[np.ndarray, np.ndarray]:
    """``(good, confidence)`` per question: 1.0 for a right answer to an answerable question, and the
    confidence with None as ``-inf`` (what the risk-coverage curve ranks)."""
    good = np.array([o.right and o.answerable for o in items], dtype=float)
    conf = np.array([-np.inf if o.confidence is None else float(o.confidence) for o in items])
    return good, conf


def risk_coverage_arrays(good: np.ndarray, conf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`risk_coverage_curve` on :func:`ranking_arrays` (for resampling without rebuilding outcomes)."""
    if not good.size:
        return np.zeros(0), np.zeros(0)
    order = np.lexsort((good, -conf))  # confidence descending, wrong answers first within a tie
    errors = np.cumsum(1.0 - good[order])
    answered = np.arange(1, good.size + 1)
    return answered / good.size, errors / answered


def aurc(items: Sequence[Outcome]) -> float | None:
    """Area under the risk-coverage curve (mean risk over the ``n`` coverage levels)."""
    _, risk = risk_coverage_curve(items)
    return float(risk.mean()) if risk.size else None


def optimal_aurc(items: Sequence[Outcome]) -> float | None:
    """AURC of a perfect ranking (every right answer before every wrong one): the floor a confidence
    can reach on these outcomes, since unanswerable and wrong answers must come somewhere."""
    return aurc([Outcome(o.answerable, o.answered, o.right, float(o.right and o.answerable)) for o in items])


def selective_accuracy_at(items: Sequence[Outcome], target_coverage: float) -> float | None:
    """Selective accuracy when answering the most confident ``target_coverage`` share of questions."""
    cov, risk = risk_coverage_curve(items)
    if not cov.size:
        return None
    i = int(np.searchsorted(cov, target_coverage - 1e-12))
    return float(1.0 - risk[min(i, cov.size - 1)])


FIGURES: dict[str, Callable[[Sequence[Outcome]], float | None]] = {
    "coverage": coverage,
    "selective_accuracy": selective_accuracy,
    "rejection_rate": rejection_rate,
    "over_refusal": over_refusal,
    "f1_rg": grounded_refusal_f1,
    "aurc": aurc,
}


def trust_report(items: Sequence[Outcome], *, n_resamples: int = 1000, seed: int = 0,
                 level: float = 0.95) -> dict[str, Any]:
    """Every figure of :data:`FIGURES` with a bootstrap interval over questions (``ci95``)."""
    out: dict[str, Any] = {"n": len(items), "answerable": sum(o.answerable for o in items)}
    idx = resample_indices(len(items), n_resamples, seed) if items and n_resamples else None
    for name, fn in FIGURES.items():
        value = fn(items)
        ci = None
        if value is not None and idx is not None:
            draws = [fn([items[i] for i in row]) for row in idx]
            draws = np.array([d for d in draws if d is not None], dtype=float)
            ci = list(percentile_interval(draws, level)) if draws.size else None
        out[name] = {"value": value, "ci95": ci}
    out["aurc_optimal"] = optimal_aurc(items)
    cov, risk = risk_coverage_curve(items)
    step = max(1, len(cov) // 100)
    keep = sorted(set(range(0, len(cov), step)) | ({len(cov) - 1} if len(cov) else set()))
    out["risk_coverage"] = {"coverage": [round(float(cov[i]), 4) for i in keep],
                            "risk": [round(float(risk[i]), 4) for i in keep]}
    answered = [o for o in items if o.answered]
    out["operating_point"] = ({"coverage": len(answered) / len(items),
                               "risk": sum(not (o.right and o.answerable) for o in answered) / len(answered)}
                              if answered else None)
    return out


def plot_risk_coverage(reports: Mapping[str, Mapping[str, Any]], path: str | Path, title: str = "") -> Path:
    """One risk-coverage curve per report of :func:`trust_report` (name -> report), each with its
    operating point (the coverage and risk of the run's own abstentions) as a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for name, rep in reports.items():
        curve = rep.get("risk_coverage") or {}
        if not curve.get("coverage"):
            continue
        line, = ax.plot(curve["coverage"], curve["risk"], label=f"{name} (n={rep.get('n')})")
        point = rep.get("operating_point")
        if point:
            ax.plot([point["coverage"]], [point["risk"]], "o", color=line.get_color())
    ax.set_xlabel("coverage (share of questions answered, most confident first)")
    ax.set_ylabel("risk (share of answered questions wrong)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title or "risk-coverage (dot: where the chain's abstentions put it)", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
