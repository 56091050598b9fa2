"""The restraint recipe's summary for the model card is computed from the run's files."""

from __future__ import annotations

import json

import pytest

from cookbook.restraint_smollm2.summarize import research_summary, summarize, training_summary


def _research(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _sample(iteration, eu, abstain=False):  # iterations count from 1; the abstention is -1
    return {"iteration": -1 if abstain else iteration, "text": "" if abstain else "A claim.", "claims": [] if abstain else [{"p": 0.4}],
            "expected_utility": eu, "abstain": abstain}


def test_research_summary_counts_abstention_best(tmp_path):
    path = tmp_path / "research.jsonl"
    _research(path, [
        {"entity": "Orla", "method": "research", "rho": 0.5,
         "samples": [_sample(1, -0.2), _sample(3, -0.1), _sample(3, 0.0, abstain=True)]},
        {"entity": "Bram", "method": "research", "rho": 0.5,
         "samples": [_sample(1, 0.8), _sample(2, 0.1), _sample(2, 0.0, abstain=True)]},
    ])
    summary = research_summary(path)
    assert summary == {"file": "research.jsonl", "questions": 2, "method": "research", "rho": 0.5, "iterations": 3,
                       "samples_per_question": 3.0, "abstention_best": 1}
    assert research_summary(tmp_path / "missing.jsonl") is None


def test_summarize_writes_report_with_recipe(tmp_path):
    run, card = tmp_path / "run", tmp_path / "card"
    (run / "eval").mkdir(parents=True)
    card.mkdir()
    with pytest.raises(SystemExit, match="report.json"):
        summarize(run, card)
    (run / "eval" / "report.json").write_text(json.dumps({"run": {"model": "/x/m-1.gguf"}, "systems": {}}))
    (run / "eval" / "bio_tradeoff.png").write_bytes(b"png")
    (run / "dpo" / "adapter").mkdir(parents=True)
    (run / "dpo" / "adapter" / "selfrag_training.json").write_text(json.dumps(
        {"method": "dpo", "steps": 6, "seconds": 90, "examples": 20, "questions": 5,
         "config": {"batch_size": 4, "grad_accum": 2, "learning_rate": 5e-5, "beta": 0.25}}))
    out = json.loads(summarize(run, card).read_text())
    assert out["recipe"]["policy_model_file"] == "m-1.gguf" and out["recipe"]["research"] is None
    assert out["recipe"]["training"] == {"dpo": training_summary(run / "dpo")}
    assert out["recipe"]["training"]["dpo"]["batch"] == 8 and out["recipe"]["training"]["dpo"]["minutes"] == 1.5
    assert (card / "restraint_tradeoff.png").read_bytes() == b"png"


def test_calibration_fit_chooses_on_validation_and_reports_on_test(tmp_path):
    from cookbook.restraint_smollm2.calibrate import fit
    from langchain_selfrag.restraint.calibration import Calibration

    def row(split, label, issup, isrel):
        return {"entity": "E", "split": split, "claim": "c", "label": label, "issup": issup, "isrel": isrel}

    # true claims are supported by the relevant passage; false ones only by an irrelevant one, which "max" believes
    rows = []
    for split in ("validation", "test"):
        rows += [row(split, True, [0.9, 0.2], [0.9, 0.1])] * 6 + [row(split, True, [0.4, 0.1], [0.9, 0.1])] * 2
        rows += [row(split, False, [0.1, 0.9], [0.9, 0.1])] * 6 + [row(split, False, [0.3, 0.2], [0.9, 0.1])] * 2
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps({"claims": "labels.jsonl", "model": "m.gguf", "rows": rows}))
    report = fit(scores, tmp_path / "out")
    losses = report["validation_log_loss"]
    assert report["chosen_aggregate"] == min(losses, key=losses.get)  # the lowest validation log loss
    assert report["chosen_aggregate"] in ("relevance", "joint")  # an aggregate that reads IsRel wins here
    assert max(losses["relevance"], losses["joint"]) < losses["max"]
    cal = Calibration.from_dict(report["calibration"])
    assert cal.model == "m.gguf" and report["no_evidence_p"] == pytest.approx(cal(0.0)) and cal(0.0) < 0.5
    test = report["test"]
    assert test["ece_calibrated"] < test["ece_max_uncalibrated"] and report["n_test"] == 16
    assert report["issup_judge_agreement"]["test"]["false_positive"] == 6  # max IsSup > 0.5 for the false six
    assert (tmp_path / "out" / "calibration.json").is_file() and (tmp_path / "out" / "reliability.png").is_file()
