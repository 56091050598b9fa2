"""Bars for chat models without a calibration of their own: fitted over several chat models' trust-suite
runs (``benchmarks/chat_model_bars.py``) and taken by the chain for a ``ChatReflectionLM`` with none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import benchmarks.chat_model_bars as bars_bench
from benchmarks.chat_model_bars import evaluate, load_runs, main
from langchain_selfrag.abstention import (
    CHAT_MODELS_FILE,
    CHAT_MODELS_NAME,
    DEFAULT_BARS,
    AbstentionCalibration,
    bars_for,
    chat_models_calibration,
    sidecar_path,
)
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.fakes import FakeLogprobsChatModel, FakeReflectionLM
from langchain_selfrag.graph import ABSTAIN_ANSWER
from langchain_selfrag.lm import ChatReflectionLM
from langchain_selfrag.lm.question_layout import QuestionLayoutLM

RELEVANCE = "no retrieved passage was judged relevant (best IsRel {:.2f}; the bar is IsRel >= 0.5)"


def record(split: str, part: str, n: int, isrel: float) -> dict:
    """A run of the generic bars (0.5, 0.25) whose one passage got ``isrel``; an answerable question's
    answer holds its gold answer and cites its document."""
    answer = "It needs Python 3.9." if part == "answerable" else "It needs Python 4.0."
    trace = [{"source": "fastcsv.md", "passage": 0, "text": answer, "answer": answer, "isrel": isrel, "issup": 0.9,
              "isuse": 0.5, "score": 1.0, "chosen": True, "dropped": False}]
    abstained = isrel < 0.5
    reason = RELEVANCE.format(isrel) if abstained else None
    return {"kind": "docs", "split": split, "part": part, "question": f"{part} {n}",
            "answers": ["3.9"] if part == "answerable" else [], "source": "fastcsv.md",
            "answer": ABSTAIN_ANSWER if abstained else answer, "abstained": abstained, "reason": reason,
            "cited": [] if abstained else ["fastcsv.md"], "trace": trace, "bars": dict(DEFAULT_BARS),
            "closed_book": True, "signals": {"retrieved": True, "source": True, "abstained": abstained,
                                             "abstain_reason": reason, "trace": trace}}


def model_runs(answerable: float, near_miss: float) -> dict[str, list[dict]]:
    """Both parts of one model: four answerable questions and four near misses, each at its IsRel."""
    return {split: [record(split, "answerable", i, answerable) for i in range(4)]
            + [record(split, "near_miss", i, near_miss) for i in range(4)] for split in ("validation", "test")}


# Two models that separate near misses at IsRel 0.6 from answers at 0.9, and one sure of everything.
RUNS = {"a.gguf": model_runs(0.9, 0.6), "b.gguf": model_runs(0.9, 0.6), "sure.gguf": model_runs(0.97, 0.92)}


def test_pooled_bars_are_checked_on_each_model_with_bars_fitted_without_it() -> None:
    result = evaluate(RUNS)
    assert result["pooled_bars"] == {"abstain_isrel": 0.65, "abstain_issup": 0.0}  # the lowest bars that serve a and b
    sure = result["per_model"]["sure.gguf"]["test"]
    assert sure["left_out"]["abstain_isrel"] == 0.65 and sure["left_out"]["parts"]["near_miss"]["right"] == 0
    assert not sure["left_out"]["meets"]
    assert sure["own_validation"]["abstain_isrel"] == 0.95 and sure["own_validation"]["meets"]  # selfrag calibrate's
    assert sure["generic"]["parts"]["near_miss"]["right"] == 0  # IsRel 0.5 keeps every near miss
    a = result["per_model"]["a.gguf"]["test"]
    # fitted without a: on b and sure, whose near misses at 0.92 pull nothing up (a's answers at 0.9 count more)
    assert a["left_out"]["meets"] and a["left_out"]["parts"] == {
        "answerable": {"n": 4, "right": 4, "rate": 1.0}, "near_miss": {"n": 4, "right": 4, "rate": 1.0}}
    assert not a["generic"]["meets"]


def test_one_model_is_not_enough_to_fit_over_models() -> None:
    with pytest.raises(SystemExit, match="at least two"):
        evaluate({"a.gguf": RUNS["a.gguf"]})


def write_run(folder: Path, model: str, records: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"model": f"/cache/chat-models/local-{model}", "answer_form": "generated"}))
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_the_command_writes_the_shipped_file_with_the_left_out_figures(tmp_path: Path, monkeypatch, capsys) -> None:
    folders = [write_run(tmp_path / f"{m}-{s}", m, RUNS[m][s]) for m in RUNS for s in ("validation", "test")]
    assert load_runs(folders)["sure.gguf"]["test"] == RUNS["sure.gguf"]["test"]  # local-<file> named by its file
    shipped = tmp_path / "chat_models_calibration.json"
    monkeypatch.setattr(bars_bench, "CHAT_MODELS_FILE", shipped)
    assert main([*map(str, folders), "--write", "--json", str(tmp_path / "bars.json")]) == 0
    out = capsys.readouterr().out
    assert "pooled bars over 3 models: IsRel >= 0.65, IsSup >= 0" in out
    cal = AbstentionCalibration.load(shipped)
    assert (cal.model, cal.bars, cal.answer_form) == (CHAT_MODELS_NAME, {"abstain_isrel": 0.65, "abstain_issup": 0.0},
                                                      "generated")
    assert cal.fitted_on["models"] == ["a.gguf", "b.gguf", "sure.gguf"]
    assert cal.expected["test_part_bars_fitted_without_the_model"]["sure.gguf"] == {"answerable": 1.0, "near_miss": 0.0}
    figures = json.loads((tmp_path / "bars.json").read_text())["figures"]
    assert figures["pooled_bars"] == cal.bars and (tmp_path / "bars.png").stat().st_size > 0


def test_a_chat_model_without_a_calibration_takes_the_shipped_chat_model_bars(tmp_path: Path) -> None:
    shipped = chat_models_calibration()
    assert shipped.model == CHAT_MODELS_NAME and len(shipped.fitted_on["models"]) >= 3
    assert shipped.fitted_on["set"].startswith("trust suite, validation part")
    assert set(shipped.expected["test_part_bars_fitted_without_the_model"]) == set(shipped.fitted_on["models"])
    lm = ChatReflectionLM(FakeLogprobsChatModel(script=[]), calibration_dir=tmp_path)
    assert bars_for(lm) == (shipped.bars, "bars shipped for chat models (no calibration for this model)")
    config = SelfRAGChain(lm, lambda q: []).config
    assert (config.abstain_isrel, config.abstain_issup) == (shipped.abstain_isrel, shipped.abstain_issup)
    # its own calibration (what selfrag calibrate --chat-model writes) wins
    AbstentionCalibration(lm.model_path.name, 0.35, 0.05).save(sidecar_path(lm.model_path))
    assert SelfRAGChain(lm, lambda q: []).config.abstain_isrel == 0.35
    # a Self-RAG model without a calibration keeps the generic bars, in the paper's layout or asked questions
    other = FakeReflectionLM()
    other.model_path = str(tmp_path / "someone-elses-model.gguf")
    assert bars_for(other) == (DEFAULT_BARS, "defaults (no calibration for this model)")
    assert bars_for(QuestionLayoutLM(other)) == (DEFAULT_BARS, "defaults (no calibration for this model)")
    assert CHAT_MODELS_FILE.parent.name == "models"  # shipped as package data (pyproject: models/**/*)
