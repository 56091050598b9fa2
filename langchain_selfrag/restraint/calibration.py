"""Calibrated claim probabilities from per-passage IsSup scores, as pure functions.

The reflection model gives each (claim, passage) an IsSup score ``s_i`` and each passage an IsRel
score ``r_i``. :func:`aggregate` turns them into one support score per claim:

* ``"max"``: the best passage (biased upward as the number of passages k grows: with more passages
  a high score by chance becomes likelier);
* ``"mean"``: the plain mean over passages;
* ``"relevance"``: the IsRel-weighted mean ``sum r_i s_i / sum r_i`` (0 when no passage is relevant):
  a passage the model finds irrelevant hardly counts, whatever its IsSup;
* ``"joint"``: the best passage by ``r_i s_i``, the model's probability that this one passage is
  relevant to the question *and* supports the claim (Self-RAG reads IsSup only after ``[Relevant]``).
  Unlike ``"relevance"`` it is not normalised, so passages about somebody else (low IsRel for every
  one of them) give little support however well their wording matches the claim.

:class:`Calibration` maps the support ``x`` to a probability ``sigmoid(a x + b)`` (Platt scaling),
fitted on labelled claims (:func:`fit_platt`); a claim with no evidence has support 0, so its
probability is ``sigmoid(b)``: what the labelled data says of unsupported claims, not a coin flip.
:func:`expected_calibration_error` and :func:`reliability` measure calibration against labels.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

AGGREGATES = ("max", "mean", "relevance", "joint")
#: The aggregates that read each passage's IsRel.
READS_ISREL = ("relevance", "joint")


def aggregate(issup: Sequence[float], isrel: Sequence[float] = (), how: str = "relevance") -> float:
    """One support score from the per-passage IsSup (and IsRel) scores; 0.0 without passages."""
    if how not in AGGREGATES:
        raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, not {how!r}")
    if not issup:
        return 0.0
    if how == "max":
        return float(max(issup))
    if how == "mean":
        return float(sum(issup) / len(issup))
    if len(isrel) != len(issup):
        raise ValueError(f"{len(issup)} IsSup scores but {len(isrel)} IsRel scores")
    if how == "joint":
        return float(max(r * s for r, s in zip(isrel, issup)))
    weight = sum(isrel)
    return float(sum(r * s for r, s in zip(isrel, issup)) / weight) if weight > 0 else 0.0


def sigmoid(z: float) -> float:
    """The logistic function, safe for large |z|."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@dataclass(frozen=True)
