"""Claim probabilities p(T = 1 | x, c, ...): the scorer protocol, verbalised probabilities, IsSup.

* :class:`ClaimScorer`: the protocol every scorer follows; the self-consistency scorers (the
  paper's P_eval path and its IsSup reading) live in :mod:`.consistency`.
* :func:`parse_probability`: a verbalised probability (P_eval's answer) as a number.
* :class:`IsSupScorer`: the Self-RAG reflection model's IsSup (``p(Full) + 0.5 p(Partial)``,
  normalised over the three IsSup tokens) of the claim written after each evidence passage, read
  where the model would generate its IsSup token, aggregated over the passages (IsRel-weighted by
  default) and calibrated on labelled claims when a :class:`.calibration.Calibration` is given.

:func:`parse_probability` is pure and never raises: output it cannot read is None, and the scorers
then use their ``fallback`` and count it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from langchain_core.documents import Document

from .. import scoring as S
from .. import tokens as T
from ..passage_budget import EvidenceFitter, can_tokenize
from ..prompts import build_instruction, format_prompt
from ..retrieval import passage_heading
from .calibration import AGGREGATES, READS_ISREL, Calibration, aggregate
from .claims import strip_citations

_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-\u2212]?)(?P<num>\d+(?:\.\d+)?|\.\d+)"
    r"(?:\s*(?P<pct>%|percent\b)|\s*(?:/|out\s+of)\s*(?P<den>100|10|1)\b)?",
    re.IGNORECASE,
)
ISSUP = T.GROUPS[T.Kind.ISSUP]
ISREL = T.GROUPS[T.Kind.ISREL]


def _value(match: re.Match[str]) -> float | None:
    if match.group("sign"):
        return None
    value = float(match.group("num"))
    if match.group("pct"):
        scale = 100.0
    elif match.group("den"):
        scale = float(match.group("den"))
    elif "." in match.group("num") and value <= 1.0:
        scale = 1.0
    else:
        scale = 100.0
    return value / scale if value <= scale else None


def parse_probability(text: str) -> float | None:
    """A verbalised probability in [0, 1], or None when ``text`` holds none.

    ``"85"``, ``"85%"``, ``"**85**"``, ``"85/100"`` and ``"0.85"`` all give 0.85: a number with a
    decimal point up to 1 is a probability, any other number a percentage. The first number that
    carries ``%`` wins, else the first number. Negative numbers, numbers above 100 (or above their
    ``/ 10`` or ``/ 1`` scale), words and empty output give None.
    """
    if not isinstance(text, str):
        return None
    clean = re.sub(r"[*_`]", "", text)
    matches = list(_NUMBER.finditer(clean))
    if not matches:
        return None
    chosen = next((m for m in matches if m.group("pct")), matches[0])
    return _value(chosen)


@runtime_checkable
class ClaimScorer(Protocol):
    """Probability that each claim is true."""

    def score(self, claims: Sequence[str], *, question: str, entity: str | None = None,
              evidence: Sequence[Document] = (), samples: Sequence[str] = ()) -> list[float]:
        """One probability in [0, 1] per claim. ``evidence``: passages to judge against;
        ``samples``: all answers to the question so far (for self-consistency)."""
        ...


def check_subset_settings(n_subsets: int, subset_size: int, fallback: float) -> None:
    """Settings shared by the self-consistency scorers: ValueError when out of range."""
    if n_subsets < 1 or subset_size < 1:
        raise ValueError("n_subsets and subset_size must be at least 1")
    if not 0.0 <= fallback <= 1.0:
        raise ValueError(f"fallback must lie in [0, 1], not {fallback!r}")


class IsSupScorer:
    """The reflection model's IsSup of each claim against each evidence passage, aggregated over the
    passages and optionally calibrated.

    The prompt is the question's Self-RAG prompt (``prompt`` when given, as the graph's ``prepare``
    builds it), then ``[Retrieval]<paragraph>title\\ntext</paragraph>[Relevant]`` and the claim, as a
    segment the model itself would write after a passage it judged relevant; ``lm.candidate_probs``
    reads the three IsSup tokens at the next position, where the model writes its IsSup token, and
    :func:`langchain_selfrag.scoring.issup_score` turns them into ``p(Full) + 0.5 p(Partial)`` (0 when
    the model gives no IsSup probability at all, the paper's rule). All (claim, passage) prompts go
    in one ``candidate_probs`` call, a passage's prompts together (they share a prefix); with
    ``aggregate="relevance"`` or ``"joint"`` one more call reads each passage's IsRel where the model
    judges relevance. Passages are cut to fit the model's context as in generation.

    The per-passage scores become one support score (:func:`.calibration.aggregate`: ``"relevance"``,
    the IsRel-weighted mean, by default; ``"joint"``, the best IsRel x IsSup; ``"max"``, the best
    passage, is biased upward as k grows; ``"mean"``), and ``calibration`` (a
    :class:`.calibration.Calibration` fitted on labelled claims; its own ``aggregate`` then applies)
    maps it to a probability, judging against no more passages than it was fitted on
    (``calibration.passages``). Without evidence the
    support is 0: the claim gets ``calibration.no_evidence`` (else 0.0), unless ``fallback`` says
    otherwise; such claims are counted in ``fallbacks``.
    """

    #: Judges claims against passages (callers that have none should not use it).
    needs_evidence = True

    def __init__(self, lm: Any, *, aggregate: str = "relevance", calibration: Calibration | None = None,
                 fallback: float | None = None, max_passage_tokens: int | None = None) -> None:
        if fallback is not None and not 0.0 <= fallback <= 1.0:
            raise ValueError(f"fallback must lie in [0, 1], not {fallback!r}")
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, not {aggregate!r}")
        self.lm = lm
        self.calibration = calibration
        self.aggregate = calibration.aggregate if calibration is not None else aggregate
        if fallback is None:
            fallback = calibration.no_evidence if calibration is not None else 0.0
        self.fallback = float(fallback)
        self.max_passage_tokens = max_passage_tokens
        self.calls = self.fallbacks = 0

    def _fitter(self, claims: Sequence[str]) -> tuple[list[str], EvidenceFitter]:
        texts = [T.neutralise(strip_citations(T.strip_reflection_tokens(c))) for c in claims]
        room = max((self._tokens(t) for t in texts), default=1)  # the claim takes the answer's place
        return texts, EvidenceFitter(self.lm, room, limit=self.max_passage_tokens)

    def frames(self, claims: Sequence[str], *, question: str, evidence: Sequence[Document],
               prompt: str | None = None) -> list[str]:
        """Per passage, the prompt up to ``</paragraph>`` (where the model writes its IsRel token)."""
        base = prompt if prompt is not None else format_prompt(build_instruction(question.strip()))
        _, fitter = self._fitter(claims)
        return [fitter.prompt(base, passage_heading(d), d.page_content)[0] for d in evidence]

    def prompts(self, claims: Sequence[str], *, question: str, evidence: Sequence[Document],
                prompt: str | None = None) -> list[list[str]]:
        """Per claim, one IsSup prompt per evidence passage."""
        texts, _ = self._fitter(claims)
        frames = self.frames(claims, question=question, evidence=evidence, prompt=prompt)
        return [[frame + T.RELEVANT + text for frame in frames] for text in texts]

    def _tokens(self, text: str) -> int:
        return len(self.lm.tokenize(text, add_bos=False)) + 1 if can_tokenize(self.lm) else 1

    def passage_scores(self, claims: Sequence[str], *, question: str, evidence: Sequence[Document],
                       prompt: str | None = None, relevance: bool = True) -> tuple[list[list[float]], list[float]]:
        """``(issup, isrel)``: per claim the IsSup score against each passage, and each passage's IsRel
        (``[]`` unless ``relevance``)."""
        grid = self.prompts(claims, question=question, evidence=evidence, prompt=prompt)
        n = len(claims)
        # passage-major: the prompts of one passage share their prefix and go one after another
        probs = self.lm.candidate_probs([grid[i][j] for j in range(len(evidence)) for i in range(n)], ISSUP)
        self.calls += 1
        issup = [[S.issup_score(probs[j * n + i]) for j in range(len(evidence))] for i in range(n)]
        isrel: list[float] = []
        if relevance:
            frames = self.frames(claims, question=question, evidence=evidence, prompt=prompt)
            isrel = [S.isrel_score(p or {}) for p in self.lm.candidate_probs(frames, ISREL)]
            self.calls += 1
        return issup, isrel

    def probability(self, issup: Sequence[float], isrel: Sequence[float] = ()) -> float:
        """A claim's probability from its per-passage scores (aggregated, then calibrated)."""
        support = aggregate(issup, isrel, self.aggregate)
        return self.calibration(support) if self.calibration is not None else support

    def score(self, claims: Sequence[str], *, question: str, entity: str | None = None,
              evidence: Sequence[Document] = (), samples: Sequence[str] = (),
              prompt: str | None = None) -> list[float]:
        if not claims:
            return []
        if not evidence:
            self.fallbacks += len(claims)
            return [self.fallback] * len(claims)
        if self.calibration is not None and self.calibration.passages is not None:
            evidence = list(evidence)[: self.calibration.passages]  # as many passages as it was fitted on
        issup, isrel = self.passage_scores(claims, question=question, evidence=evidence, prompt=prompt,
                                           relevance=self.aggregate in READS_ISREL)
        return [self.probability(row, isrel) for row in issup]
