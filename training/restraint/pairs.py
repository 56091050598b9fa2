"""ReSearch records ("LLMs can learn self-restraint through iterative self-reflection") -> training data for SFT, DPO
and RLOO. Pure: no model, no torch.

A ReSearch record holds one question, the exact policy ``prompt`` and its ``samples`` (answers
with their claims, claim probabilities and expected utility E[U] at the record's ``rho``, plus an
abstention sample at E[U] = 0). From it:

* :func:`sft_record` - the best sample as a ``{instruction, input, prompt, output}`` record for
  ``training.trainers.sft`` (``prompt`` is used verbatim, ``output`` is the sample's raw ``completion``);
* :func:`dpo_pairs` - the 2 best x 2 worst samples as TRL ``{prompt, chosen, rejected}`` pairs;
* :func:`rloo_prompt` - ``{prompt, record_id}`` rows for TRL's ``RLOOTrainer``.

Ranking (:func:`rank_samples`) follows the record's ``method``
(:mod:`langchain_selfrag.restraint.ranking`): ReSearch ranks by E[U], higher first, at equal E[U]
fewer claims first (so the abstention, with no claims, wins a tie with an answer worth 0), then the
original order; the paper's search baseline (``"method": "search"``) ranks by average accuracy
and declines (the abstention ranks first) when the best answer's expected accuracy is below 0.5.
DPO pairs need the chosen side strictly better under the same rule.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_selfrag.jsonl import iter_jsonl
from langchain_selfrag.restraint import ranking
from langchain_selfrag.restraint.ranking import record_method, sample_utility
from langchain_selfrag.tokens import strip_reflection_tokens

Record = Mapping[str, Any]
Sample = Mapping[str, Any]

#: How the SFT selection of ReSearch data ranks and breaks ties, recorded in the training metadata.
TIE_RULE = ranking.RULES["research"]


def selection_rule(records: Iterable[Record]) -> str:
    """The ranking rule(s) of ``records`` for the training metadata (one per method, ``; ``-joined)."""
    methods = dict.fromkeys(record_method(r) for r in records)
    return " | ".join(f"{m}: {ranking.RULES[m]}" if len(methods) > 1 else ranking.RULES[m] for m in methods)

_ABSTAIN_START = re.compile(
    r"^\s*(i'?m sorry|i am sorry|sorry|i (do not|don't) (know|have)|i (cannot|can't|am unable|am not able)"
    r"|i have no (information|knowledge)|unfortunately, i)\b",
    re.IGNORECASE,
)


class ResearchDataError(ValueError):
    """A ReSearch record is malformed."""


# ---------------------------------------------------------------------------------------------
# reading and checking
# ---------------------------------------------------------------------------------------------
def check_record(record: Record, where: str = "record") -> None:
    """Raise :class:`ResearchDataError` unless ``record`` has a prompt and well-formed samples."""
    if not isinstance(record.get("prompt"), str) or not record["prompt"]:
        raise ResearchDataError(f"{where}: no 'prompt' string")
    samples = record.get("samples")
    if not isinstance(samples, list) or not samples:
        raise ResearchDataError(f"{where}: no 'samples' list")
    for n, sample in enumerate(samples):
        if not isinstance(sample, Mapping) or not isinstance(sample.get("completion"), str):
            raise ResearchDataError(f"{where}: sample {n} has no 'completion' string")
        value = sample.get("expected_utility")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ResearchDataError(f"{where}: sample {n} has no finite 'expected_utility'")
        if not isinstance(sample.get("claims", []), list):
            raise ResearchDataError(f"{where}: sample {n} has a non-list 'claims'")


def read_research(path: str | os.PathLike, limit: int | None = None) -> list[dict]:
    """The checked records of a ReSearch JSONL file (the first ``limit`` of them)."""
    rows: list[dict] = []
    for lineno, record in iter_jsonl(path, ResearchDataError):
        check_record(record, f"{path}:{lineno}")
        rows.append(record)
        if limit and len(rows) >= limit:
            break
    if not rows:
        raise ResearchDataError(f"{path}: no records")
    return rows


def record_id(record: Record, index: int = 0) -> str:
    """The record's ``id``, else its question, else its position."""
    return str(record.get("id") or record.get("question") or index)


# ---------------------------------------------------------------------------------------------
# utility and ranking
# ---------------------------------------------------------------------------------------------
def sample_score(record: Record, sample: Sample, rho: float | None = None) -> float:
    """What the record's method maximises for ``sample``: E[U] (research) or average accuracy (search)."""
    return ranking.sample_score(sample, record_method(record), rho)


def rank_samples(record: Record, rho: float | None = None) -> list[Sample]:
    """Samples best first under the record's method (see the module doc)."""
    return ranking.rank_samples(list(record["samples"]), record_method(record), rho)


