"""The abstention section: the validated default bars and the held-out figures at them
(``cookbook/selfrag_smollm2/abstention.py select`` / ``report``), when shipped."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .cells import fmt
from .figures import OPS
from .io import FULL_EVAL, read_json

#: Written by ``cookbook/selfrag_smollm2/abstention.py``: the validated default bars, the held-out
#: figures at them (with the noise-only run) and the sweep's plot.
ABSTENTION_THRESHOLDS = "abstention_thresholds.json"
ABSTENTION_EVAL = "abstention_eval.json"
ABSTENTION_PLOT = "abstention_tradeoff.png"
#: Written by ``cookbook/selfrag_smollm2/realworld.py``: real-world questions vs the invented corpora.
REALWORLD_EVAL = "realworld_eval.json"
#: What each invented corpus of ``realworld.py`` was used for.
CORPUS_ROLES = {"validation": "its questions chose the default bars", "test": "used for no choice"}


#: Acceptance bars of abstention by default (issue 25), judged on ``abstention_eval.json``'s defaults.
ABSTENTION_BARS = (("answer match", "match", ">=", 0.53),
                   ("abstained or empty on answerable questions", "abstained_or_empty", "<=", 0.03),
                   ("negative rejection", "negative_rejection", ">=", 0.95))


def _rate_cell(row: Mapping[str, Any] | None, key: str) -> str:
    if not row or row.get(key) is None:
        return "-"
    count = row.get("abstained") if key == "abstain_rate" else None
    return f"{fmt(row[key])}" + (f" ({count}/{row['n']})" if count is not None else "")


def _difference(diff: Mapping[str, Any] | None) -> str:
    """`` (defaults − paper -0.009, 95% CI …)`` from a paired difference, else nothing."""
    if not diff or diff.get("value") is None:
        return ""
    ci = diff.get("ci95")
    return f" (defaults − paper {diff['value']:+.3f}" + (f", 95% CI {ci[0]:+.3f} to {ci[1]:+.3f})" if ci else ")")


def abstention_section(folder: Path) -> list[str]:
    """Abstention when the evidence is absent: the validated bars and the held-out figures at them
    (``abstention.py select`` / ``report``), when shipped."""
    chosen = read_json(folder, ABSTENTION_THRESHOLDS)
    if not chosen:
        return []
    at = chosen.get("at_choice") or {}
    alt = chosen.get("alternative") or {}
    names = {"squad": "SQuAD validation, answerable", "squad_noise": "same questions, noise-only passages",
             "invented_answerable": "invented corpus, answerable", "invented_unanswerable": "invented corpus, "
             "unanswerable (its own entities)", "real_world": "real-world questions vs the invented corpus"}
    lines = [
        "## Abstention when the documents lack the answer",
        "",
        (f"Defaults `abstain_isrel={chosen['abstain_isrel']:g}`, `abstain_issup={chosen['abstain_issup']:g}`, "
         f"`abstain_closed_book={chosen['abstain_closed_book']}` (`SelfRAGConfig.paper()` turns all three off), "
         f"chosen on validation data by `cookbook/selfrag_smollm2/abstention.py select` ({ABSTENTION_THRESHOLDS}): "
         f"{chosen['rule']}."),
        "",
        "| validation set | n | abstained | match |",
        "|---|---|---|---|",
    ]
    for key, label in names.items():
        row = at.get(key)
        if row:
            lines.append(f"| {label} | {row['n']} | {_rate_cell(row, 'abstain_rate')} | {_rate_cell(row, 'match')} |")
    if alt:
        lines += ["", (f"Alternative ({alt['rule']}): `abstain_isrel={alt['abstain_isrel']:g}`, "
                       f"`abstain_issup={alt['abstain_issup']:g}`: abstained on "
                       + ", ".join(f"{names[k]} {fmt((alt.get(k) or {}).get('abstain_rate'))}" for k in names if alt.get(k))
                       + ".")]
    closed = chosen.get("closed_book") or {}
    popqa = chosen.get("closed_book_popqa")
    if closed:
        lines += ["", "Adaptive mode skipped retrieval (a closed-book answer) on: " + ", ".join(
            f"{names.get(k, k)} {v['skipped_retrieval']}/{v['n']}" for k, v in closed.items())
            + (f"; PopQA questions {popqa['skipped_retrieval']}/{popqa['n']} (lowest p(Retrieval) "
               f"{popqa['min_retrieve_probability']:.3f}, threshold {popqa['threshold']:g})" if popqa else "") + "."]
    ev = read_json(folder, ABSTENTION_EVAL)
    if ev:
        d, p = ev["defaults"], ev["paper"]
        lines += [
            "",
            f"Held-out articles (`{ABSTENTION_EVAL}`: {ev['n']} answerable questions, {ev['sample']}; {ev['how']}):",
            "",
            "| through the chain | defaults | paper preset |",
            "|---|---|---|",
            (f"| answer match | {fmt(d['match'])} [{fmt(d['match_ci95'][0])}, {fmt(d['match_ci95'][1])}] | {fmt(p['match'])}"
             f"{_difference(ev.get('defaults_vs_paper_match'))} |"),
            (f"| abstained or empty, answerable | {fmt(d['abstained_or_empty'])} [{fmt(d['abstained_or_empty_ci95'][0])}, "
             f"{fmt(d['abstained_or_empty_ci95'][1])}] | {fmt(p.get('abstained_or_empty'))} |"),
            (f"| negative rejection (noise-only passages) | {fmt(d['negative_rejection'])} "
             f"[{fmt(d['negative_rejection_ci95'][0])}, {fmt(d['negative_rejection_ci95'][1])}] | {fmt(p['negative_rejection'])} |"),
            "",
            (f"Of the {d['abstained']} abstentions on answerable questions, {d['abstained_right_answers']} replaced a "
             f"right answer and {d['abstained_wrong_answers']} a wrong one."
             + (f" The alternative bars (`abstain_isrel={ev['alternative']['abstain_isrel']:g}`, "
                f"`abstain_issup={ev['alternative']['abstain_issup']:g}`) give match {fmt(ev['alternative']['match'])}, "
                f"abstained {fmt(ev['alternative']['abstained'])}, negative rejection "
                f"{fmt(ev['alternative']['negative_rejection'])}." if ev.get("alternative") else "")),
            "",
        ]
        whole = read_json(folder, FULL_EVAL).get("chain") or {}
        full = whole.get("match")
        diff = ev.get("defaults_vs_paper_match") or {}
        if full is not None and diff.get("value") is not None and ev["n"] < (whole.get("n") or 0):
            lines += [(f"The sample is easier than the whole held-out set (paper preset {fmt(p['match'])} here, "
                       f"{fmt(full)} on all answerable questions in `{FULL_EVAL}`); with the paired difference above, "
                       f"the defaults' match on all of them is about {fmt(full + diff['value'])}."), ""]
        lines += ["| bar (defaults, held-out) | measured | bar | status |", "|---|---|---|---|"]
        for label, key, op, limit in ABSTENTION_BARS:
            value = d[key]
            met = OPS[op](value, limit)
            lines.append(f"| {label} | {fmt(value)} | {op} {limit:g} | {'met' if met else '**missed**'} |")
        lines.append("")
        lines += seen_lines(at.get("squad"), d)
        lines += ceiling_lines(ev.get("retrieval_ceiling"))
        if (folder / ABSTENTION_PLOT).is_file():
            lines += [f"![abstention trade-off]({ABSTENTION_PLOT})", ""]
    lines += realworld_lines(read_json(folder, REALWORLD_EVAL))
    return [*lines, ""]


def seen_lines(validation: Mapping[str, Any] | None, heldout: Mapping[str, Any]) -> list[str]:
    """Why the bars cost more on held-out questions than on validation: the validation questions were seen."""
    if not validation:
        return []
    return [(f"**The SQuAD validation questions were seen in training.** `select` chose the bars on answerable "
             f"questions outside phase 1's sample, but phase 2 of v3 and v4 together trained on every answerable "
             f"question of the training articles (gold passage, `[Relevant]`, answer), so they are easier for "
             f"it than unseen questions: at the chosen bars validation match {fmt(validation['match'])}, "
             f"abstained {fmt(validation['abstain_rate'])}; held-out match {fmt(heldout['match'])}, abstained "
             f"{fmt(heldout['abstained_or_empty'])}. `abstention.py collect --trained FILE` leaves later phases' "
             "questions out; for this lineage none would be left, so a future build needs questions kept out "
             "of every phase."), ""]


def ceiling_lines(ceiling: Mapping[str, Any] | None) -> list[str]:
    """What retrieval leaves to the judge (``abstention_eval.json``'s ``retrieval_ceiling``)."""
    if not ceiling:
        return []
    lines = [
        (f"**Retrieval bounds the last two bars together.** For {ceiling['answer_not_retrieved']} of the "
         f"{ceiling['n']} answerable questions ({fmt(ceiling['share'])}), none of the {ceiling['k']} passages "
         f"({ceiling['retriever']}) holds an answer string: for the chain these are noise-only questions. A rule "
         f"that rejects 95% of noise-only questions abstains on about 95% of them too, so on at least about "
         f"{fmt(ceiling['floor_at_rejection_0.95'])} of answerable questions, however good its judge: the 3% and "
         f"95% bars cannot both hold with this retrieval. Measured at each IsRel bar (IsSup bar "
         f"{ceiling['abstain_issup']:g}):"),
        "",
        "| abstain_isrel | negative rejection | abstained, answer not retrieved | abstained, all answerable | floor from retrieval |",
        "|---|---|---|---|---|",
    ]
    for r in ceiling["by_isrel_bar"]:
        lines.append(f"| {r['abstain_isrel']:g} | {fmt(r['negative_rejection'])} | {fmt(r['abstained_answer_not_retrieved'])} | "
                     f"{fmt(r['abstained_answerable'])} | {fmt(r['floor_from_retrieval'])} |")
    return [*lines, ""]


def realworld_lines(ev: Mapping[str, Any]) -> list[str]:
    """Real-world questions against the invented corpora through the README path (``realworld.py``)."""
    if not ev.get("corpora"):
        return []
    sources = ", ".join(f"{n} {name}" for name, n in ev["questions"].items())
    first = next(iter(ev["corpora"].values()))
    settings = ", ".join(f"{k}={v:g}" for k, v in ((first.get("restraint") or {}).get("settings") or {}).items())
    lines = [
        (f"Real-world questions against the invented corpora (`{REALWORLD_EVAL}`, "
         f"`cookbook/selfrag_smollm2/realworld.py`): {sources} questions (seed {ev['seed']}), each corpus indexed by "
         f"`selfrag index` into the embedded Chroma store and asked through `SelfRAGChain`; a dense retriever "
         f"always returns passages, so each abstention is the model's own judgement:"),
        "",
        (f"| corpus | abstained, defaults | abstained, restraint ({settings}) | highest IsRel, defaults | "
         "answerable right, defaults / paper |"),
        "|---|---|---|---|---|",
    ]
    for name, e in ev["corpora"].items():
        d, r = e.get("defaults") or {}, e.get("restraint") or {}
        ad, ap = e.get("answerable_defaults") or {}, e.get("answerable_paper") or {}
        lines.append(f"| {name}, {CORPUS_ROLES.get(name, '')} ({e['documents']} documents) | {d.get('abstained')}/{d.get('n')} | "
                     f"{r.get('abstained')}/{r.get('n')} | {fmt(d.get('highest_isrel'))} | "
                     f"{ad.get('right')}/{ad.get('n')} / {ap.get('right')}/{ap.get('n')} |")
    return [*lines, ""]
