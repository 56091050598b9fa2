"""The RLOO reward ("LLMs can learn self-restraint through iterative self-reflection"): the expected utility E[U] at
rho* (Eq. 4) of a completion under a FROZEN evaluator.

A ``ClaimSplitter`` breaks the answer into claims and a ``ClaimScorer`` gives each a probability of
being true; an abstention (empty, the record's own abstention, or a one-sentence refusal) scores 0.
:func:`default_evaluator` makes the command line's evaluator: sentences as claims
(:class:`~langchain_selfrag.restraint.claims.SentenceSplitter`), scored by a reflection model with
:class:`~langchain_selfrag.restraint.scoring.IsSupScorer` over the passages each record carries
(``"passages": [{"title", "text"}]``) or
:class:`~langchain_selfrag.restraint.consistency.IsSupConsistencyScorer` against the record's stored
samples. A scorer that needs passages refuses records without them (:func:`check_evidence`) instead
of scoring every claim 0.5.

Offline (:class:`RecordClaimScorer`), rewards come from the fixed ReSearch data: a completion equal
to one of the question's samples gets that sample's E[U]; otherwise each claim's probability is
looked up among the question's scored claims, and a claim not found there is scored by the
evaluator when one is given, else gets a default probability. The hit / miss / fallback counts
(:meth:`UtilityReward.counts`) go into the training metadata (``reward_counts``), and a claim miss
rate above :data:`MISS_RATE_WARN` is warned about.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from langchain_selfrag.restraint.utility import expected_utility
from langchain_selfrag.tokens import strip_reflection_tokens

from ..core.config import META_FILE, TrainingError
from .pairs import (
    abstention_texts,
    find_sample,
    is_abstention,
    normalise_answer,
    record_id,
    sample_utility,
)

DEFAULT_RHO = 0.5
#: Offline rewards: warn when more than this share of the sampled claims is not in the data.
MISS_RATE_WARN = 0.5


def question_of(record: Mapping[str, Any]) -> str:
    """The record's question (its prompt when it has none)."""
    return str(record.get("question") or record["prompt"])


def evidence_of(record: Mapping[str, Any]) -> list:
    """The record's ``passages`` as LangChain documents (title in metadata)."""
    from langchain_core.documents import Document

    return [Document(page_content=str(p.get("text", "")), metadata={"title": str(p.get("title", ""))})
            for p in record.get("passages") or () if isinstance(p, Mapping)]


class RecordClaimScorer:
    """An offline ``ClaimScorer``: each claim's probability from the scored claims of its question.

    A claim matches a stored claim of the record with the same question after
    :func:`~training.restraint.pairs.normalise_answer` (repeats averaged). Unmatched claims go to
    ``fallback`` (any ``ClaimScorer``) when given, else get ``default_p``, else the mean
    probability of the question's claims (0.5 when it has none). Counters (claims): ``hits``,
    ``misses``, and of the misses ``fallback_scored`` (by ``fallback``) and ``defaulted`` (a fixed p).
    """

    def __init__(self, records: Iterable[Mapping[str, Any]], *, fallback: Any = None, default_p: float | None = None):
        if default_p is not None and not 0.0 <= default_p <= 1.0:
            raise ValueError(f"default_p must lie in [0, 1], not {default_p!r}")
        self.table: dict[str, dict[str, list[float]]] = {}
        for record in records:
            known = self.table.setdefault(question_of(record), {})
            for sample in record["samples"]:
                for claim in sample.get("claims") or ():
                    known.setdefault(normalise_answer(str(claim["text"])), []).append(float(claim["p"]))
        self.fallback = fallback
        self.default_p = default_p
        self.hits = self.misses = self.fallback_scored = self.defaulted = 0

    @property
    def needs_evidence(self) -> bool:
        """True when the fallback scorer judges claims against passages."""
        return bool(getattr(self.fallback, "needs_evidence", False))

    def unknown_p(self, question: str) -> float:
        """The probability of a claim the data does not hold."""
        if self.default_p is not None:
            return self.default_p
        probs = [p for ps in self.table.get(question, {}).values() for p in ps]
        return fmean(probs) if probs else 0.5

    def score(self, claims: Sequence[str], *, question: str, entity: str | None = None,
              evidence: Sequence[Any] = (), samples: Sequence[str] = ()) -> list[float]:
        known = self.table.get(question, {})
        found = [known.get(normalise_answer(c)) for c in claims]
        probs: list[float | None] = [fmean(ps) if ps else None for ps in found]
        missing = [i for i, p in enumerate(probs) if p is None]
        self.hits += len(claims) - len(missing)
        self.misses += len(missing)
        if missing and self.fallback is not None:
            filled = self.fallback.score([claims[i] for i in missing], question=question, entity=entity,
                                         evidence=evidence, samples=samples)
            self.fallback_scored += len(missing)
        else:
            filled = [self.unknown_p(question)] * len(missing)
            self.defaulted += len(missing)
        for i, p in zip(missing, filled):
            probs[i] = float(p)
        return [float(p) for p in probs]  # type: ignore[arg-type]


