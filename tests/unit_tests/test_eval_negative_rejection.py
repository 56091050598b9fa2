"""``selfrag eval --negative-rejection`` on a SQuAD-format file: noise-only runs, the rejection rate
next to accuracy, and the abstention sweep with its plot."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from keyword_embeddings import KeywordEmbeddings

from langchain_selfrag import tokens as T
from langchain_selfrag.evaluation import cli
from langchain_selfrag.evaluation.qa import runner
from langchain_selfrag.evaluation.qa.metrics import match
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment

FACTS = [
    ("Denver", "Denver won Super Bowl fifty in Santa Clara.", "Who won Super Bowl fifty?", "Denver"),
    ("Warsaw", "Warsaw is the capital of Poland and lies on the Vistula.", "On which river does Warsaw lie?",
     "Vistula"),
    ("Harvard", "Harvard was founded in 1636 in Cambridge.", "When was Harvard founded?", "1636"),
    ("Normans", "The Normans came from Normandy in France.", "Where did the Normans come from?", "Normandy"),
]


def squad_file(path: Path) -> Path:
    data = []
    for title, context, question, answer in FACTS:
        qa = {"id": title, "question": question, "is_impossible": False,
              "answers": [{"text": answer, "answer_start": context.index(answer)}]}
        data.append({"title": title, "paragraphs": [{"context": context, "qas": [qa]}]})
    path.write_text(json.dumps({"version": "v2.0", "data": data}))
    return path


@dataclass(eq=False)
class AnswerAwareLM(FakeReflectionLM):
    """Judges a passage relevant (and answers right) only when it holds the asked question's answer."""

    def script_for(self, prompt: str) -> FakeSegment:
        if not prompt.endswith(T.PARAGRAPH_END):
            return self.no_retrieval
        evidence = self.evidence_of(prompt) or ""
        for _, _, question, answer in FACTS:
            if question in prompt and answer in evidence:
                return FakeSegment(f"{answer}.", isrel=0.95)
        return self.default


def fake_lm() -> FakeReflectionLM:
    return AnswerAwareLM(retrieve=0.9, default=FakeSegment("Paris.", isrel=0.1, issup="partial"))


def test_negative_rejection_reports_rejection_next_to_accuracy(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "default_embeddings", lambda: KeywordEmbeddings())
    monkeypatch.setattr(cli, "load_model", lambda path: fake_lm())
    out = tmp_path / "run"
    code = cli.main([str(squad_file(tmp_path / "squad.json")), "--out", str(out), "--model", "fake", "--k", "2",
                     "--systems", "plain_rag,selfrag_adaptive", "--negative-rejection", "--quiet"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    selfrag, plain = report["systems"]["selfrag_adaptive"], report["systems"]["plain_rag"]
    assert selfrag["metrics"]["match"] == 1.0 and selfrag["metrics"]["negative_rejection"] == 1.0
    assert plain["metrics"]["negative_rejection"] == 0.0 and selfrag["n_noise"] == plain["n_noise"] == len(FACTS)
    # Every noise-only question saw passages, none holding its answer.
    answers = {title: answer for title, _, _, answer in FACTS}
    for line in (out / "predictions" / "selfrag_adaptive@noise.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["n_passages"] == 2 and record["abstained"]
        passages = [t for t in record["trace"] if t["passage"] is not None]
        assert passages and not any(match(t["text"], [answers[record["id"]]]) for t in passages)
    rows = {(r["abstain_isrel"], r["abstain_issup"]): r for r in report["sweeps"]["abstention"]}
    off, mid = rows[(0.0, 0.0)], rows[(0.5, 0.0)]
    assert off["noise_only"]["abstain_rate"] == 0.0 and off["answerable"]["match"] == 1.0
    assert mid["noise_only"]["abstain_rate"] == 1.0 and mid["answerable"]["answer_rate"] == 1.0
    assert rows[(0.9, 0.0)]["answerable"]["match"] == 1.0  # the relevant passages score 0.95
    assert "sweep_abstention.png" in report["sweeps"]["plots"] and (out / "sweep_abstention.png").stat().st_size > 0
    markdown = (out / "report.md").read_text()
    assert "neg rej" in markdown and "Abstention bars" in markdown
    # trust as the field measures it: 4 answerable (answered right) + 4 noise-only runs (abstained)
    trust = selfrag["trust"]
    assert trust["n"] == 2 * len(FACTS) and trust["coverage"]["value"] == 0.5
    assert trust["selective_accuracy"]["value"] == 1.0 and trust["rejection_rate"]["value"] == 1.0
    assert trust["over_refusal"]["value"] == 0.0 and trust["f1_rg"]["value"] == 1.0
    assert trust["aurc"]["value"] == trust["aurc_optimal"]  # confidence 0.95 x IsSup vs 0.1 x IsSup: a perfect ranking
    assert "plain_rag" not in {n for n, e in report["systems"].items() if e.get("trust")}
    assert "risk_coverage.png" in report["sweeps"]["plots"] and (out / "risk_coverage.png").stat().st_size > 0
    assert "Trust (selective QA)" in markdown and "F1_RG" in markdown


def test_paper_flag_never_abstains(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "default_embeddings", lambda: KeywordEmbeddings())
    monkeypatch.setattr(cli, "load_model", lambda path: fake_lm())
    out = tmp_path / "run"
    assert cli.main([str(squad_file(tmp_path / "squad.json")), "--out", str(out), "--model", "fake", "--k", "2",
                     "--systems", "selfrag_adaptive", "--negative-rejection", "--paper", "--no-sweeps", "--quiet"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["systems"]["selfrag_adaptive"]["metrics"]["negative_rejection"] == 0.0
    assert report["run"]["settings"]["abstain_isrel"] == 0.0
