"""Per-system metrics from prediction records, ``report.json`` and the Markdown summary table."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..common.report import closing_lines, write_json_and_markdown
from . import metrics as M
from .data import Example


def system_metrics(examples: Sequence[Example], records: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    """All metrics of one system over ``examples`` (records keyed by example id; missing ones skipped).

    An abstention counts as an empty prediction. ``match`` is measured on questions with gold
    answers; exact match and F1 on every open question (SQuAD v2 style: an unanswerable question
    is right when the prediction is empty); ``accuracy`` on multiple-choice questions.
    """
    pairs = [(ex, records[ex.id]) for ex in examples if ex.id in records]
    open_pairs = [(ex, r) for ex, r in pairs if not ex.options]
    closed_pairs = [(ex, r) for ex, r in pairs if ex.options]
    answered = [(ex, r) for ex, r in pairs if not r.get("abstained") and str(r.get("answer", "")).strip()]

    def pred(r: Mapping[str, Any]) -> str:
        return "" if r.get("abstained") else str(r.get("answer", ""))

    out: dict[str, float | None] = {
        "match": M.mean(M.match(pred(r), ex.answers) for ex, r in open_pairs if ex.answers),
        "exact_match": M.mean(M.exact_match(pred(r), ex.answers) for ex, r in open_pairs if _scorable(ex)),
        "f1": M.mean(M.f1(pred(r), ex.answers) for ex, r in open_pairs if _scorable(ex)),
        "accuracy": M.accuracy([r.get("option") for _, r in closed_pairs], [ex.label or "" for ex, _ in closed_pairs]),
    }
    flagged = [(ex, r) for ex, r in pairs if ex.answerable is not None]
    if any(ex.answerable is False for ex, _ in flagged):
        precision, recall = M.abstention_precision_recall(
            [bool(r.get("abstained")) for _, r in flagged], [bool(ex.answerable) for ex, _ in flagged]
        )
        out["abstention_rate"] = M.mean(float(bool(r.get("abstained"))) for _, r in flagged)
        out["abstention_precision"] = precision
        out["abstention_recall"] = recall
    out["retrieval_frequency"] = M.retrieval_frequency([bool(r.get("retrieved")) for _, r in pairs])
    segs = [[(bool(c), s) for c, s in r.get("segments") or []] for _, r in answered]
    out["citation_precision_issup"], out["citation_recall_issup"] = M.citation_scores_issup(segs)
    gold_pairs = [(ex, r) for ex, r in answered if ex.answers and not ex.options]
    out["citation_precision_gold"], out["citation_recall_gold"] = M.citation_scores_gold(
        [[c.get("text", "") for c in r.get("citations") or []] for _, r in gold_pairs],
        [ex.answers for ex, _ in gold_pairs],
    )
    out.update(M.latency_summary([float(r["latency_s"]) for _, r in pairs if r.get("latency_s") is not None]))
    return out


def _scorable(ex: Example) -> bool:
    """EM/F1 apply when there are gold answers or the question is known to be unanswerable."""
    return bool(ex.answers) or ex.answerable is False


COLUMNS: tuple[tuple[str, str], ...] = (
    ("match", "match"),
    ("exact_match", "EM"),
    ("f1", "F1"),
    ("accuracy", "acc"),
    ("abstention_rate", "abstain"),
    ("abstention_precision", "abst P"),
    ("abstention_recall", "abst R"),
    ("negative_rejection", "neg rej"),
    ("retrieval_frequency", "retr freq"),
    ("citation_precision_issup", "cite P (IsSup)"),
    ("citation_recall_issup", "cite R (IsSup)"),
    ("citation_precision_gold", "cite P (gold)"),
    ("citation_recall_gold", "cite R (gold)"),
    ("latency_p50_s", "p50 s"),
    ("latency_p95_s", "p95 s"),
)


def markdown_table(systems: Mapping[str, Mapping[str, Any]]) -> str:
    """A Markdown table of the report's systems; columns nobody measured are left out."""
    cols = [(k, h) for k, h in COLUMNS if any(s["metrics"].get(k) is not None for s in systems.values())]
    lines = [
        "| system | n | " + " | ".join(h for _, h in cols) + " |",
        "|---|---:|" + "---:|" * len(cols),
    ]
    for name, entry in systems.items():
        cells = [_fmt(entry["metrics"].get(k), k) for k, _ in cols]
        lines.append(f"| {name} | {entry['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(value: Any, key: str) -> str:
    if value is None:
        return "–"
    if key.startswith("latency"):
        return f"{value:.2f}"
    return f"{100 * value:.1f}"


TRUST_COLUMNS = (("coverage", "coverage"), ("selective_accuracy", "sel. acc"), ("rejection_rate", "rejection"),
                 ("over_refusal", "over-refusal"), ("f1_rg", "F1_RG"), ("aurc", "AURC"))


def trust_table(systems: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Selective-QA figures of the chain systems with 95% bootstrap intervals (none when no system has them)."""
    rows = {name: entry["trust"] for name, entry in systems.items() if entry.get("trust")}
    if not rows:
        return []
    lines = ["", "## Trust (selective QA)", "",
             "Over answerable questions and unanswerable ones (the data set's own and, with --negative-rejection, "
             "the noise-only runs): coverage = answered / all; selective accuracy = right / answered; rejection = "
             "abstained / unanswerable; over-refusal = abstained / answerable; F1_RG = mean of the refusal and "
             "answer F1 (Trust-Score); AURC = area under the risk-coverage curve from the chain's confidence "
             "(lower is better; the best any ranking could reach on these answers in brackets). 95% bootstrap "
             "intervals over questions.", "",
             "| system | n | " + " | ".join(title for _, title in TRUST_COLUMNS) + " |",
             "|---|---:|" + "---:|" * len(TRUST_COLUMNS)]
    for name, trust in rows.items():
        cells = []
        for key, _ in TRUST_COLUMNS:
            fig = trust.get(key) or {}
            value, ci = fig.get("value"), fig.get("ci95")
            cell = "-" if value is None else f"{value:.3f}"
            if value is not None and ci:
                cell += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
            if key == "aurc" and trust.get("aurc_optimal") is not None:
                cell += f" ({trust['aurc_optimal']:.3f})"
            cells.append(cell)
        lines.append(f"| {name} | {trust.get('n')} | " + " | ".join(cells) + " |")
    return lines


def markdown_report(report: Mapping[str, Any]) -> str:
    """The summary Markdown: header, table (percentages; latency in seconds) and sweep notes."""
    info = report.get("run", {})
    lines = [
        f"# Self-RAG evaluation: {info.get('dataset', '?')}",
        "",
        f"- model: `{info.get('model', '?')}`",
        f"- questions: {info.get('n_questions', '?')} ({info.get('format', '?')}), "
        f"retrieval: {info.get('retrieval', '?')}",
        f"- with gold answers: {info.get('n_with_gold_answers', '?')}, unanswerable: "
        f"{info.get('n_unanswerable', '?')}, multiple choice: {info.get('n_multiple_choice', '?')}",
        f"- settings: {json.dumps(info.get('settings', {}), sort_keys=True)}",
        "",
        "Scores in %, latency in seconds per query. match: a gold answer occurs in the prediction (questions "
        "with gold answers); EM/F1: SQuAD-normalised, an abstention or empty answer is right only on unanswerable "
        "questions; acc: multiple choice.",
        "",
        markdown_table(report["systems"]),
        *trust_table(report["systems"]),
    ]
    sweeps = report.get("sweeps") or {}
    if sweeps.get("threshold"):
        lines += ["", f"## Retrieval threshold sweep ({sweeps['threshold_metric']})", ""]
        lines += ["| delta | retrieval freq | " + sweeps["threshold_metric"] + " |", "|---:|---:|---:|"]
        for row in sweeps["threshold"]:
            lines.append(
                f"| {row['delta']:.2f} | {_fmt(row['retrieval_frequency'], '')} | {_fmt(row['quality'], '')} |"
            )
    if sweeps.get("issup_weight"):
        lines += ["", f"## IsSup weight sweep (re-ranked {sweeps['issup_source']} candidates)", ""]
        lines += ["| w_sup | match | F1 | supported |", "|---:|---:|---:|---:|"]
        for row in sweeps["issup_weight"]:
            cells = " | ".join(_fmt(row[key], "") for key in ("match", "f1", "supported"))
            lines.append(f"| {row['w_sup']:.2f} | {cells} |")
    if sweeps.get("abstention"):
        lines += ["", f"## Abstention bars (replayed from {sweeps['abstention_source']} and its noise-only run)", "",
                  "answer rate, match and accuracy of the answered ones on answerable questions; rejection: "
                  "abstentions on the noise-only run (only passages without the answer).", ""]
        lines += ["| IsRel bar | IsSup bar | answer rate | match | accuracy answered | rejection |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for row in sweeps["abstention"]:
            a, n = row["answerable"], row["noise_only"]
            lines.append(f"| {row['abstain_isrel']:.1f} | {row['abstain_issup']:.1f} | {_fmt(a['answer_rate'], '')} | "
                         f"{_fmt(a['match'], '')} | {_fmt(a['accuracy_answered'], '')} | {_fmt(n['abstain_rate'], '')} |")
    lines += closing_lines(sweeps.get("plots", []), report.get("notes", []))
    return "\n".join(lines) + "\n"


def write_report(directory: Path, report: Mapping[str, Any]) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.md`` (:func:`markdown_report`)."""
    return write_json_and_markdown(directory, report, markdown_report)
