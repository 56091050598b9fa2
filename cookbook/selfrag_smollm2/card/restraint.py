"""The self-restraint section ("LLMs can learn self-restraint through iterative self-reflection"):
the ``selfrag eval bio`` report of ``cookbook/restraint_smollm2``, copied into the model folder, and what that
recipe ran."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_selfrag.restraint.calibration import CALIBRATION_FILE

from .io import read_json
from .versions import load_versions

#: The `selfrag eval bio` report of the restraint recipe (cookbook/restraint_smollm2), copied here.
RESTRAINT_REPORT = "restraint_eval.json"
#: Its trade-off plot (abstention vs accuracy across rho*, utility vs rho*), copied here.
RESTRAINT_PLOT = "restraint_tradeoff.png"


#: The recipe's ``selfrag eval bio --invented-distractors`` report: invented people given a real
#: person's passages, so that restraint must judge their claims (copied here when run).
RESTRAINT_DISTRACTORS_REPORT = "restraint_distractors_eval.json"

#: The trained restraint models the recipe can make (each a ``training.<name>`` output folder).
RESTRAINT_TRAINED = ("dpo", "sft", "rloo")


def restraint_section(folder: Path, rows: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
    """The self-restraint experiment ("LLMs can learn self-restraint through iterative self-reflection"), from its
    ``selfrag eval bio`` report when present."""
    report = read_json(folder, RESTRAINT_REPORT)
    if not report.get("systems"):
        return []
    from langchain_selfrag.evaluation.bio.judges.agreement import agreement_table
    from langchain_selfrag.evaluation.bio.report import comparison_table, markdown_table

    run = report.get("run") or {}
    rhos = run.get("utility_rhos", [])
    if rows is None:
        rows, _ = load_versions(folder)
    note = " ".join(t for t in (recipe_text(report.get("recipe") or {}, rows),
                                retrieval_text(report["systems"])) if t) or None
    return [
        "## Self-restraint: ReSearch, SFT/DPO/RLOO, `selfrag eval bio`",
        "",
        "From \"LLMs can learn self-restraint through iterative self-reflection\".",
        "",
        ("`cookbook/restraint_smollm2/run.sh`; held-out entities of the fixed split and invented people; "
         "value [bootstrap 95% interval]. U(ρ\\*) is the mean utility per question (abstention = 0)."),
        *([note, ""] if note else [""]),
        "Held-out real people:",
        "",
        *markdown_table(report["systems"], "entities", rhos, True),
        "",
        "Invented people (every claim is false; the right answer is to abstain):",
        "",
        *markdown_table(report["systems"], "invented", rhos, False),
        "",
        *(["Paired differences on the held-out people (same questions, bootstrap 95% interval):", "",
           *comparison_table(report["comparisons"], rhos), ""] if report.get("comparisons") else []),
        f"Judge: {run.get('judge_description', '?')}. " + " ".join(report.get("caveats") or []),
        "",
        *(["Agreement of each judge with hand-labelled claims about the bio entities:", "",
           *agreement_table(report["judge_agreement"]), ""] if report.get("judge_agreement") else []),
        *([f"![restraint trade-off]({RESTRAINT_PLOT})", ""] if (folder / RESTRAINT_PLOT).is_file() else []),
        *distractors_lines(read_json(folder, RESTRAINT_DISTRACTORS_REPORT)),
        *calibration_lines(read_json(folder, CALIBRATION_FILE)),
    ]


def calibration_lines(shipped: Mapping[str, Any]) -> list[str]:
    """The restraint scorer's calibration shipped beside the model (``calibrate fit --ship``): how the
    per-passage scores are aggregated, chosen on validation claims, and its calibration on test claims."""
    if not shipped.get("calibration"):
        return []
    from langchain_selfrag.restraint.calibration import Calibration

    cal = Calibration.from_dict(shipped["calibration"])
    test = shipped.get("test") or {}
    losses = ", ".join(f"{how} {loss:.3f}" for how, loss in (shipped.get("validation_log_loss") or {}).items())
    agree = test.get("agreement_calibrated_gt_0.5") or {}
    return [(f"Claim probabilities (`{CALIBRATION_FILE}`, `{shipped.get('made_by', '?')}`): aggregate "
             f"**{cal.aggregate}** over the first {shipped.get('passages_per_claim', '?')} passages, chosen by the "
             f"lowest log loss on the validation claims ({losses}), then Platt scaling; a claim with no passage "
             f"gets p = {cal.no_evidence:.4f}. On the {test.get('n', '?')} test claims: ECE "
             f"{test.get('ece_max_uncalibrated', float('nan')):.3f} (best-passage IsSup, uncalibrated) → "
             f"{test.get('ece_calibrated', float('nan')):.3f}, log loss {test.get('log_loss_max_uncalibrated', float('nan')):.3f} → "
             f"{test.get('log_loss_calibrated', float('nan')):.3f}, p > 0.5 agrees with the label on "
             f"{agree.get('agree', '?')}/{agree.get('n', '?')}."), ""]


def distractors_lines(report: Mapping[str, Any]) -> list[str]:
    """Invented people given a real person's passages (``--invented-distractors``): there is evidence
    to read, so an abstention is restraint judging the claims, not the no-evidence probability."""
    if not report.get("systems"):
        return []
    from langchain_selfrag.evaluation.bio.report import markdown_table

    return [(f"Invented people given a real (training-split) person's passages (`{RESTRAINT_DISTRACTORS_REPORT}`, "
             "`selfrag eval bio --invented-distractors`): the claims now have passages to be judged against, so an "
             "abstention is `restrain` rejecting them by IsSup, not the calibrated no-evidence probability that "
             "decides when there are no passages:"),
            "", *markdown_table(report["systems"], "invented", (report.get("run") or {}).get("utility_rhos", []), False),
            ""]


def build_of_model_file(name: str | None, rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The build whose evaluated GGUF file is ``name`` (the file name carries the adapter's hash)."""
    return next((str(r.get("build")) for r in rows if name and (r.get("figures") or {}).get("model_file") == name), None)


