"""The utility of an answer with abstention ("LLMs can learn self-restraint through iterative self-reflection", Eq.
1-4), as pure functions.

Each atomic claim scores +1 when true and ``-lambda`` when false, with ``lambda = rho / (1 - rho)``
for a target accuracy ``rho`` (rho*); abstaining (no claims) scores 0. An answer whose claims are
true with probability exactly ``rho`` has expected utility 0, so a claim is worth saying iff its
probability exceeds ``rho``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

#: A claim as the restraint code reports it: ``{"text": str, "p": float, "kept": bool}``.
ClaimRecord = dict[str, Any]


def check_rho(rho: float) -> float:
    """``rho`` as a float; ValueError unless it is a number with ``0 <= rho < 1``."""
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or math.isnan(rho):
        raise ValueError(f"rho must be a number in [0, 1), not {rho!r}")
    if not 0.0 <= rho < 1.0:
        raise ValueError(f"rho must lie in [0, 1), not {rho!r}")
    return float(rho)


def check_probability(p: float) -> float:
    """``p`` as a float; ValueError unless ``0 <= p <= 1``."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"a claim probability must lie in [0, 1], not {p!r}")
    return float(p)


def lam(rho: float) -> float:
    """lambda(rho) = rho / (1 - rho): the cost of a false claim at target accuracy ``rho`` (Eq. 2)."""
    rho = check_rho(rho)
    return rho / (1.0 - rho)


def utility(labels: Sequence[bool], rho: float) -> float:
    """U(x, y, lambda) (Eq. 1): +1 per true claim, -lambda per false one; [] (abstention) -> 0.0."""
    cost = lam(rho)
    return float(sum(1.0 if bool(t) else -cost for t in labels))


def expected_utility(probs: Sequence[float], rho: float) -> float:
    """E[U] (Eq. 4): sum over claims of p - lambda (1 - p); [] (abstention) -> 0.0."""
    cost = lam(rho)
    return float(sum(p - cost * (1.0 - p) for p in map(check_probability, probs)))


def keep_claims(probs: Sequence[float], rho: float) -> list[bool]:
    """Which claims are worth saying: p > rho (exactly those with a positive expected utility)."""
    rho = check_rho(rho)
    return [check_probability(p) > rho for p in probs]


def claim_records(claims: Sequence[str], probs: Sequence[float], rho: float) -> list[ClaimRecord]:
    """``[{"text", "p", "kept"}]`` for claims and their probabilities."""
    if len(claims) != len(probs):
        raise ValueError(f"{len(claims)} claims but {len(probs)} probabilities")
    kept = keep_claims(probs, rho)
    return [{"text": c, "p": float(p), "kept": k} for c, p, k in zip(claims, probs, kept)]


def kept_expected_utility(records: Sequence[ClaimRecord], rho: float) -> float:
    """E[U] of the answer that keeps only the kept claims (0.0 when none is kept)."""
    return expected_utility([r["p"] for r in records if r["kept"]], rho)
