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


def accuracy(predicted: Sequence[object], gold: Sequence[object]) -> float:
    """Share of equal pairs (0.0 for empty input)."""
    if len(predicted) != len(gold):
        raise ValueError("predicted and gold differ in length")
    return sum(p == g for p, g in zip(predicted, gold)) / len(gold) if gold else 0.0
