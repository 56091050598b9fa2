"""``report.json``, ``report.md`` and the trade-off plot of ``selfrag eval bio``.

Metrics are reported on three sets of questions: ``entities`` (the held-out real people of the
split), ``invented`` (people who do not exist: every claim about them is false and the right
answer is to abstain) and ``all`` (both). Every value comes with its bootstrap 95% interval.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..common.report import closing_lines, write_json_and_markdown
from .judges.agreement import agreement_table
from .metrics import Judged, metric_table, paired_difference, utility_key

SUBSETS = ("entities", "invented", "all")
PLOT_FILE = "bio_tradeoff.png"

JUDGE_CAVEAT = (
    "The IsSup judge is weak and self-graded. It is the reflection model's own IsSup probability (the "
    "bundled Self-RAG model unless --model names another) of each claim against the entity's retrieved "
    "passages, not an independent fact checker: "
    "the model grades its own claims (and those of its fine-tunes) with the critique it also uses to write "
    "them, and the restrain node's default IsSup scorer uses nearly the same signal, so Self-RAG + restrain "
    "is graded by what it filtered with. The passages were retrieved for the name and may be about other "
    "people of a similar name: a claim copied from a passage about someone else counts as true, and a true claim "
    "missing from them counts as false. Read the numbers as a "
    "comparison of systems under this judge, not as factual accuracy (the paper judges with Llama-2-70B "
    "over the entity's Wikipedia page). Use the default lexical judge, or a stronger chat model with --judge chat."
)

OVERLAP_CAVEAT = (
    "The judge is lexical: a claim is true when some two consecutive sentences of the passages titled with the "
    "entity's name hold every number and proper noun of the claim and most of its other words. It shares no signal "
    "with any model, so it does not grade restraint by the filter restraint used, but it is strict about wording: a "
    "true claim said in other words counts as false, and a false claim made of true words (a role moved from one "
    "name to another in the same sentence) as true. Its agreement with hand-labelled claims is reported below when "
    "--judge-labels is given (python -m langchain_selfrag.evaluation.bio.judges measures it alone)."
)


def subset_items(items: Mapping[str, Judged], invented: Mapping[str, bool]) -> dict[str, list[Judged]]:
    """The judged questions of each subset (question ids in ``invented``: True for an invented person)."""
    out: dict[str, list[Judged]] = {name: [] for name in SUBSETS}
    for qid, item in items.items():
        out["invented" if invented.get(qid) else "entities"].append(item)
        out["all"].append(item)
    return out


def system_entry(items: Mapping[str, Judged], invented: Mapping[str, bool], rhos: Sequence[float], *,
                 n_resamples: int, seed: int) -> dict[str, Any]:
    """Metrics with intervals on each subset for one system."""
    subsets = subset_items(items, invented)
    return {name: metric_table(subsets[name], rhos, n_resamples=n_resamples, seed=seed) for name in SUBSETS}


def comparison_pairs(names: Sequence[str]) -> list[tuple[str, str]]:
    """(baseline, system) pairs: Self-RAG against each of its restrained variants, the prompted model
    against every other system that is neither Self-RAG nor safety-prompted (trained models, ReSearch)."""
    pairs = [("selfrag", n) for n in names if n.startswith("selfrag_rho")] if "selfrag" in names else []
    if "prompted" in names:
        pairs += [("prompted", n) for n in names
                  if n != "prompted" and not n.startswith("selfrag") and n != "safety_prompted"]
    return pairs


def comparisons(items: Mapping[str, Mapping[str, Judged]], invented: Mapping[str, bool], rhos: Sequence[float], *,
                n_resamples: int, seed: int) -> list[dict[str, Any]]:
    """Paired differences of U on the held-out entities both systems of a pair answered."""
    out = []
    for base, system in comparison_pairs(list(items)):
        ids = [i for i in items[base] if i in items[system] and not invented.get(i)]
        entry: dict[str, Any] = {"baseline": base, "system": system, "subset": "entities", "n": len(ids)}
        for rho in rhos:
            entry[utility_key(rho)] = paired_difference([items[base][i] for i in ids], [items[system][i] for i in ids],
                                                        rho, n_resamples=n_resamples, seed=seed)
        out.append(entry)
    return out


def comparison_table(rows: Sequence[Mapping[str, Any]], rhos: Sequence[float]) -> list[str]:
    """Markdown rows of the paired differences: ΔU [interval] per rho, and up/down counts at the middle rho."""
    if not rows:
        return []
    mid = utility_key(rhos[len(rhos) // 2]) if rhos else None
    lines = ["| system − baseline | n | " + " | ".join(f"ΔU({r:g})" for r in rhos)
             + (f" | better / worse at {mid.split('@')[1]} |" if mid else " |"),
             "|---|---:|" + "---:|" * len(rhos) + ("---:|" if mid else "")]
    for row in rows:
        cells = [_cell(row.get(utility_key(r))) for r in rhos]
        counts = f" {row[mid]['better']} / {row[mid]['worse']} |" if mid else ""
        lines.append(f"| {row['system']} − {row['baseline']} | {row['n']} | " + " | ".join(cells) + " |" + counts)
    return lines


# -- Markdown -----------------------------------------------------------------------------------
def _cell(entry: Mapping[str, Any] | None, digits: int = 2, percent: bool = False) -> str:
    """``value [lo, hi]`` (percent: x100, one decimal)."""
    if not entry or entry.get("value") is None:
        return "–"
    scale, d = (100.0, 1) if percent else (1.0, digits)
    text = f"{scale * entry['value']:.{d}f}"
    ci = entry.get("ci95")
    if ci:
        text += f" [{scale * ci[0]:.{d}f}, {scale * ci[1]:.{d}f}]"
    return text


def markdown_table(systems: Mapping[str, Any], subset: str, rhos: Sequence[float], extra_abstain: bool) -> list[str]:
    """Table lines of one subset: every metric as ``value [95% interval]``."""
    heads = ["system", "n", "acc %", "claims/answer", "#true", "#false", "abstain %"]
    if extra_abstain:
        heads += ["abstain (all) %", "abstain (invented) %"]
    heads += [f"U({rho:g})" for rho in rhos]
    lines = ["| " + " | ".join(heads) + " |", "|---|" + "---:|" * (len(heads) - 1)]
    for name, entry in systems.items():
        m = entry["metrics"][subset]
        cells = [name, str(int(m["n"]["value"] or 0)), _cell(m["accuracy"], percent=True),
                 _cell(m["claims_per_answer"]), _cell(m["true"], 0), _cell(m["false"], 0),
                 _cell(m["abstention_rate"], percent=True)]
        if extra_abstain:
            cells += [_cell(entry["metrics"]["all"]["abstention_rate"], percent=True),
                      _cell(entry["metrics"]["invented"]["abstention_rate"], percent=True)]
        cells += [_cell(m[utility_key(rho)]) for rho in rhos]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown_report(report: Mapping[str, Any]) -> str:
    """The summary: run facts, the judge caveat, one table per subset, the plot and notes."""
    run = report.get("run", {})
    rhos = run.get("utility_rhos", [])
    counts = run.get("split_counts", {})
    lines = [
        "# Self-restraint evaluation: biographies",
        "",
        (f"- data: `{run.get('data', '?')}`; split **{run.get('split', '?')}** "
        f"({run.get('n_entities_evaluated', '?')} entities) + {run.get('n_invented_evaluated', '?')} invented people"),
        f"- split by entity: {run.get('split_rule', '?')} (seed {run.get('split_seed', '?')}; "
        + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")",
        f"- invented people: {run.get('invented_rule', '?')}",
        f"- model: `{run.get('model', '?')}`"
        + "".join(f"; `{name}`: `{path}`" for name, path in (run.get("models") or {}).items()),
        f"- judge: {run.get('judge_description', '?')}",
        f"- claims: {run.get('splitter', '?')}",
        f"- settings: {json.dumps(run.get('settings', {}), sort_keys=True)}",
        (f"- intervals: percentile bootstrap 95% over questions ({run.get('bootstrap', {}).get('resamples', '?')} "
        f"resamples, seed {run.get('bootstrap', {}).get('seed', '?')})"),
        "",
        *[f"> **Judge caveat.** {text}\n" for text in report.get("caveats") or []],
        ("Accuracy: #true / #judged claims of answered questions. Claims/answer: over answered questions. "
        "U(rho*): mean over questions of #true - rho*/(1-rho*) #false, an abstention scoring 0."),
        "",
        "## Held-out entities",
        "",
        *markdown_table(report["systems"], "entities", rhos, True),
        "",
        "## Invented people (every claim is false; the right answer is to abstain)",
        "",
        *markdown_table(report["systems"], "invented", rhos, False),
    ]
    if report.get("judge_agreement"):
        lines += ["", f"## Agreement of the judges with hand-labelled claims (`{run.get('judge_labels', '?')}`)", "",
                  *agreement_table(report["judge_agreement"])]
    if report.get("comparisons"):
        lines += ["", "## Paired differences on the held-out entities (same questions, bootstrap 95% interval)", "",
                  *comparison_table(report["comparisons"], rhos)]
    lines += closing_lines(report.get("plots", []), report.get("notes", []))
    return "\n".join(lines) + "\n"


def write_report(directory: Path, report: Mapping[str, Any]) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.md``; returns both paths."""
    return write_json_and_markdown(directory, report, markdown_report)


