"""Self-restraint of one answer ("LLMs can learn self-restraint through iterative self-reflection", Eq. 1-4): keep the
claims likely enough to say, or abstain.

The answer is split into claims, each claim gets a probability of being true, the claims with
``p > rho`` are kept and ``E[U]`` is computed over them. When nothing is worth saying (no claim
kept, so ``E[U] <= 0``; an abstention scores 0) the result is an abstention; otherwise the answer
becomes the kept claims, rewritten with P_rewrite or joined as whole sentences. The graph's
``restrain`` node (:mod:`langchain_selfrag.graph.nodes.restrain`) runs it on the selected answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from langchain_core.documents import Document

from .claims import ClaimSplitter, SentenceSplitter, guess_entity, split_sentences, strip_citations
from .rewrite import ClaimRewriter, join_kept
from .scoring import ClaimScorer, IsSupScorer
from .utility import ClaimRecord, check_probability, claim_records, expected_utility, kept_expected_utility

#: Every restraint abstention reason starts with this.
REASON_PREFIX = "restraint: "


@dataclass
class RestraintResult:
    """What restraint made of one answer.

    answer: the kept claims (unchanged when nothing was dropped; empty on abstention). claims:
    ``{"text", "p", "kept"}`` records. expected_utility: E[U] of ``answer`` (0.0 on abstention, the
    utility of saying nothing). abstain_reason: why nothing is said, or None.
    """

    answer: str
    claims: list[ClaimRecord] = field(default_factory=list)
    expected_utility: float = 0.0
    abstain_reason: str | None = None

    @property
    def abstained(self) -> bool:
        return self.abstain_reason is not None


def split_answer(answer: str, splitter: ClaimSplitter, entity: str | None = None) -> tuple[list[str], list[str] | None]:
    """The answer's claims, and for a :class:`SentenceSplitter` the original sentence of each claim
    (citation markers included), so that a kept answer is made of the answer's own text."""
    if isinstance(splitter, SentenceSplitter):
        pairs = [(s, strip_citations(s)) for s in split_sentences(answer)]
        pairs = [(raw, claim) for raw, claim in pairs if claim]
        return [claim for _, claim in pairs], [raw for raw, _ in pairs]
    return list(splitter.split(answer, entity=entity)), None


def score_claims(scorer: ClaimScorer, claims: Sequence[str], *, question: str, entity: str | None,
                 evidence: Sequence[Document], samples: Sequence[str], prompt: str | None = None) -> list[float]:
    """The scorer's probabilities, checked: one per claim, each in [0, 1] (ValueError otherwise)."""
    extra = {"prompt": prompt} if isinstance(scorer, IsSupScorer) and prompt else {}
    probs = list(scorer.score(claims, question=question, entity=entity, evidence=evidence, samples=samples,
                              **extra))
    if len(probs) != len(claims):
        raise ValueError(f"{type(scorer).__name__} gave {len(probs)} probabilities for {len(claims)} claims")
    return [check_probability(float(p)) for p in probs]


def restrain_answer(answer: str, *, rho: float, question: str, splitter: ClaimSplitter, scorer: ClaimScorer,
                    evidence: Sequence[Document] = (), samples: Sequence[str] = (), entity: str | None = None,
                    prompt: str | None = None, rewriter: ClaimRewriter | None = None) -> RestraintResult:
    """Split, score, keep the claims with p > rho; abstain when none is kept (E[U] <= 0).

    When claims were dropped, the kept ones become the answer: ``rewriter`` (P_rewrite) writes them
    as fluent text when given; otherwise the kept sentences (or claims) are joined whole, the first
    naming its subject when the sentence before it was dropped (:func:`.rewrite.join_kept`).
    """
    claims, sentences = split_answer(answer, splitter, entity)
    if not claims:
        return RestraintResult("", [], 0.0, REASON_PREFIX + "the answer holds no claim")
    probs = score_claims(scorer, claims, question=question, entity=entity, evidence=evidence,
                         samples=samples, prompt=prompt)
    records = claim_records(claims, probs, rho)
    value = kept_expected_utility(records, rho)
    if not any(r["kept"] for r in records) or value <= 0:
        return RestraintResult("", records, 0.0, REASON_PREFIX + (
            f"no claim is likely enough to say (best p = {max(probs):.2f}, not above rho = {rho:g}; "
            f"E[U] of the whole answer would be {expected_utility(probs, rho):.2f})"
        ))
    flags = [bool(r["kept"]) for r in records]
    guess = guess_entity(question)
    name = entity or (guess if guess != question.strip() else None)  # a subject the question names, or none
    if rewriter is not None and not all(flags):
        text = rewriter.rewrite([r["text"] for r in records if r["kept"]], entity=name or guess)
        if text:
            return RestraintResult(text, records, value, None)
    units = sentences if sentences is not None else [r["text"] for r in records]
    return RestraintResult(join_kept(units, flags, name), records, value, None)


_MARKER = re.compile(r"\[(\d+)\]")


def renumber_citations(answer: str, citations: Sequence[Document]) -> tuple[str, list[Document]]:
    """Keep the citations whose ``[n]`` markers are still in ``answer``, renumbered from 1 in order."""
    order: dict[int, int] = {}
    for match in _MARKER.finditer(answer):
        n = int(match.group(1))
        if 1 <= n <= len(citations) and n not in order:
            order[n] = len(order) + 1
    text = _MARKER.sub(lambda m: f"[{order[int(m.group(1))]}]" if int(m.group(1)) in order else m.group(0), answer)
    return text, [citations[n - 1] for n in order]
