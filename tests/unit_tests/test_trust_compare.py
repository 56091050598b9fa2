"""Comparing two trust-suite runs kind by kind (``benchmarks/trust_compare.py``), without a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.record import load
from benchmarks.trust_compare import by_source, compare, main, overall


def run(kind: str, part: str, i: int, right: bool, isrel: float = 0.9) -> dict:
    """One record: an answerable question answered (right or wrong) or another part abstained on (or not)."""
    answerable = part == "answerable"
    abstained = right if not answerable else False
    answer = ("42" if right else "7") if answerable else ("I cannot answer" if abstained else "Paris")
    trace = [{"source": "a.md", "passage": 0, "text": answer, "isrel": isrel, "issup": 1.0, "chosen": True}]
    return {"kind": kind, "split": "test", "part": part, "question": f"{part}-{i}", "answers": ["42"] if answerable else [],
            "source": "a.md" if answerable else None, "answer": answer, "abstained": abstained,
            "cited": [] if abstained else ["a.md"], "trace": trace,
            "signals": {"abstained": abstained, "abstain_reason": None, "retrieved": True, "source": True,
                        "trace": [{"passage": 0, "isrel": isrel, "issup": 1.0, "chosen": True}]}}


def kind_runs(kind: str, rights: dict[str, list[bool]]) -> list[dict]:
    return [run(kind, part, i, r) for part, flags in rights.items() for i, r in enumerate(flags)]


def test_a_clear_win_a_clear_loss_and_a_draw_are_told_apart() -> None:
    a = kind_runs("docs", {"answerable": [False] * 30, "off_topic": [True] * 30}) + \
        kind_runs("news", {"answerable": [True] * 30, "off_topic": [True] * 30}) + \
        kind_runs("invented", {"answerable": [True, False] * 10, "off_topic": [True] * 20})
    b = kind_runs("docs", {"answerable": [True] * 25 + [False] * 5, "off_topic": [True] * 30}) + \
        kind_runs("news", {"answerable": [False] * 30, "off_topic": [True] * 30}) + \
        kind_runs("invented", {"answerable": [False, True] * 10, "off_topic": [True] * 20})
    result = compare(a, b, n_resamples=500)
    docs, news, invented = (result["kinds"][k] for k in ("docs", "news", "invented"))
    assert docs["parts"]["answerable"] == {"n": 30, "a": 0, "b": 25}
    assert docs["difference"]["value"] == pytest.approx(25 / 30 / 2) and docs["verdict"] == "better"
    assert news["verdict"] == "worse"
    assert invented["difference"]["value"] == 0 and invented["verdict"] == "no clear difference"
    assert not result["b_better_on_every_kind"] and result["b_worse_on_some_kind"]
    assert overall(result) == "B worse on news (better on docs)"
    without_news = {**result, "kinds": {k: v for k, v in result["kinds"].items() if k != "news"},
                    "b_worse_on_some_kind": False}
    assert overall(without_news) == "B better on docs and worse on none"
    assert overall({**without_news, "kinds": {"invented": invented}}) == "no clear difference on any kind"


def test_one_question_more_is_not_a_win() -> None:
    a = kind_runs("docs", {"answerable": [True] * 10 + [False] * 10, "near_miss": [True] * 15})
    b = kind_runs("docs", {"answerable": [True] * 11 + [False] * 9, "near_miss": [True] * 15})
    assert compare(a, b, n_resamples=1000)["kinds"]["docs"]["verdict"] == "no clear difference"


def test_a_run_can_be_replayed_at_a_calibrations_bars() -> None:
    a = kind_runs("docs", {"answerable": [True] * 20, "off_topic": [True] * 20})
    b = [dict(r, abstained=False, answer="Paris", cited=["a.md"],
              signals=dict(r["signals"], abstained=False)) if r["part"] == "off_topic" else r for r in a]
    for r in b:  # B answered every off-topic question, each on a passage it judged IsRel 0.3
        if r["part"] == "off_topic":
            r["signals"]["trace"] = [dict(t, isrel=0.3) for t in r["signals"]["trace"]]
    assert compare(a, b, n_resamples=200)["kinds"]["docs"]["verdict"] == "worse"
    # at IsRel 0.5 those answers are abstentions, and the answerable ones (IsRel 0.9) still stand
    assert compare(a, b, b_bars=(0.5, 0.0), n_resamples=200)["kinds"]["docs"]["difference"]["value"] == 0


def test_runs_of_different_questions_are_refused(tmp_path: Path) -> None:
    a = kind_runs("docs", {"answerable": [True] * 3})
    b = kind_runs("docs", {"answerable": [True] * 4})
    with pytest.raises(SystemExit, match="different questions"):
        compare(a, b)
    # a run made before the suite gained a question compares on the questions both asked
    assert compare(a, b, shared_only=True, n_resamples=0)["kinds"]["docs"]["parts"]["answerable"]["n"] == 3
    with pytest.raises(SystemExit, match="different questions"):
        compare(a, kind_runs("news", {"answerable": [True]}), shared_only=True)
    for name, records in (("a", a), ("b", a)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "--json", str(tmp_path / "cmp.json"), "--resamples", "50"]) == 0
    written = load(tmp_path / "cmp.json")
    assert written["figures"]["kinds"]["docs"]["verdict"] == "no clear difference"
    assert written["benchmark"] == "trust_compare" and written["settings"]["resamples"] == 50
    with pytest.raises(SystemExit, match="no records.jsonl"):
        main([str(tmp_path / "a"), str(tmp_path / "missing")])
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SystemExit, match="not an abstention calibration"):
        main([str(tmp_path / "a"), str(tmp_path / "b"), "--b-calibration", str(tmp_path / "bad.json")])


def test_the_ranking_compares_each_runs_own_confidence_apart_from_the_bars() -> None:
    rights = {"answerable": [True, False] * 20, "off_topic": [True] * 20, "noise_only": [True] * 10}
    a = kind_runs("docs", rights)
    b = [dict(r) for r in a]
    for r in a:  # A: the same confidence for every answer, so its ranking is no better than chance
        r["confidence"] = 0.5
    for r in b:  # B: its right answers first
        r["confidence"] = 0.9 if r["part"] == "answerable" and r["answer"] == "42" else 0.1
    ranking = compare(a, b, n_resamples=300)["kinds"]["docs"]["ranking"]
    assert ranking["n"] == 60  # noise-only runs repeat answerable questions: left out, as in the summary
    assert ranking["aurc"]["b"] < ranking["aurc"]["a"] and ranking["verdict"] == "better"
    assert compare(b, a, n_resamples=300)["kinds"]["docs"]["ranking"]["verdict"] == "worse"
    same = compare(a, a, n_resamples=300)["kinds"]["docs"]["ranking"]
    assert same["difference"] == {"value": 0.0, "ci95": [0.0, 0.0]} and same["verdict"] == "no clear difference"
    # the bars move what is handled right, never the ranking
    assert compare(a, b, b_bars=(0.95, 0.0), n_resamples=300)["kinds"]["docs"]["ranking"] == ranking


def test_each_part_is_also_counted_per_source_document(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = kind_runs("squad", {"unanswerable": [True] * 4})
    for i, r in enumerate(a):
        r["source"] = "Warsaw.txt" if i < 3 else "Normans.txt"
    b = [dict(r, abstained=False, signals=dict(r["signals"], abstained=False)) if r["source"] == "Warsaw.txt" else r for r in a]
    assert by_source(a, b) == {"squad": {"Normans.txt": {"unanswerable": {"n": 1, "a": 1, "b": 1}},
                                         "Warsaw.txt": {"unanswerable": {"n": 3, "a": 3, "b": 0}}}}
    for name, records in (("a", a), ("b", b)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "--by-source", "--resamples", "20"]) == 0
    assert "Warsaw.txt: unanswerable 3->0/3" in capsys.readouterr().out