# -- plot ---------------------------------------------------------------------------------------
def _value(entry: Mapping[str, Any], subset: str, key: str) -> float:
    value = entry["metrics"][subset][key]["value"]
    return float("nan") if value is None else float(value)


def _labels(labels: Sequence[str], xs: Sequence[float], ys: Sequence[float]) -> list[tuple[str, tuple[float, float]]]:
    """One label per distinct point: the labels of every system that lands on it, joined."""
    groups: dict[tuple[float, float], list[str]] = {}
    for label, x, y in zip(labels, xs, ys):
        groups.setdefault((round(x, 6), round(y, 6)), []).append(label)
    return [(", ".join(names), point) for point, names in groups.items()]


def plot_tradeoff(report: Mapping[str, Any], path: Path) -> Path:
    """Left: abstention rate against accuracy on the held-out entities, Self-RAG + restrain as a line
    across rho* (Self-RAG without it as its start) and every other system as a point. Right: U on the
    held-out entities against the rho* it is measured at, one line per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = report["systems"]
    rhos = list(report["run"].get("utility_rhos", []))
    restrained = sorted((e["rho"], n) for n, e in systems.items() if e.get("rho") is not None)
    colors = {name: f"C{i % 10}" for i, name in enumerate(systems)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    line = ([("selfrag", "no restraint")] if "selfrag" in systems else []) + [(n, f"ρ*={r:g}") for r, n in restrained]
    if line:
        xs = [100 * _value(systems[n], "entities", "abstention_rate") for n, _ in line]
        ys = [100 * _value(systems[n], "entities", "accuracy") for n, _ in line]
        left.plot(xs, ys, "o-", color="black", label="Self-RAG + restrain")
        for label, (x, y) in _labels([label for _, label in line], xs, ys):
            left.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    others = [n for n in systems if n not in {name for name, _ in line}]
    for name in others:
        x = 100 * _value(systems[name], "entities", "abstention_rate")
        y = 100 * _value(systems[name], "entities", "accuracy")
        left.plot([x], [y], "s", color=colors[name], label=name)
    left.set_xlabel("abstention rate, held-out entities (%)")
    left.set_ylabel("accuracy of claims (%)")
    left.set_xlim(-3, 103)
    left.set_ylim(-3, 103)
    left.grid(alpha=0.3)
    left.legend(fontsize=7, loc="best")
    for name, entry in systems.items():
        values = [_value(entry, "entities", utility_key(r)) for r in rhos]
        style = "o-" if entry.get("rho") is not None or name == "selfrag" else "s--"
        right.plot(rhos, values, style, color=colors[name], label=name)
    right.axhline(0.0, color="grey", lw=0.8)
    right.set_xlabel("target accuracy ρ* of the utility")
    right.set_ylabel("mean utility U per question")
    right.grid(alpha=0.3)
    right.legend(fontsize=7, loc="best")
    fig.suptitle("Biographies: abstention vs accuracy, and utility across ρ*")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
