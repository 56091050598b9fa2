"""How a ReSearch record's samples are ranked
("LLMs can learn self-restraint through iterative self-reflection", section 4), as pure functions.

* ``"research"`` (ReSearch): by expected utility E[U] (Eq. 4); the abstention is worth 0. Ties: fewer
  claims first (so the abstention wins a tie with an answer worth 0), then sample order.
* ``"search"`` (the paper's search baseline): by average accuracy, the mean probability of the
  sample's claims, and it "prefers to decline to answer if the answer expected accuracy is less
  than 50%": the abstention (and any sample without claims) ranks as an accuracy of
  :data:`SEARCH_DECLINE_BELOW`, below every answer at or above it. Ties: answers before declining,
  then sample order.

A sample is a mapping with ``claims`` (``[{"text", "p", ...}]``), ``expected_utility`` and
optionally ``abstain``, as :mod:`training.restraint.algorithm` writes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import Any, Literal

from .utility import expected_utility

Method = Literal["research", "search"]
#: The search baseline declines when the best answer's expected accuracy is below this.
SEARCH_DECLINE_BELOW = 0.5

#: The ranking rule of each method, as the training metadata records it.
RULES = {
    "research": "max E[U]; ties: fewer claims (abstention first), then sample order",
    "search": f"max average claim probability; declines (abstention) below {SEARCH_DECLINE_BELOW}; "
              "ties: answers before declining, then sample order",
}


def check_method(method: Any) -> Method:
    """``method`` when it is ``"research"`` or ``"search"``; ValueError otherwise."""
    if method not in RULES:
        raise ValueError(f"method must be 'research' or 'search', not {method!r}")
    return method


def claim_probs(sample: Mapping[str, Any]) -> list[float]:
    """Probability of each claim of a sample."""
    return [float(c["p"]) for c in sample.get("claims") or ()]


def sample_utility(sample: Mapping[str, Any], rho: float | None = None) -> float:
    """E[U] of a sample: the stored value, or recomputed from its claims at another ``rho``."""
    if rho is None:
        return float(sample["expected_utility"])
    return float(expected_utility(claim_probs(sample), rho))


def sample_accuracy(sample: Mapping[str, Any]) -> float | None:
    """The sample's expected accuracy (mean claim probability); None for an abstention or no claims."""
    probs = claim_probs(sample)
    return None if sample.get("abstain") or not probs else fmean(probs)


def declines(sample: Mapping[str, Any]) -> bool:
    """True for a sample that says nothing (the abstention, or no claims)."""
    return sample_accuracy(sample) is None


def sample_score(sample: Mapping[str, Any], method: Method = "research", rho: float | None = None) -> float:
    """What ``method`` maximises: E[U] (research) or average accuracy, declining at 0.5 (search)."""
    if check_method(method) == "research":
        return sample_utility(sample, rho)
    accuracy = sample_accuracy(sample)
    return SEARCH_DECLINE_BELOW if accuracy is None else accuracy


def rank_key(sample: Mapping[str, Any], index: int, method: Method = "research",
             rho: float | None = None) -> tuple[float, int, int]:
    """Sort key, best first (see the module doc for the tie rules)."""
    tie = len(sample.get("claims") or ()) if method == "research" else int(declines(sample))
    return (-sample_score(sample, method, rho), tie, index)


def rank_samples(samples: Sequence[Mapping[str, Any]], method: Method = "research",
                 rho: float | None = None) -> list[Mapping[str, Any]]:
    """``samples`` best first under ``method``."""
    check_method(method)
    order = sorted(range(len(samples)), key=lambda i: rank_key(samples[i], i, method, rho))
    return [samples[i] for i in order]


def record_method(record: Mapping[str, Any]) -> Method:
    """The method a ReSearch record was made with (``"research"`` when it does not say)."""
    return check_method(record.get("method") or "research")
