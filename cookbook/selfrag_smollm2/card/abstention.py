"""The abstention section: the bars the bundled model ships (its calibration), the held-out figures at
them, and the earlier SQuAD-only selection (``cookbook/selfrag_smollm2/abstention.py select`` /
``report``), when shipped."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langchain_selfrag.abstention import BUNDLED_FILE

from .cells import fmt
from .io import read_json

#: Written by ``cookbook/selfrag_smollm2/abstention.py``: the bars ``select`` chose on SQuAD validation,
#: the held-out figures at them (with the noise-only run, and a sweep of every pair of bars) and its plot.
ABSTENTION_THRESHOLDS = "abstention_thresholds.json"
ABSTENTION_EVAL = "abstention_eval.json"
ABSTENTION_PLOT = "abstention_tradeoff.png"
#: Written by ``cookbook/selfrag_smollm2/realworld.py``: real-world questions vs the invented corpora.
REALWORLD_EVAL = "realworld_eval.json"
#: What each invented corpus of ``realworld.py`` was used for.
CORPUS_ROLES = {"validation": "its questions were in the validation data of the SQuAD-only selection",
                "test": "used for no choice"}
#: Kinds of question of a calibration's expected figures, with what handling them right means.
CALIBRATION_KINDS = (("answerable", "answerable: answered right, its document cited"),
                     ("near_miss", "near miss: abstained"), ("off_topic", "off topic: abstained"))


def _rate_cell(row: Mapping[str, Any] | None, key: str) -> str:
    if not row or row.get(key) is None:
        return "-"
    count = row.get("abstained") if key == "abstain_rate" else None
    return f"{fmt(row[key])}" + (f" ({count}/{row['n']})" if count is not None else "")


def _difference(diff: Mapping[str, Any] | None) -> str:
    """``-0.009 (95% CI …)`` from a paired difference, else ``n/a``."""
    if not diff or diff.get("value") is None:
        return "n/a"
    ci = diff.get("ci95")
    return f"{diff['value']:+.3f}" + (f" (95% CI {ci[0]:+.3f} to {ci[1]:+.3f})" if ci else "")


def _interval(row: Mapping[str, Any], key: str) -> str:
    ci = row.get(f"{key}_ci95")
    return f"{fmt(row[key])}" + (f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "")


def sweep_row(ev: Mapping[str, Any], bars: Mapping[str, float]) -> dict[str, Any] | None:
    """The held-out sweep's row at these bars (closed-book abstention on), in the defaults' terms."""
    for row in ev.get("sweep") or []:
        if (row.get("closed_book", True) and abs(row["abstain_isrel"] - bars["abstain_isrel"]) < 1e-9
                and abs(row["abstain_issup"] - bars["abstain_issup"]) < 1e-9):
            squad, noise = row["squad"], row["squad_noise"]
            return {"match": squad["match"], "abstained_or_empty": squad["abstain_rate"],
                    "accuracy_answered": squad.get("accuracy_answered"), "negative_rejection": noise["abstain_rate"]}
    return None


def answer_form_lines(cal: Mapping[str, Any]) -> list[str]:
    """What the calibration's answer form means for the answers (nothing for the model's own words)."""
    if cal.get("answer_form") != "sentence":
        return []
    return [("Answers from a passage are quoted: the calibration sets `answer_form=\"sentence\"`, so an answer is the "
             "sentence of the cited passage that holds the model's words, and the bars were fitted on answers of that "
             "form. The held-out SQuAD figures below judge the model's own words."), ""]


def calibration_lines(cal: Mapping[str, Any]) -> list[str]:
    """The bundled calibration: the default bars, what they were fitted on and what they are expected to give."""
    fitted = cal.get("fitted_on") or {}
    counts = fitted.get("questions") or {}
    expected = cal.get("expected") or {}
    off = expected.get("bars_off") or {}
    lines = [
        (f"Defaults `abstain_isrel={cal['abstain_isrel']:g}`, `abstain_issup={cal['abstain_issup']:g}`, "
         "`abstain_closed_book=True` (`SelfRAGConfig.paper()` turns all three off): the model's calibration "
         f"(`{BUNDLED_FILE}`, fitted for `{cal['model']}`), chosen on the {fitted.get('set', 'validation data')} "
         f"by the rule of `selfrag calibrate`: {cal.get('rule', '')}. The test part of the same suite, used for no "
         "choice, is in the trust section above."),
        "",
        *answer_form_lines(cal),
        "| on the fitting set | n | with these bars | with no bars |",
        "|---|---|---|---|",
    ]
    for key, label in CALIBRATION_KINDS:
        if key in (expected.get("handled") or {}):
            lines.append(f"| {label} | {counts.get(key, '-')} | {fmt(expected['handled'][key])} | "
                         f"{fmt((off.get('handled') or {}).get(key))} |")
    for key, label in (("coverage", "coverage"), ("selective_accuracy", "selective accuracy")):
        if key in expected:
            lines.append(f"| {label} | {sum(counts.values()) or '-'} | {fmt(expected[key])} | {fmt(off.get(key))} |")
    return [*lines, ""]


def heldout_lines(ev: Mapping[str, Any], cal: Mapping[str, Any] | None) -> list[str]:
    """Held-out SQuAD at the default bars (the sweep's row), at the earlier selection's bars and with none."""
    earlier, p = ev["defaults"], ev["paper"]
    old = ev.get("thresholds") or {}
    at_default = sweep_row(ev, cal) if cal else None
    at_old = sweep_row(ev, old) if old else None
    heads = ([f"defaults {cal['abstain_isrel']:g} / {cal['abstain_issup']:g}"] if at_default else []) + [
        f"earlier bars {old.get('abstain_isrel', 0):g} / {old.get('abstain_issup', 0):g}"]
    lines = [
        (f"Held-out articles (`{ABSTENTION_EVAL}`: {ev['n']} answerable questions, {ev['sample']}; {ev['how']}; "
         "the defaults' column is the row of the same runs' sweep at their bars):"),
        "",
        "| through the chain | " + " | ".join(heads) + " | paper preset |",
        "|---|" + "---|" * len(heads) + "---|",
    ]
    for label, key, paper_value in (("answer match", "match", p["match"]),
                                    ("abstained or empty, answerable", "abstained_or_empty", p.get("abstained_or_empty")),
                                    ("negative rejection (noise-only passages)", "negative_rejection",
                                     p["negative_rejection"])):
        cells = ([fmt(at_default[key])] if at_default else []) + [_interval(earlier, key)]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {fmt(paper_value)} |")
    if at_default and at_old:
        paper_answered = 1 - (p.get("abstained_or_empty") or 0.0)
        lines.append(f"| selective accuracy (right ÷ answered) | {fmt(at_default['accuracy_answered'])} | "
                     f"{fmt(at_old['accuracy_answered'])} | {fmt(p['match'] / paper_answered if paper_answered else None)} |")
    lines += ["", (f"At the earlier bars, of the {earlier['abstained']} abstentions on answerable questions "
                   f"{earlier['abstained_right_answers']} replaced a right answer and {earlier['abstained_wrong_answers']} "
                   f"a wrong one; answer match at those bars minus the paper preset's: "
                   f"{_difference(ev.get('defaults_vs_paper_match'))}."), ""]
    return lines


def earlier_selection_lines(chosen: Mapping[str, Any]) -> list[str]:
    """The bars ``abstention.py select`` chose on SQuAD validation before the trust suite's calibration."""
    at = chosen.get("at_choice") or {}
    alt = chosen.get("alternative") or {}
    names = {"squad": "SQuAD validation, answerable", "squad_noise": "same questions, noise-only passages",
             "invented_answerable": "invented corpus, answerable", "invented_unanswerable": "invented corpus, "
             "unanswerable (its own entities)", "real_world": "real-world questions vs the invented corpus"}
    lines = [
        (f"The earlier bars `abstain_isrel={chosen['abstain_isrel']:g}`, `abstain_issup={chosen['abstain_issup']:g}` "
         f"were chosen on SQuAD-like validation data alone by `cookbook/selfrag_smollm2/abstention.py select` "
         f"({ABSTENTION_THRESHOLDS}): {chosen['rule']}."),
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
    return [*lines, ""]


def abstention_section(folder: Path) -> list[str]:
    """Abstention when the evidence is absent: the shipped bars, the held-out figures at them and the
    earlier SQuAD-only selection, from the files shipped in ``folder``."""
    cal = read_json(folder, BUNDLED_FILE)
    chosen = read_json(folder, ABSTENTION_THRESHOLDS)
    ev = read_json(folder, ABSTENTION_EVAL)
    if not (cal or chosen):
        return []
    lines = ["## Abstention when the documents lack the answer", ""]
    if cal:
        lines += calibration_lines(cal)
    if ev:
        lines += heldout_lines(ev, cal or None)
    if chosen:
        lines += earlier_selection_lines(chosen)
    if ev:
        if chosen:
            lines += seen_lines(chosen.get("at_choice", {}).get("squad"), ev["defaults"])
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