class UtilityReward:
    """A TRL reward function: the expected utility of each completion under a frozen evaluator.

    ``records`` are the ReSearch records (the dataset's ``record_id`` column points into them);
    ``rho`` overrides each record's own rho*. With a ``tokenizer`` the completion is decoded from
    its ids with the reflection tokens kept (then stripped with any evidence span), so a generated
    ``<paragraph>`` is not taken for answer text. ``offline``: a completion equal to a stored sample
    gets that sample's E[U]. Rewards are cached per (record, completion).
    """

    __name__ = "expected_utility"

    def __init__(self, records: Sequence[Mapping[str, Any]], splitter: Any, scorer: Any, *,
                 rho: float | None = None, tokenizer: Any = None, offline: bool = False) -> None:
        self.records = {record_id(r, i): r for i, r in enumerate(records)}
        self.splitter = splitter
        self.scorer = scorer
        self.rho = rho
        self.tokenizer = tokenizer
        self.offline = offline
        self.cache: dict[tuple[str, str], float] = {}
        self.matched = self.scored = self.abstained = 0

    def counts(self) -> dict[str, Any]:
        """What the rewards were made of: completions matched to a stored sample, abstentions, scored
        completions, claims the evaluator gave its no-evidence fallback and, for an offline scorer,
        claim hits / misses / fallbacks and the miss rate."""
        out: dict[str, Any] = {"completions": len(self.cache), "matched_samples": self.matched,
                               "abstained": self.abstained, "scored": self.scored}
        judge = self.scorer.fallback if isinstance(self.scorer, RecordClaimScorer) else self.scorer
        if judge is not None and hasattr(judge, "fallbacks"):  # claims the frozen evaluator could not judge
            out["evaluator_fallbacks"] = int(judge.fallbacks)
        if isinstance(self.scorer, RecordClaimScorer):
            sc = self.scorer
            looked = sc.hits + sc.misses
            out |= {"claim_hits": sc.hits, "claim_misses": sc.misses, "claim_fallback_scored": sc.fallback_scored,
                    "claim_defaulted": sc.defaulted, "claim_miss_rate": sc.misses / looked if looked else None}
        return out

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any],
                 completion_ids: Sequence[Sequence[int]] | None = None, record_id: Sequence[str] | None = None,
                 **_: Any) -> list[float]:
        if record_id is None:
            raise TrainingError("the RLOO dataset needs a 'record_id' column")
        texts = self.texts(completions, completion_ids)
        return [self.reward(rid, text) for rid, text in zip(record_id, texts)]

    def texts(self, completions: Sequence[Any], completion_ids: Sequence[Sequence[int]] | None) -> list[str]:
        """Raw completion texts: decoded with special tokens when a tokenizer is known, else TRL's text."""
        if self.tokenizer is None or completion_ids is None:
            return [c if isinstance(c, str) else str(c) for c in completions]
        drop = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id} - {None}
        return [self.tokenizer.decode([int(t) for t in ids if int(t) not in drop], skip_special_tokens=False)
                for ids in completion_ids]

    def reward(self, rid: str, raw: str) -> float:
        """E[U] of one raw completion for record ``rid``."""
        key = (rid, raw)
        if key not in self.cache:
            self.cache[key] = self._reward(self.records[rid], raw)
        return self.cache[key]

    def _reward(self, record: Mapping[str, Any], raw: str) -> float:
        if self.offline:
            sample = find_sample(record, raw)
            if sample is not None:
                self.matched += 1
                return sample_utility(sample, self.rho)
        text = strip_reflection_tokens(raw)
        if is_abstention(text, abstention_texts(record)):
            self.abstained += 1
            return 0.0
        entity = record.get("entity")
        claims = self.splitter.split(text, entity=entity)
        if not claims:
            self.abstained += 1
            return 0.0
        samples = [str(s.get("text") or s["completion"]) for s in record["samples"] if not s.get("abstain")]
        probs = self.scorer.score(claims, question=question_of(record), entity=entity,
                                  evidence=evidence_of(record), samples=samples)
        self.scored += 1
        rho = self.rho if self.rho is not None else float(record.get("rho", DEFAULT_RHO))
        return expected_utility(probs, rho)


