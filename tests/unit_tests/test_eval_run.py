"""Full ``selfrag eval`` runs on tiny data sets: report structure, numbers, resume and errors."""

from __future__ import annotations

import json
import re

import pytest
from eval_rows import run_eval

from langchain_selfrag.abstention import DEFAULT_BARS
from langchain_selfrag.evaluation import cli
from langchain_selfrag.evaluation.qa.systems import SYSTEMS
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment


def make_fake() -> FakeReflectionLM:
    """Questions 0 and 1 ask to retrieve (p=0.9), question 2 does not (p=0.05).

    The Rome passage is judged relevant but unsupported and has the more probable text, so it
    wins only when IsSup is left out of the score (or when it is the top-1 passage).
    """
    return FakeReflectionLM(
        retrieve=lambda prompt: 0.9 if ("Eiffel" in prompt or "Hamlet" in prompt) else 0.05,
        passages={
            "Eiffel Tower is in Paris": FakeSegment("Paris.", isrel=0.9, issup="full"),
            "Shakespeare": FakeSegment("Shakespeare wrote it.", isrel=0.9, issup="full"),
            "Rome": FakeSegment("Rome.", isrel=0.9, issup="none", logprob=-0.05),
            "four": FakeSegment("4", isrel=0.9, issup="partial"),
        },
        default=FakeSegment("unknown", isrel=0.1, issup="none"),
        no_retrieval=FakeSegment("I am not sure.", isrel=None, isuse=2),
    )


