"""Evaluation metrics for the recipes: ROC AUC (scikit-learn) with a grouped bootstrap interval."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.metrics import roc_auc_score


def _binary(labels: Sequence[bool | int]) -> np.ndarray:
    return np.asarray([bool(y) for y in labels], dtype=bool)


def roc_auc(scores: Sequence[float], labels: Sequence[bool | int]) -> float:
    """Area under the ROC curve (ties count one half, as with average ranks).

    Raises ValueError when one class is missing, where the AUC is undefined.
    """
    if len(scores) != len(labels):
        raise ValueError("scores and labels differ in length")
    y = _binary(labels)
    if y.all() or not y.any():
        raise ValueError("ROC AUC needs both positive and negative examples")
    return float(roc_auc_score(y, np.asarray(scores, dtype=float)))


def bootstrap_auc_interval(
    scores: Sequence[float],
    labels: Sequence[bool | int],
    groups: Sequence[object] | None = None,
    *,
    level: float = 0.95,
    rounds: int = 1000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`roc_auc`.

    Resamples whole ``groups`` (for example every passage scored for one question) when given,
    else single items; resamples with only one class are skipped.
    """
    if len(scores) != len(labels) or (groups is not None and len(groups) != len(labels)):
        raise ValueError("scores, labels and groups differ in length")
    y, s = _binary(labels), np.asarray(scores, dtype=float)
    keys = list(groups) if groups is not None else list(range(len(labels)))
    members: dict[object, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    clusters = [np.asarray(m) for m in members.values()]
    # Own loop: scipy.stats.bootstrap cannot skip resamples whose AUC is undefined (NaN makes its interval NaN).
    aucs = []
    for picks in np.random.default_rng(seed).integers(len(clusters), size=(rounds, len(clusters))):
        idx = np.concatenate([clusters[j] for j in picks])
        if y[idx].any() and not y[idx].all():
            aucs.append(roc_auc_score(y[idx], s[idx]))
    if not aucs:
        raise ValueError("no bootstrap resample had both classes")
    tail = (1 - level) / 2
    low, high = np.quantile(aucs, [tail, 1 - tail])
    return float(low), float(high)


def accuracy(predicted: Sequence[object], gold: Sequence[object]) -> float:
    """Share of equal pairs (0.0 for empty input)."""
    if len(predicted) != len(gold):
        raise ValueError("predicted and gold differ in length")
    return sum(p == g for p, g in zip(predicted, gold)) / len(gold) if gold else 0.0