def best_sample(record: Record, rho: float | None = None) -> Sample:
    """The best sample under the record's method (see :func:`rank_samples`)."""
    return rank_samples(record, rho)[0]


# ---------------------------------------------------------------------------------------------
# SFT / DPO / RLOO rows
# ---------------------------------------------------------------------------------------------
def sft_record(record: Record, rho: float | None = None, index: int = 0) -> dict[str, Any]:
    """The best sample as a ``training.trainers.sft`` record; ``prompt`` overrides the Alpaca formatting."""
    best = best_sample(record, rho)
    return {
        "id": record_id(record, index),
        "instruction": str(record.get("question") or record["prompt"]),
        "input": "",
        "prompt": record["prompt"],
        "output": best["completion"],
        "expected_utility": sample_utility(best, rho),
        "abstain": bool(best.get("abstain", False)),
    }


def sft_records(records: Iterable[Record], rho: float | None = None) -> list[dict[str, Any]]:
    """One SFT record per ReSearch record."""
    return [sft_record(r, rho, i) for i, r in enumerate(records)]


def dpo_pairs(
    record: Record, rho: float | None = None, n_best: int = 2, n_worst: int = 2, index: int = 0
) -> list[dict[str, Any]]:
    """``n_best`` x ``n_worst`` preference pairs of one question (best chosen, worst rejected).

    A pair is skipped when both sides are the same sample or the same text, or when the chosen
    side is not strictly better by the record's method (``*_utility`` hold E[U], ``*_score`` what
    the method ranks by); with fewer than ``n_best + n_worst`` samples the two groups
    overlap and fewer pairs come out.
    """
    ranked = rank_samples(record, rho)
    best, worst = ranked[:n_best], ranked[::-1][:n_worst]
    rid = record_id(record, index)
    pairs: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for chosen in best:
        for rejected in worst:
            s_c, s_r = sample_score(record, chosen, rho), sample_score(record, rejected, rho)
            key = (chosen["completion"], rejected["completion"])
            if chosen is rejected or key[0] == key[1] or not s_c > s_r or key in seen:
                continue
            seen.add(key)
            pairs.append({"prompt": record["prompt"], "chosen": key[0], "rejected": key[1], "id": rid,
                          "chosen_utility": sample_utility(chosen, rho), "rejected_utility": sample_utility(rejected, rho),
                          "chosen_score": s_c, "rejected_score": s_r})
    return pairs


def dpo_dataset(records: Iterable[Record], rho: float | None = None, n_best: int = 2, n_worst: int = 2) -> list[dict]:
    """The pairs of all records, in record order."""
    return [pair for i, record in enumerate(records) for pair in dpo_pairs(record, rho, n_best, n_worst, i)]


def rloo_prompt(record: Record, index: int = 0) -> dict[str, str]:
    """A ``{prompt, record_id}`` row for ``RLOOTrainer``."""
    return {"prompt": record["prompt"], "record_id": record_id(record, index)}


def rloo_prompts(records: Iterable[Record]) -> list[dict[str, str]]:
    """One RLOO prompt per record."""
    return [rloo_prompt(r, i) for i, r in enumerate(records)]


# ---------------------------------------------------------------------------------------------
# matching completions back to the data (offline rewards)
# ---------------------------------------------------------------------------------------------
def normalise_answer(text: str) -> str:
    """An answer's text for matching: reflection tokens and evidence removed, spaces collapsed, lower case."""
    return " ".join(strip_reflection_tokens(text).split()).lower()


def is_abstention(text: str, known: Iterable[str] = ()) -> bool:
    """True for an empty answer, one of the ``known`` abstentions, or a one-sentence refusal."""
    norm = normalise_answer(text)
    if not norm or norm in {normalise_answer(k) for k in known}:
        return True
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", norm) if s]
    return len(sentences) <= 1 and bool(_ABSTAIN_START.match(norm))


def abstention_texts(record: Record) -> list[str]:
    """The completions and texts of the record's abstention samples."""
    out: list[str] = []
    for sample in record["samples"]:
        if sample.get("abstain"):
            out.extend(t for t in (sample.get("completion"), sample.get("text")) if isinstance(t, str) and t)
    return out


def find_sample(record: Record, completion: str) -> Sample | None:
    """The sample whose completion or text matches ``completion`` (after :func:`normalise_answer`)."""
    norm = normalise_answer(completion)
    for sample in record["samples"]:
        texts: Sequence[Any] = (sample.get("completion"), sample.get("text"))
        if any(isinstance(t, str) and normalise_answer(t) == norm for t in texts):
            return sample
    return None