class Calibration:
    """``p = sigmoid(a * support + b)`` over the ``aggregate`` of the per-passage scores.

    ``model``: the reflection model file it was fitted for; ``fitted_on``: what it was fitted on;
    ``passages``: how many passages (the first, in retrieval order) each claim was judged against
    when fitting; a scorer using it judges against no more, whatever ``k`` retrieved, since a best-of
    aggregate grows with the number of passages. None: fitted on all given passages.
    """

    aggregate: str
    a: float
    b: float
    model: str = ""
    fitted_on: str = ""
    passages: int | None = None

    def __post_init__(self) -> None:
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, not {self.aggregate!r}")
        if not (math.isfinite(self.a) and math.isfinite(self.b)):
            raise ValueError("calibration coefficients must be finite")
        if self.passages is not None and self.passages < 1:
            raise ValueError(f"passages must be at least 1, not {self.passages!r}")

    def __call__(self, support: float) -> float:
        return sigmoid(self.a * float(support) + self.b)

    @property
    def no_evidence(self) -> float:
        """The probability of a claim with no evidence at all (support 0)."""
        return self(0.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        try:
            passages = data.get("passages")
            return cls(str(data["aggregate"]), float(data["a"]), float(data["b"]), str(data.get("model", "")),
                       str(data.get("fitted_on", "")), int(passages) if passages is not None else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a calibration: {exc}") from exc

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """A calibration from JSON (its ``calibration`` field, or the whole object)."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls.from_dict(data.get("calibration", data))


def fit_platt(xs: Sequence[float], ys: Sequence[bool], *, l2: float = 1e-3, iterations: int = 100) -> tuple[float, float]:
    """``(a, b)`` minimising the log loss of ``sigmoid(a x + b)`` on labels ``ys`` (Newton's method,
    a small L2 penalty on ``a`` and ``b`` so that separable data gives finite coefficients)."""
    if len(xs) != len(ys) or not xs:
        raise ValueError("fit_platt needs as many labels as scores, at least one")
    a = b = 0.0
    for _ in range(iterations):
        ga, gb = l2 * a, l2 * b
        haa, hab, hbb = l2, 0.0, l2
        for x, y in zip(xs, ys):
            p = sigmoid(a * x + b)
            d = p - (1.0 if y else 0.0)
            w = p * (1.0 - p)
            ga += d * x
            gb += d
            haa += w * x * x
            hab += w * x
            hbb += w
        det = haa * hbb - hab * hab
        if det <= 0:
            break
        step_a = (hbb * ga - hab * gb) / det
        step_b = (haa * gb - hab * ga) / det
        a, b = a - step_a, b - step_b
        if abs(step_a) + abs(step_b) < 1e-10:
            break
    return a, b


def log_loss(probs: Sequence[float], labels: Sequence[bool], eps: float = 1e-12) -> float:
    """Mean negative log-likelihood of the labels."""
    if len(probs) != len(labels) or not probs:
        raise ValueError("log_loss needs as many labels as probabilities, at least one")
    total = 0.0
    for p, y in zip(probs, labels):
        p = min(max(p, eps), 1.0 - eps)
        total -= math.log(p if y else 1.0 - p)
    return total / len(probs)


def reliability(probs: Sequence[float], labels: Sequence[bool], bins: int = 10) -> list[dict[str, float]]:
    """Equal-width bins of ``probs`` with their count, mean probability and share of true labels
    (empty bins left out); a probability of exactly 1 falls in the last bin."""
    if len(probs) != len(labels):
        raise ValueError(f"{len(probs)} probabilities but {len(labels)} labels")
    if bins < 1:
        raise ValueError("bins must be at least 1")
    groups: dict[int, list[tuple[float, bool]]] = {}
    for p, y in zip(probs, labels):
        groups.setdefault(min(int(p * bins), bins - 1), []).append((float(p), bool(y)))
    return [{"lo": i / bins, "hi": (i + 1) / bins, "n": len(g), "mean_p": sum(p for p, _ in g) / len(g),
             "frac_true": sum(y for _, y in g) / len(g)} for i, g in sorted(groups.items())]


def expected_calibration_error(probs: Sequence[float], labels: Sequence[bool], bins: int = 10) -> float:
    """ECE: the count-weighted mean |mean probability - share true| over :func:`reliability` bins."""
    table = reliability(probs, labels, bins)
    n = sum(row["n"] for row in table)
    return sum(row["n"] * abs(row["mean_p"] - row["frac_true"]) for row in table) / n if n else 0.0


#: The calibration shipped beside the bundled model (fitted by cookbook/restraint_smollm2/calibrate.py).
CALIBRATION_FILE = "issup_calibration.json"


def model_file(lm: Any) -> str | None:
    """The file name of the model behind ``lm`` (through schedulers and caches, which wrap an ``lm``)."""
    for _ in range(4):
        path = getattr(lm, "model_path", None)
        if path:
            return Path(path).name
        lm = getattr(lm, "lm", None)
        if lm is None:
            return None
    return None


def calibration_for(lm: Any, path: str | Path | None = None) -> Calibration | None:
    """The shipped calibration (``path``, default every bundled model's :data:`CALIBRATION_FILE`) that
    was fitted for the very model file behind ``lm``; None otherwise (a calibration is per model)."""
    if path is None:
        from ..bundled import shipped_files

        paths = shipped_files(CALIBRATION_FILE)
    else:
        paths = [Path(path)] if Path(path).is_file() else []
    name = model_file(lm)
    if name is None:
        return None
    return next((cal for cal in map(Calibration.load, paths) if cal.model == name), None)
