"""Abstention and negative rejection: noise-only passages, abstention signals, threshold sweeps.

Negative rejection (RGB, Chen et al. 2024): a question is given only passages that do not contain
its answer; the right behaviour is to say so. ``rejection`` is the share of such questions the
chain abstained on.

One run with abstention off (``SelfRAGConfig.paper()``) or on gives the whole sweep offline:
abstention only replaces the chosen answer, so the trace (each candidate's IsRel / IsSup and the
``chosen`` flag) says what any pair of bars would have done (:func:`would_abstain`, the graph's
own :func:`~langchain_selfrag.graph.nodes.abstain.evidence_reason`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...graph.nodes.abstain import candidates_of, evidence_reason

#: IsRel bars of the default sweep (0: off).
ISREL_GRID = tuple(round(0.05 * i, 2) for i in range(20))
#: IsSup bars of the default sweep (0: off).
ISSUP_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)


def noise_only(candidates: Iterable[Any], contains_answer: Callable[[Any], bool], k: int) -> list[Any]:
    """The first ``k`` of ``candidates`` (best first) that do not contain the answer."""
    out = []
    for item in candidates:
        if not contains_answer(item):
            out.append(item)
            if len(out) == k:
                break
    return out


def signals(out: Mapping[str, Any], *, source: bool = True) -> dict[str, Any]:
    """What abstention needs from one chain output, JSON-ready.

    ``retrieved``: retrieval was attempted; ``source``: a retriever or given passages were there;
    ``abstained`` / ``abstain_reason``: what the run itself did; ``trace``: per candidate its
    passage, IsRel, IsSup, IsUse, dropped and chosen flags, and round.
    """
    keys = ("passage", "isrel", "issup", "isuse", "dropped", "chosen", "selected", "round")
    return {"retrieved": bool(out.get("retrieved")), "source": source,
            "retrieve_probability": out.get("retrieve_probability"),
            "abstained": bool(out.get("abstained")), "abstain_reason": out.get("abstain_reason"),
            "trace": [{k: t.get(k) for k in keys} for t in candidates_of(out.get("trace") or [])]}


def chosen_text(record: Mapping[str, Any]) -> str:
    """The answer the run chose before any abstention replaced it: the answer itself when the run
    answered, else the answer of the candidates ``select`` had chosen (their ``answer``: their text, or
    the sentence quoting it under ``answer_form="sentence"``)."""
    if not record.get("abstained"):
        return str(record.get("answer") or "")
    return " ".join(entry_answer(t) for t in record.get("trace") or [] if t.get("chosen")).strip()


def entry_answer(entry: Mapping[str, Any]) -> str:
    """The answer a trace entry gives: its ``answer`` (the quoted sentence under ``answer_form="sentence"``),
    else its generated text (records written before answers were kept)."""
    return str(entry.get("answer") or entry.get("text") or "")


def _evidence_abstention(reason: str | None) -> bool:
    """True for a reason that only the evidence bars or the closed-book rule give (not 'no text')."""
    return bool(reason) and ("IsRel >=" in reason or "IsSup >=" in reason or "closed-book" in reason
                             or "no passages to ground" in reason)


def would_abstain(sig: Mapping[str, Any], isrel_bar: float, issup_bar: float, closed_book: bool) -> bool:
    """Would the run abstain at these bars? A run that abstained for another reason (no answer
    text, every candidate dropped) abstains whatever the bars; ``closed_book``: abstain on an
    answer given without retrieval though a source was there (``abstain_closed_book``)."""
    if sig["abstained"] and not _evidence_abstention(sig.get("abstain_reason")):
        return True
    if not sig["retrieved"]:
        return bool(closed_book and sig.get("source"))
    if isrel_bar <= 0 and issup_bar <= 0:
        return False
    chosen = [t for t in sig["trace"] if t.get("chosen")]
    return evidence_reason(sig["trace"], chosen, isrel_bar, issup_bar) is not None


def rates(records: Sequence[Mapping[str, Any]], isrel_bar: float, issup_bar: float,
          closed_book: bool) -> dict[str, Any]:
    """Over ``records`` (each ``{"signals", "match"}``; ``match`` None for unanswerable ones):
    the answer rate, the abstention rate, the match rate (answered and right, over all) and the
    accuracy of the answered ones."""
    n = len(records)
    abstained = [would_abstain(r["signals"], isrel_bar, issup_bar, closed_book) for r in records]
    answered = [r for r, a in zip(records, abstained) if not a]
    out: dict[str, Any] = {"n": n, "abstained": sum(abstained), "abstain_rate": sum(abstained) / n if n else None,
                           "answer_rate": len(answered) / n if n else None}
    if records and records[0].get("match") is not None:
        right = sum(bool(r["match"]) for r in answered)
        out["match"] = right / n if n else None
        out["accuracy_answered"] = right / len(answered) if answered else None
    return out


def sweep(sets: Mapping[str, Sequence[Mapping[str, Any]]], *, closed_book: bool = True,
          isrel_grid: Sequence[float] = ISREL_GRID, issup_grid: Sequence[float] = ISSUP_GRID) -> list[dict[str, Any]]:
    """One row per (IsRel bar, IsSup bar): :func:`rates` of every named record set."""
    return [{"abstain_isrel": a, "abstain_issup": b, "closed_book": closed_book,
             **{name: rates(records, a, b, closed_book) for name, records in sets.items()}}
            for a in isrel_grid for b in issup_grid]


def plot_sweep(rows: Sequence[Mapping[str, Any]], answerable: str, unanswerable: Sequence[str], path: str | Path,
               *, issup_bar: float = 0.0, chosen: float | None = None, title: str = "") -> Path:
    """PNG: over the IsRel bar (IsSup bar fixed), the answer rate and match of the ``answerable``
    set and the rejection (abstention) rate of each ``unanswerable`` set; ``chosen`` marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    issup_bar = min({r["abstain_issup"] for r in rows}, key=lambda v: abs(v - issup_bar))  # nearest swept bar
    line = [r for r in rows if r["abstain_issup"] == issup_bar]
    xs = [r["abstain_isrel"] for r in line]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(xs, [r[answerable]["answer_rate"] for r in line], "o-", label=f"answer rate ({answerable})")
    ax.plot(xs, [r[answerable]["match"] for r in line], "s-", label=f"match ({answerable})")
    ax.plot(xs, [r[answerable]["accuracy_answered"] or 0.0 for r in line], "^--",
            label=f"accuracy of answered ({answerable})")
    for name in unanswerable:
        ax.plot(xs, [r[name]["abstain_rate"] for r in line], "d-", label=f"rejection ({name})")
    if chosen is not None:
        ax.axvline(chosen, color="grey", linestyle=":", label=f"default abstain_isrel={chosen:g}")
    ax.set_xlabel(f"abstain_isrel (abstain_issup={issup_bar:g})")
    ax.set_ylabel("rate")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
