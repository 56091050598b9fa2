"""Small, dependency-free evaluation metrics."""

from __future__ import annotations

from collections.abc import Sequence


def roc_auc(scores: Sequence[float], labels: Sequence[bool | int]) -> float:
    """Area under the ROC curve (Mann-Whitney U with average ranks for ties).

    Raises ValueError when one class is missing, where the AUC is undefined.
    """
    if len(scores) != len(labels):
        raise ValueError("scores and labels differ in length")
    pos = sum(1 for y in labels if y)
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        raise ValueError("ROC AUC needs both positive and negative examples")
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        avg = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = avg
        i = j + 1
    rank_sum = sum(r for r, y in zip(ranks, labels) if y)
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


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
    import random

    if len(scores) != len(labels) or (groups is not None and len(groups) != len(labels)):
        raise ValueError("scores, labels and groups differ in length")
    keys = list(groups) if groups is not None else list(range(len(labels)))
    members: dict[object, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    clusters = list(members.values())
    rng = random.Random(seed)
    aucs = []
    for _ in range(rounds):
        picked = [i for _ in clusters for i in rng.choice(clusters)]
        ys = [labels[i] for i in picked]
        if 0 < sum(1 for y in ys if y) < len(ys):
            aucs.append(roc_auc([scores[i] for i in picked], ys))
    if not aucs:
        raise ValueError("no bootstrap resample had both classes")
    aucs.sort()
    tail = (1 - level) / 2
    return aucs[int(tail * (len(aucs) - 1))], aucs[int(round((1 - tail) * (len(aucs) - 1)))]


def accuracy(predicted: Sequence[object], gold: Sequence[object]) -> float:
    """Share of equal pairs (0.0 for empty input)."""
    if len(predicted) != len(gold):
        raise ValueError("predicted and gold differ in length")
    return sum(p == g for p, g in zip(predicted, gold)) / len(gold) if gold else 0.0
