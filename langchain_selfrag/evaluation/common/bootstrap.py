"""Percentile bootstrap over questions, and paired differences of two systems on the same questions.

Pure functions over per-question values; resampling uses ``numpy.random.default_rng(seed)`` so a
report is reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def resample_indices(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """Question indices of ``n_resamples`` bootstrap resamples of ``n`` questions (with replacement)."""
    return np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))


def percentile_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    """The central ``level`` interval of ``values`` (e.g. 2.5th and 97.5th percentiles for 0.95)."""
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(values, [tail, 100.0 - tail])
    return float(lo), float(hi)


def paired_difference(baseline: Sequence[float], system: Sequence[float], *, n_resamples: int = 1000,
                      seed: int = 0, level: float = 0.95) -> dict[str, float | int | list[float] | None]:
    """Mean of ``system[i] - baseline[i]`` over the same questions, in order, with a percentile
    bootstrap interval over questions (None with ``n_resamples=0``), and how many questions went
    up or down."""
    if len(baseline) != len(system):
        raise ValueError(f"paired questions differ in number: {len(baseline)} vs {len(system)}")
    diffs = np.asarray(system, dtype=float) - np.asarray(baseline, dtype=float)
    if not diffs.size:
        return {"n": 0, "value": None, "ci95": None, "better": 0, "worse": 0}
    ci = None
    if n_resamples:
        ci = list(percentile_interval(diffs[resample_indices(diffs.size, n_resamples, seed)].mean(axis=1), level))
    return {"n": int(diffs.size), "value": float(diffs.mean()), "ci95": ci,
            "better": int((diffs > 0).sum()), "worse": int((diffs < 0).sum())}
