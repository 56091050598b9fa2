"""Full ``selfrag eval`` runs on tiny data sets: report structure, numbers, resume and errors."""

from __future__ import annotations

import json

from eval_rows import run_eval
from keyword_embeddings import KeywordEmbeddings

from langchain_selfrag.evaluation import cli
from langchain_selfrag.evaluation.qa import runner
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment


def test_pooled_retrieval_over_squad(monkeypatch, tmp_path):
    squad = {
        "version": "v2.0",
        "data": [
            {
                "title": "Football",
                "paragraphs": [
                    {
                        "context": "Denver won Super Bowl fifty in Santa Clara.",
                        "qas": [
                            {
                                "id": "a",
                                "question": "Who won Super Bowl fifty?",
                                "is_impossible": False,
                                "answers": [{"text": "Denver", "answer_start": 0}],
                            }
                        ],
                    },
                    {
                        "context": "The halftime show starred Coldplay and Beyonce.",
                        "qas": [
                            {"id": "b", "question": "Who won Super Bowl ninety?", "is_impossible": True, "answers": []}
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(squad))
    monkeypatch.setattr(runner, "default_embeddings", lambda: KeywordEmbeddings())
    fake = FakeReflectionLM(
        passages={"Denver won": FakeSegment("Denver", isrel=0.9)},
        default=FakeSegment("Coldplay", isrel=0.2, issup="none"),
        no_retrieval=FakeSegment("no idea", isrel=None),
    )
    out = tmp_path / "run"
    assert (
        run_eval(
            monkeypatch,
            fake,
            path,
            "--out",
            out,
            "--model",
            "fake",
            "--k",
            "1",
            "--systems",
            "no_retrieval,plain_rag,selfrag_always",
        )
        == 0
    )
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["retrieval"] == "pooled"
    assert (out / "chroma").is_dir()
    plain = {r["id"]: r for r in map(json.loads, (out / "predictions" / "plain_rag.jsonl").read_text().splitlines())}
    assert plain["a"]["citations"][0]["text"].startswith("Denver won")
    assert plain["a"]["answer"] == "Denver"
    m = report["systems"]["plain_rag"]["metrics"]
    assert m["match"] == 1.0 and m["retrieval_frequency"] == 1.0
    # one unanswerable question, never abstained on: recall 0, precision undefined
    assert m["abstention_rate"] == 0.0 and m["abstention_recall"] == 0.0 and m["abstention_precision"] is None
    # EM: "Denver" right; "Coldplay" on the unanswerable question wrong
    assert m["exact_match"] == 0.5


def test_tiny_reflection_model_end_to_end(tiny_model_dir, dataset, tmp_path):
    out = tmp_path / "run"
    code = cli.main(
        [
            str(dataset),
            "--out",
            str(out),
            "--model",
            str(tiny_model_dir),
            "--limit",
            "2",
            "--max-new-tokens",
            "4",
            "--systems",
            "no_retrieval,plain_rag,selfrag_always",
            "--quiet",
        ]
    )
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert {name: e["n"] for name, e in report["systems"].items()} == {
        "no_retrieval": 2,
        "plain_rag": 2,
        "selfrag_always": 2,
    }
    assert report["systems"]["no_retrieval"]["metrics"]["retrieval_frequency"] == 0.0
    assert report["systems"]["plain_rag"]["metrics"]["retrieval_frequency"] == 1.0
    assert report["systems"]["selfrag_always"]["metrics"]["retrieval_frequency"] == 1.0
    assert all(e["metrics"]["errors"] == 0 for e in report["systems"].values())
    assert len(report["sweeps"]["threshold"]) == 11
