"""Metrics of the biography task ("LLMs can learn self-restraint through iterative self-reflection", section 4)
as pure functions, with bootstrap intervals.

One :class:`Judged` per question: did the system abstain, and the judge's label of each claim of
its answer (True, False, or None when the judge could not tell). Unjudged claims are left out of
accuracy and utility and counted in ``unjudged``.

* ``accuracy``: #true / (#true + #false) over the answered questions (None when nothing was judged);
* ``claims_per_answer``: mean number of claims of an answered question;
* ``true`` / ``false`` / ``unjudged``: totals over the questions;
* ``abstention_rate``: share of questions abstained on;
* ``utility@rho``: mean over the questions of U (``restraint.utility.utility``: +1 per true claim,
  -rho/(1-rho) per false one), an abstention scoring 0.

:func:`summarize` computes every metric of a set of questions; :func:`bootstrap_intervals`
resamples the questions with replacement (``numpy.random.default_rng(seed)``) and takes the
percentile interval of each metric.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...restraint.utility import lam, utility
from ..common import bootstrap

#: Target accuracies the utility is always reported at.
UTILITY_RHOS: tuple[float, ...] = (0.2, 0.5, 0.8)
#: Metrics of :func:`summarize`, in report order (utility keys follow).
BASE_METRICS = ("n", "answered", "accuracy", "claims_per_answer", "true", "false", "unjudged", "abstention_rate")


@dataclass(frozen=True)
class Judged:
    """One question's outcome: abstained, and one label per claim of the answer."""

    abstained: bool
    labels: tuple[bool | None, ...] = ()

    @property
    def n_true(self) -> int:
        return 0 if self.abstained else sum(label is True for label in self.labels)

    @property
    def n_false(self) -> int:
        return 0 if self.abstained else sum(label is False for label in self.labels)

    @property
    def n_unjudged(self) -> int:
        return 0 if self.abstained else sum(label is None for label in self.labels)

    @property
    def n_claims(self) -> int:
        return 0 if self.abstained else len(self.labels)


def utility_key(rho: float) -> str:
    """The report key of U at ``rho``: ``utility@0.5``."""
    return f"utility@{rho:g}"


def question_utility(item: Judged, rho: float) -> float:
    """U of one question at ``rho``: 0 for an abstention, else over its judged claims."""
    if item.abstained:
        return 0.0
    return utility([label for label in item.labels if label is not None], rho)


def _columns(items: Sequence[Judged], rhos: Sequence[float]) -> dict[str, np.ndarray]:
    """Per-question numbers the metrics are sums and ratios of."""
    cols = {
        "answered": np.array([not i.abstained for i in items], dtype=float),
        "true": np.array([i.n_true for i in items], dtype=float),
        "false": np.array([i.n_false for i in items], dtype=float),
        "unjudged": np.array([i.n_unjudged for i in items], dtype=float),
        "claims": np.array([i.n_claims for i in items], dtype=float),
    }
    cost = {rho: lam(rho) for rho in rhos}  # validates every rho once
    for rho in rhos:
        cols[utility_key(rho)] = cols["true"] - cost[rho] * cols["false"]
    return cols


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _metrics(cols: dict[str, np.ndarray], idx: np.ndarray, rhos: Sequence[float]) -> dict[str, np.ndarray]:
    """Every metric for each row of question indices ``idx`` (shape: resamples x questions)."""
    n = idx.shape[1]
    sums = {key: col[idx].sum(axis=1) for key, col in cols.items()}
    out = {
        "n": np.full(idx.shape[0], float(n)),
        "answered": sums["answered"],
        "accuracy": _ratio(sums["true"], sums["true"] + sums["false"]),
        "claims_per_answer": _ratio(sums["claims"], sums["answered"]),
        "true": sums["true"],
        "false": sums["false"],
        "unjudged": sums["unjudged"],
        "abstention_rate": (n - sums["answered"]) / n,
    }
    for rho in rhos:
        out[utility_key(rho)] = sums[utility_key(rho)] / n
    return out


def _value(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def summarize(items: Sequence[Judged], rhos: Sequence[float] = UTILITY_RHOS) -> dict[str, float | None]:
    """Every metric of ``items`` (None where it cannot be measured: no questions, no judged claims)."""
    keys = list(BASE_METRICS) + [utility_key(r) for r in rhos]
    if not items:
        return {key: (0.0 if key == "n" else None) for key in keys}
    cols = _columns(items, rhos)
    values = _metrics(cols, np.arange(len(items))[None, :], rhos)
    return {key: _value(float(values[key][0])) for key in keys}


def bootstrap_intervals(items: Sequence[Judged], rhos: Sequence[float] = UTILITY_RHOS, *, n_resamples: int = 1000,
                        seed: int = 0, level: float = 0.95) -> dict[str, tuple[float, float] | None]:
    """Percentile bootstrap intervals of every metric, resampling questions with replacement.

    Resamples where a ratio is undefined (no judged claim, nothing answered) are left out of that
    metric; a metric defined in no resample gets None. ``n`` has no interval (None).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), not {level!r}")
    if n_resamples < 1:
        raise ValueError("n_resamples must be at least 1")
    keys = list(BASE_METRICS) + [utility_key(r) for r in rhos]
    out: dict[str, tuple[float, float] | None] = {key: None for key in keys}
    if not items:
        return out
    cols = _columns(items, rhos)
    values = _metrics(cols, bootstrap.resample_indices(len(items), n_resamples, seed), rhos)
    for key in keys:
        if key == "n":
            continue
        finite = values[key][~np.isnan(values[key])]
        if finite.size:
            out[key] = bootstrap.percentile_interval(finite, level)
    return out


def paired_difference(baseline: Sequence[Judged], system: Sequence[Judged], rho: float, *, n_resamples: int = 1000,
                      seed: int = 0, level: float = 0.95) -> dict[str, float | int | list[float] | None]:
    """Mean per-question U(system) - U(baseline) at ``rho`` over the same questions (paired, in order),
    with a percentile bootstrap interval over questions, and how many questions went up or down."""
    return bootstrap.paired_difference([question_utility(a, rho) for a in baseline],
                                       [question_utility(b, rho) for b in system],
                                       n_resamples=n_resamples, seed=seed, level=level)


def metric_table(items: Sequence[Judged], rhos: Sequence[float] = UTILITY_RHOS, *, n_resamples: int = 1000,
                 seed: int = 0) -> dict[str, dict[str, float | list[float] | None]]:
    """``{metric: {"value": v, "ci95": [lo, hi] | None}}`` for ``items``."""
    values = summarize(items, rhos)
    intervals = bootstrap_intervals(items, rhos, n_resamples=n_resamples, seed=seed) if n_resamples else {}
    return {key: {"value": value, "ci95": list(intervals[key]) if intervals.get(key) else None}
            for key, value in values.items()}