def test_full_eval_report_structure_and_numbers(monkeypatch, dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_eval(monkeypatch, make_fake(), dataset, "--out", out, "--model", "fake") == 0
    report = json.loads((out / "report.json").read_text())
    assert set(report["systems"]) == set(SYSTEMS)
    for entry in report["systems"].values():
        assert entry["n"] == 3
        assert {
            "match",
            "exact_match",
            "f1",
            "retrieval_frequency",
            "latency_p50_s",
            "latency_p95_s",
            "citation_precision_issup",
            "citation_recall_gold",
        } <= set(entry["metrics"])
        assert entry["metrics"]["errors"] == 0
    m = {name: entry["metrics"] for name, entry in report["systems"].items()}
    expected = {  # (match, retrieval frequency), worked out from the fake's script
        "no_retrieval": (0.0, 0.0),
        "plain_rag": (2 / 3, 1.0),  # top-1 of question 1 is Rome
        "selfrag_always": (1.0, 1.0),
        "selfrag_adaptive": (2 / 3, 2 / 3),  # question 2 is answered without retrieval
        "ablation_top1": (1 / 3, 2 / 3),
        "ablation_no_issup": (0.0, 2 / 3),  # unsupported Rome wins both retrieved questions
        "ablation_hard_constraints": (2 / 3, 2 / 3),
    }
    for name, (match, freq) in expected.items():
        assert m[name]["match"] == pytest.approx(match), name
        assert m[name]["retrieval_frequency"] == pytest.approx(freq), name
    # EM / F1 of selfrag_always: "Paris." (1, 1), "Shakespeare wrote it." (0, 0.5), "4" (1, 1)
    assert m["selfrag_always"]["exact_match"] == pytest.approx(2 / 3)
    assert m["selfrag_always"]["f1"] == pytest.approx(2.5 / 3)
    # gold-judged citations: the Math passage says "four", not the gold "4"
    assert m["selfrag_always"]["citation_recall_gold"] == pytest.approx(2 / 3)
    assert m["plain_rag"]["citation_precision_issup"] is None  # no critique in plain RAG

    threshold = {row["delta"]: row for row in report["sweeps"]["threshold"]}
    assert threshold[0.2]["quality"] == pytest.approx(m["selfrag_adaptive"]["match"])
    assert threshold[0.2]["retrieval_frequency"] == pytest.approx(m["selfrag_adaptive"]["retrieval_frequency"])
    assert threshold[0.0]["retrieval_frequency"] == 1.0 and threshold[1.0]["retrieval_frequency"] == 0.0
    issup = {row["w_sup"]: row for row in report["sweeps"]["issup_weight"]}
    assert issup[0.0]["match"] == pytest.approx(1 / 3) and issup[1.0]["match"] == 1.0
    assert (out / "sweep_threshold.png").stat().st_size > 1000
    assert (out / "sweep_issup.png").stat().st_size > 1000
    table = (out / "report.md").read_text()
    assert re.search(r"\| selfrag_always \| 3 \| 100\.0 \| 66\.7 \| 83\.3 \|", table)
    assert "| ablation_no_issup | 3 | 0.0 |" in capsys.readouterr().out


def test_resume_runs_only_unfinished_questions(monkeypatch, dataset, tmp_path):
    out = tmp_path / "run"
    args = (dataset, "--out", out, "--model", "fake", "--systems", "plain_rag,selfrag_always", "--no-sweeps")
    assert run_eval(monkeypatch, make_fake(), *args) == 0
    first = json.loads((out / "report.json").read_text())
    again = make_fake()
    assert run_eval(monkeypatch, again, *args) == 0
    assert again.calls == []  # everything was finished
    # forget the last answer of one system: only that one is recomputed
    path = out / "predictions" / "selfrag_always.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:2]) + '{"id": "2", "answ')  # torn line
    third = make_fake()
    assert run_eval(monkeypatch, third, *args) == 0
    prompts = [p for kind, (ps, *_) in third.calls for p in ps]
    assert prompts and all("2+2" in p for p in prompts)
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["0", "1", "2"]
    report = json.loads((out / "report.json").read_text())
    assert report["systems"]["selfrag_always"]["n"] == 3

    def quality(metrics):
        return {k: v for k, v in metrics.items() if not k.startswith("latency")}

    assert quality(report["systems"]["selfrag_always"]["metrics"]) == quality(
        first["systems"]["selfrag_always"]["metrics"]
    )


def test_resume_refuses_a_different_model(monkeypatch, dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_eval(monkeypatch, make_fake(), dataset, "--out", out, "--model", "a", "--systems", "plain_rag") == 0
    assert run_eval(monkeypatch, make_fake(), dataset, "--out", out, "--model", "b", "--systems", "plain_rag") == 2
    assert "different model" in capsys.readouterr().err


def test_bad_inputs_exit_cleanly(monkeypatch, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "a", "answers": ["b"]}\n{"question": \n')
    assert run_eval(monkeypatch, make_fake(), bad, "--out", tmp_path / "o") == 2
    assert "bad.jsonl:2: invalid JSON" in capsys.readouterr().err
    good = tmp_path / "qa.jsonl"
    good.write_text('{"question": "a", "answers": ["b"]}\n')
    assert run_eval(monkeypatch, make_fake(), good, "--systems", "nope", "--out", tmp_path / "o") == 2
    assert "unknown system(s): nope" in capsys.readouterr().err
    # plain JSONL has no passages to pool: retrieval systems need --corpus
    assert run_eval(monkeypatch, make_fake(), good, "--out", tmp_path / "o", "--model", "m") == 2
    assert "--corpus" in capsys.readouterr().err


def test_shared_model_cache_changes_nothing_but_time(monkeypatch, dataset, tmp_path):
    cached, plain = tmp_path / "cached", tmp_path / "plain"
    fake_a, fake_b = make_fake(), make_fake()
    assert run_eval(monkeypatch, fake_a, dataset, "--out", cached, "--model", "f", "--no-sweeps") == 0
    assert run_eval(monkeypatch, fake_b, dataset, "--out", plain, "--model", "f", "--no-sweeps", "--no-cache") == 0

    def answers(out):
        return {
            p.stem: [json.loads(line)["answer"] for line in p.read_text().splitlines()]
            for p in sorted((out / "predictions").glob("*.jsonl"))
        }

    assert answers(cached) == answers(plain)
    # the ablations replay adaptive Self-RAG's model calls instead of repeating them
    assert len(fake_a.calls) < len(fake_b.calls) / 2


def test_caching_lm_replays_and_counts():
    from langchain_selfrag.evaluation.common.cache import CachingLM

    fake = make_fake()
    lm = CachingLM(fake)
    first = lm.generate(["p1", "p2"], max_new_tokens=5)
    again = lm.generate(["p2", "p3"], max_new_tokens=5)
    assert [g.text for g in again][0] == first[1].text
    assert fake.calls_of("generate")[-1][0] == ["p3"]  # only the new prompt reached the model
    assert (lm.hits, lm.misses) == (1, 3)
    lm.generate(["p1"], max_new_tokens=6)  # other arguments are another entry
    assert lm.misses == 4
    again[0].text = "mutated"
    assert lm.generate(["p2"], max_new_tokens=5)[0].text == first[1].text
    lm.clear()
    lm.candidate_probs(["p1"], ["[Retrieval]", "[No Retrieval]"])
    assert lm.has_reflection_vocab and lm.calls is fake.calls


def test_threshold_flag_reaches_the_chain(monkeypatch, dataset, tmp_path):
    out = tmp_path / "run"
    assert (
        run_eval(
            monkeypatch,
            make_fake(),
            dataset,
            "--out",
            out,
            "--model",
            "f",
            "--threshold",
            "0.95",
            "--systems",
            "selfrag_adaptive",
            "--no-sweeps",
        )
        == 0
    )
    report = json.loads((out / "report.json").read_text())
    assert report["systems"]["selfrag_adaptive"]["metrics"]["retrieval_frequency"] == 0.0  # p=0.9 < 0.95
    assert report["run"]["settings"] == {"k": 5, "threshold": 0.95, **DEFAULT_BARS}  # the model has no calibration


def test_select_examples():
    from langchain_selfrag.evaluation.common.selection import select_examples
    from langchain_selfrag.evaluation.qa.data import Example

    examples = [Example(id=str(i), question=f"q{i}") for i in range(10)]
    assert [e.id for e in select_examples(examples, limit=3)] == ["0", "1", "2"]
    sample = select_examples(examples, sample=4, seed=1)
    assert len(sample) == 4 and sample == select_examples(examples, sample=4, seed=1)
    assert [int(e.id) for e in sample] == sorted(int(e.id) for e in sample)  # file order kept
    with pytest.raises(ValueError):
        select_examples(examples, limit=0)


def test_selfrag_cli_registers_eval(monkeypatch, dataset, tmp_path):
    from langchain_selfrag import cli as selfrag_cli

    monkeypatch.setattr(cli, "load_model", lambda path: make_fake())
    out = tmp_path / "run"
    argv = ["eval", str(dataset), "--out", str(out), "--model", "f", "--systems", "plain_rag", "--quiet"]
    assert selfrag_cli.main(argv) == 0
    assert json.loads((out / "report.json").read_text())["systems"]["plain_rag"]["n"] == 3


def test_model_cache_passes_sampling_through_uncached():
    from langchain_selfrag.evaluation.common.cache import CachingLM
    from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment

    fake = FakeReflectionLM(no_retrieval=FakeSegment("plain", isrel=None, variants=("one", "two", "three")))
    cached = CachingLM(fake)
    prompts = ["### Instruction:\nq\n\n### Response:\n"] * 6
    sampled = [g.text for g in cached.generate(prompts, temperature=1.0, seed=3)]
    assert sampled == [g.text for g in fake.generate(prompts, temperature=1.0, seed=3)]
    assert len(set(sampled)) > 1 and cached.hits == 0
    greedy = cached.generate(prompts[:1]), cached.generate(prompts[:1])
    assert greedy[0][0].answer == greedy[1][0].answer == "plain" and cached.hits == 1


def test_an_empty_pool_is_an_eval_error_the_cli_reports(tmp_path):
    from langchain_selfrag.evaluation.common.errors import EvalError
    from langchain_selfrag.evaluation.qa.retrieval import RetrievalSetupError, pooled_store

    with pytest.raises(EvalError, match="no passages to pool") as info:
        pooled_store([], tmp_path / "store", embeddings=None)
    assert isinstance(info.value, RetrievalSetupError)
