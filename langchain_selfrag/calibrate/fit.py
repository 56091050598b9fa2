"""Fit a model's abstention bars on labelled questions, and say what they are expected to give.

:func:`collect` asks every :class:`~.questions.LabelledQuestion` once through a chain with the bars
off (``SelfRAGConfig.paper()``; abstention only replaces the answer, so the critique trace of one
run says what any pair of bars would have done). :func:`choose` replays the bars offline over a grid
(:func:`langchain_selfrag.evaluation.qa.abstention.sweep`) and picks them by a rule:

* ``balanced`` (default): the highest mean over the question kinds present of the share handled
  right (answerable: answered right with the right document cited; near miss and off topic:
  abstained), ties to the higher answerable share, then the lower bars;
* ``accuracy``: the highest coverage whose selective accuracy reaches ``target``.

:func:`calibration` wraps the choice as an :class:`~langchain_selfrag.abstention.AbstentionCalibration`
with the expected coverage, selective accuracy and rejection on the fitting set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..abstention import AbstentionCalibration
from ..evaluation.qa import abstention as A
from ..evaluation.qa.metrics import match
from .questions import KINDS, LabelledQuestion

RULES = ("balanced", "accuracy")


def cited_source(out: Mapping[str, Any]) -> str | None:
    """Source of the passage the chosen candidate was generated from (None without one)."""
    passages = list(out.get("passages") or [])
    for t in A.candidates_of(out.get("trace") or []):
        idx = t.get("passage")
        if t.get("chosen") and isinstance(idx, int) and idx < len(passages):
            return str((passages[idx].metadata or {}).get("source", ""))
    return None


def is_right(q: LabelledQuestion, answer: str, source: str | None) -> bool:
    """A gold answer in the answer (SQuAD normalisation) and, when ``q`` names one, its document cited."""
    found = bool(match(answer, q.answers))
    cited = q.source is None or (source is not None and Path(source).name == Path(q.source).name)
    return found and cited


def record(q: LabelledQuestion, out: Mapping[str, Any]) -> dict[str, Any]:
    """What replaying the bars needs of one run: the signals, and whether the chosen answer is right."""
    signals = A.signals(out)
    right = q.kind == "answerable" and is_right(q, A.chosen_text(out), cited_source(out))
    return {"question": q.question, "kind": q.kind, "signals": signals, "right": right}


def collect(chain: Any, questions: Sequence[LabelledQuestion], *, progress: bool = True,
            on_record: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Ask each question through ``chain`` (give it ``SelfRAGConfig.paper()``); one record per question."""
    from tqdm.auto import tqdm

    out = []
    for q in tqdm(questions, desc="calibrate", unit="question", disable=not progress):
        rec = record(q, chain.invoke(q.question))
        out.append(rec)
        if on_record is not None:
            on_record(rec)
    return out


def sets_of(records: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records grouped by kind, as :func:`~langchain_selfrag.evaluation.qa.abstention.sweep` reads them
    (``match``: right for answerable questions, None for the others)."""
    sets: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        sets.setdefault(r["kind"], []).append({"signals": r["signals"],
                                               "match": bool(r["right"]) if r["kind"] == "answerable" else None})
    return {k: sets[k] for k in KINDS if k in sets}


def handled(row: Mapping[str, Any], kind: str) -> float:
    """Share of one kind handled right at a sweep row: answered right (answerable) or abstained."""
    entry = row[kind]
    return float(entry["match"] if kind == "answerable" else entry["abstain_rate"])


def figures(row: Mapping[str, Any]) -> dict[str, Any]:
    """Per kind the share handled right, and coverage, selective accuracy, rejection and over-refusal
    over all the questions, at one sweep row."""
    kinds = [k for k in KINDS if k in row]
    n = sum(row[k]["n"] for k in kinds)
    answered = sum(row[k]["n"] - row[k]["abstained"] for k in kinds)
    right = row["answerable"]["match"] * row["answerable"]["n"] if "answerable" in row else 0.0
    unanswerable = [k for k in kinds if k != "answerable"]
    n_un = sum(row[k]["n"] for k in unanswerable)
    out: dict[str, Any] = {"handled": {k: handled(row, k) for k in kinds},
                           "coverage": answered / n if n else None,
                           "selective_accuracy": right / answered if answered else None,
                           "rejection_rate": (sum(row[k]["abstained"] for k in unanswerable) / n_un) if n_un else None,
                           "over_refusal": row["answerable"]["abstain_rate"] if "answerable" in row else None}
    return out


def choose(records: Sequence[Mapping[str, Any]], rule: str = "balanced", target: float = 0.8) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(chosen sweep row, all rows)`` under ``rule`` (see the module docstring)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, not {rule!r}")
    sets = sets_of(records)
    if not sets:
        raise ValueError("no records to calibrate on")
    rows = A.sweep(sets, closed_book=True)
    kinds = list(sets)

    def balanced(row: Mapping[str, Any]) -> tuple:
        return (round(sum(handled(row, k) for k in kinds) / len(kinds), 9),
                round(handled(row, "answerable"), 9) if "answerable" in kinds else 0.0,
                -row["abstain_isrel"], -row["abstain_issup"])

    if rule == "balanced":
        return max(rows, key=balanced), rows
    if "answerable" not in sets:
        raise ValueError("the accuracy rule needs answerable questions")
    scored = [(figures(r), r) for r in rows]
    feasible = [(f, r) for f, r in scored if f["selective_accuracy"] is not None and f["selective_accuracy"] >= target]
    if not feasible:
        best = max(scored, key=lambda fr: (fr[0]["selective_accuracy"] or 0.0, fr[0]["coverage"] or 0.0))
        return best[1], rows
    return max(feasible, key=lambda fr: (fr[0]["coverage"], -fr[1]["abstain_isrel"], -fr[1]["abstain_issup"]))[1], rows


def calibration(records: Sequence[Mapping[str, Any]], model: str, *, rule: str = "balanced", target: float = 0.8,
                fitted_on: str = "", answer_form: str | None = None) -> AbstentionCalibration:
    """The bars :func:`choose` picks, as a calibration of the model file ``model`` with its expected figures
    (``answer_form``: the form of the answers the records were judged on, kept in the calibration)."""
    row, rows = choose(records, rule, target)
    counts = {k: len(v) for k, v in sets_of(records).items()}
    rule_text = ("highest mean share handled right over " + ", ".join(counts) + ", ties to more answerable right, "
                 "then lower bars") if rule == "balanced" else (
        f"highest coverage with selective accuracy >= {target:g}, ties to lower bars")
    bars_off = next(r for r in rows if r["abstain_isrel"] == 0 and r["abstain_issup"] == 0)
    return AbstentionCalibration(model=model, abstain_isrel=float(row["abstain_isrel"]),
                                 abstain_issup=float(row["abstain_issup"]), rule=rule_text,
                                 fitted_on={"questions": counts, "set": fitted_on},
                                 expected={**figures(row), "bars_off": figures(bars_off)}, answer_form=answer_form)