def recipe_text(recipe: Mapping[str, Any], rows: Sequence[Mapping[str, Any]] = ()) -> str | None:
    """One paragraph on what the restraint recipe ran, from the ``recipe`` block of its summary."""
    if not recipe:
        return None
    build = build_of_model_file(recipe.get("policy_model_file"), rows)
    parts = [f"Measured with build **{build}** as the policy, the training start and the judge." if build else
             f"Measured with `{recipe.get('policy_model_file')}` as the policy, the training start and the judge."]
    for key, label in (("research", "ReSearch data"), ("research_eval", "ReSearch inference (`research`)")):
        r = recipe.get(key)
        if r:
            parts.append(f"{label}: {r['questions']} entities, {r['iterations']} iterations, "
                         f"{r['samples_per_question']:g} samples per entity with the abstention "
                         f"(method {r.get('method')}, ρ\\* = {r.get('rho')}); the abstention was the best sample "
                         f"for {r['abstention_best']}.")
    trained = recipe.get("training") or {}
    for name, t in trained.items():
        beta = f", β {t['beta']:g}" if t.get("beta") is not None else ""
        parts.append(f"{name.upper()}: {t['steps']} steps × {t['batch']}, lr {t['learning_rate']:g}{beta}, "
                     f"{t['minutes']:g} min.")
    missing = [n.upper() for n in RESTRAINT_TRAINED if n not in trained]
    if missing:
        parts.append(f"Not trained in this run: {', '.join(missing)}.")
    return " ".join(parts)


def retrieval_text(systems: Mapping[str, Mapping[str, Any]]) -> str | None:
    """How often the Self-RAG systems chose to retrieve (``retrieved_share`` of the report)."""
    shares = {name: e.get("retrieved_share") for name, e in systems.items() if name.startswith("selfrag")}
    shares = {name: v for name, v in shares.items() if v is not None}
    if not shares:
        return None
    described = systems.get("selfrag", {}).get("description") or "Self-RAG"
    low, high = min(shares.values()), max(shares.values())
    span = f"{low:.0%}" if low == high else f"{low:.0%} to {high:.0%}"
    return (f"The Self-RAG systems ({described}) chose to retrieve for {span} of the questions; "
            "`restrain` judges the claims against the passages the answer used, else the entity's given passages.")