def needs_evidence(scorer: Any) -> bool:
    """True for a scorer that judges claims against passages (it declares ``needs_evidence``)."""
    return bool(getattr(scorer, "needs_evidence", False))


def check_evidence(records: Sequence[Mapping[str, Any]], scorer: Any) -> None:
    """TrainingError when ``scorer`` needs passages and some records carry none.

    Such a scorer would give every claim of those records its no-evidence fallback (a constant),
    and RLOO would train on a reward that says nothing.
    """
    if not needs_evidence(scorer):
        return
    bare = [record_id(r, i) for i, r in enumerate(records) if not evidence_of(r)]
    if bare:
        shown = ", ".join(repr(b) for b in bare[:3]) + (" ..." if len(bare) > 3 else "")
        raise TrainingError(
            f"{len(bare)} of {len(records)} records have no passages ({shown}), but the {type(scorer).__name__} "
            "evaluator judges claims against passages: make the data with passages (training.research "
            "--passages / --scorer passages) or use --evaluator consistency")


def record_reward_counts(reward: UtilityReward, adapter_dir: str | Path, *,
                         warn_above: float = MISS_RATE_WARN) -> dict[str, Any]:
    """Add the reward's :meth:`~UtilityReward.counts` to the adapter's metadata (``reward_counts``);
    warn when the offline claim miss rate is above ``warn_above``."""
    counts = reward.counts() | {"miss_rate_warn_above": warn_above}
    rate = counts.get("claim_miss_rate")
    counts["miss_rate_warning"] = bool(rate is not None and rate > warn_above)
    if counts["miss_rate_warning"]:
        warnings.warn(f"offline RLOO reward: {rate:.0%} of the sampled claims are not in the ReSearch data "
                      f"(above {warn_above:.0%}); they got a fallback probability, so the reward mostly counts "
                      "sentences. Use an online evaluator (--evaluator-model without --offline).", stacklevel=2)
    path = Path(adapter_dir) / META_FILE
    if path.is_file():
        meta = json.loads(path.read_text())
        path.write_text(json.dumps(meta | {"reward_counts": counts}, indent=1))
    return counts


EVALUATORS = ("passages", "consistency")


def default_evaluator(records: Sequence[Mapping[str, Any]], evaluator_model: str | None, *, offline: bool,
                      unknown_p: float | None = None, threads: int | None = None, evaluator: str = "passages"):
    """``(splitter, scorer)``: sentences as claims, scored by the frozen ``evaluator_model``.

    ``evaluator``: ``"passages"`` (IsSup against each record's passages) or ``"consistency"``
    (IsSup self-consistency with the record's stored samples). Offline, the data is looked up
    first and the evaluator scores only the claims it does not hold. Records a passage scorer
    cannot judge are refused (:func:`check_evidence`).
    """
    from langchain_selfrag.restraint.claims import SentenceSplitter

    if evaluator not in EVALUATORS:
        raise TrainingError(f"--evaluator must be one of {', '.join(EVALUATORS)}, not {evaluator!r}")
    scorer = None
    if evaluator_model:
        from langchain_selfrag.lm import load_reflection_lm, resolve_backend
        from langchain_selfrag.restraint.calibration import calibration_for
        from langchain_selfrag.restraint.consistency import IsSupConsistencyScorer
        from langchain_selfrag.restraint.scoring import IsSupScorer

        if evaluator == "passages":
            check_evidence(records, IsSupScorer)
        options = {"n_threads": threads} if threads and resolve_backend(evaluator_model) == "llamacpp" else {}
        lm = load_reflection_lm(evaluator_model, **options)
        scorer = (IsSupScorer(lm, calibration=calibration_for(lm)) if evaluator == "passages"
                  else IsSupConsistencyScorer(lm))
    if offline:
        scorer = RecordClaimScorer(records, fallback=scorer, default_p=unknown_p)
    if scorer is None:
        raise TrainingError("--evaluator-model (a GGUF of the frozen judge) is required unless --offline")
    return SentenceSplitter(), scorer
