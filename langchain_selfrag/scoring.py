"""Self-RAG scores (paper appendix A.3) as pure functions of reflection-token probabilities.

Inputs are *probabilities* (not log-probabilities) keyed by reflection-token string; missing
tokens count as probability 0. Each function normalises within its group, so the probabilities
may come from a full-vocabulary softmax or from a softmax over the group only.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

from . import tokens as T

#: IsUse weights for [Utility:1] .. [Utility:5].
UTILITY_WEIGHTS = (-1.0, -0.5, 0.0, 0.5, 1.0)


@dataclass(frozen=True)
class Weights:
    """Weights of the critique terms in the segment score (paper defaults)."""

    rel: float = 1.0
    sup: float = 1.0
    use: float = 0.5


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else 0.0


def retrieve_probability(probs: Mapping[str, float]) -> float:
    """p([Retrieval]) / (p([Retrieval]) + p([No Retrieval]))."""
    p_yes = probs.get(T.RETRIEVAL, 0.0)
    return _ratio(p_yes, p_yes + probs.get(T.NO_RETRIEVAL, 0.0))


def should_retrieve(probs: Mapping[str, float], threshold: float = 0.2) -> bool:
    """Retrieve iff the normalised retrieve probability exceeds ``threshold`` (delta)."""
    return retrieve_probability(probs) > threshold


def isrel_score(probs: Mapping[str, float]) -> float:
    """p(Relevant) / (p(Relevant) + p(Irrelevant))."""
    p_rel = probs.get(T.RELEVANT, 0.0)
    return _ratio(p_rel, p_rel + probs.get(T.IRRELEVANT, 0.0))


def issup_score(probs: Mapping[str, float] | None) -> float:
    """p(Full)/S + 0.5 p(Partial)/S over the three IsSup tokens; 0 when none was generated."""
    if not probs:
        return 0.0
    full = probs.get(T.FULLY_SUPPORTED, 0.0)
    partial = probs.get(T.PARTIALLY_SUPPORTED, 0.0)
    total = full + partial + probs.get(T.NO_SUPPORT, 0.0)
    return _ratio(full + 0.5 * partial, total)


def isuse_score(probs: Mapping[str, float] | None) -> float:
    """sum_i w_i p(Utility:i)/S with w = (-1, -0.5, 0, 0.5, 1); 0 when none was generated."""
    if not probs:
        return 0.0
    values = [probs.get(tok, 0.0) for tok in T.UTILITY]
    total = sum(values)
    return _ratio(sum(w * p for w, p in zip(UTILITY_WEIGHTS, values)), total)


def sequence_probability(cumulative_logprob: float, n_tokens: int) -> float:
    """p(y_t | x, d, y_<t) as the per-token geometric mean probability of the segment."""
    return math.exp(cumulative_logprob / max(n_tokens, 1))


def segment_score(
    sequence_prob: float,
    isrel: float,
    issup: float,
    isuse: float,
    weights: Weights = Weights(),
) -> float:
    """f = p(y_t) + w_rel*IsRel + w_sup*IsSup + w_use*IsUse."""
    return sequence_prob + weights.rel * isrel + weights.sup * issup + weights.use * isuse


def violates_hard_constraint(issup_probs: Mapping[str, float] | None) -> bool:
    """True when the most probable IsSup token is ``[No support / Contradictory]``."""
    if not issup_probs:
        return False
    group = {tok: issup_probs.get(tok, 0.0) for tok in T.GROUPS[T.Kind.ISSUP]}
    return max(group, key=group.__getitem__) == T.NO_SUPPORT and group[T.NO_SUPPORT] > 0


def aggregate_closed_set(scored: Iterable[tuple[Hashable, float]]) -> tuple[Hashable, dict[Hashable, float]]:
    """Sum the scores of identical answers and return (argmax answer, totals).

    Ties go to the answer seen first. Raises ``ValueError`` on an empty input.
    """
    totals: dict[Hashable, float] = {}
    for answer, score in scored:
        totals[answer] = totals.get(answer, 0.0) + score
    if not totals:
        raise ValueError("aggregate_closed_set needs at least one scored answer")
    best = max(totals, key=totals.__getitem__)
    return best, totals
