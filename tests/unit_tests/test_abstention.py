"""Abstention by default when the evidence is absent, the paper preset, and corrective retrieval.

Fast tests drive the graph with ``FakeReflectionLM`` (the reflection tokens are scripted) over a
real BM25 retriever on the invented corpus ``tests/data/invented_corpus.json``, and rewrite with
langchain_core's fake chat model. The slow test runs the bundled model end to end over the same
corpus, indexed into the embedded Chroma store, through ``SelfRAGChain`` with the defaults.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import tool

import pytest

from langchain_selfrag.abstention import (
    BUNDLED_FILE,
    DEFAULT_BARS,
    AbstentionCalibration,
    CalibrationError,
    sidecar_path,
)
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.config import SelfRAGConfig
from langchain_selfrag.evaluation.qa import abstention as A
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment
from langchain_selfrag.graph import ABSTAIN_ANSWER, SelfRAGContext, compile_graph
from langchain_selfrag.graph.nodes.corrective import as_documents, round_plan

ROOT = Path(__file__).resolve().parents[2]
CORPUS = json.loads((Path(__file__).resolve().parents[1] / "data" / "invented_corpus.json").read_text())
DOCS = [Document(d["text"], metadata={"source": d["source"]}) for d in CORPUS["documents"]]
BUNDLE = ROOT / "langchain_selfrag" / "models" / "selfrag-smollm2-135m"


class BM25Docs(BaseRetriever):
    """BM25 (``training.selfrag.bm25``) over Documents, as a LangChain retriever."""

    docs: list[Document]
    k: int = 2

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        from training.selfrag.bm25 import BM25Retriever
        from training.selfrag.qa_data import Passage

        passages = [Passage(str(i), "", d.page_content) for i, d in enumerate(self.docs)]
        return [self.docs[int(p.id)] for p in BM25Retriever(passages)(query, self.k)]


def bm25(k: int = 2) -> BM25Docs:
    return BM25Docs(docs=DOCS, k=k)


def clock_lm(**kw: Any) -> FakeReflectionLM:
    """Judges only the Dunmore Clock document relevant (and answers from it)."""
    kw.setdefault("retrieve", 0.9)
    return FakeReflectionLM(passages={"Old Tamsin": FakeSegment("Old Tamsin.", isrel=0.97)},
                            default=FakeSegment("A guess.", isrel=0.05, issup="partial"),
                            no_retrieval=FakeSegment("Big Ben.", isrel=None, isuse=4), **kw)


# -- the defaults and the paper preset ------------------------------------------------------------
def test_bars_default_to_the_models_calibration_and_paper_never_abstains_on_evidence(tmp_path: Path) -> None:
    cfg = SelfRAGConfig()
    assert (cfg.abstain_isrel, cfg.abstain_issup, cfg.abstain_closed_book) == (None, None, True)
    # the bundled model's calibration was fitted on the trust suite's validation part, for its file only
    shipped = AbstentionCalibration.load(BUNDLE / BUNDLED_FILE)
    assert shipped.fitted_on["set"].startswith("trust suite, validation part")
    assert set(shipped.expected["handled"]) == {"answerable", "near_miss", "off_topic"}
    bundled_lm = clock_lm()
    bundled_lm.model_path = str(tmp_path / shipped.model)
    chain_config = SelfRAGChain(bundled_lm, bm25()).config
    assert (chain_config.abstain_isrel, chain_config.abstain_issup) == (shipped.abstain_isrel, shipped.abstain_issup)
    other = clock_lm()
    other.model_path = str(tmp_path / "someone-elses-model.gguf")
    assert (SelfRAGChain(other, bm25()).config.abstain_isrel, SelfRAGChain(other, bm25()).config.abstain_issup) == (
        DEFAULT_BARS["abstain_isrel"], DEFAULT_BARS["abstain_issup"])
    # a calibration beside the model file wins; explicit bars win over both
    AbstentionCalibration("someone-elses-model.gguf", 0.35, 0.05).save(sidecar_path(other.model_path))
    assert SelfRAGChain(other, bm25()).config.abstain_isrel == 0.35
    assert SelfRAGChain(other, bm25(), SelfRAGConfig(abstain_isrel=0.9)).config.abstain_isrel == 0.9
    paper = SelfRAGConfig.paper()
    assert (paper.abstain_isrel, paper.abstain_issup, paper.abstain_closed_book) == (0.0, 0.0, False)
    assert SelfRAGChain(other, bm25(), paper).config.abstain_isrel == 0.0
    assert SelfRAGConfig.paper(k=2).k == 2 and SelfRAGConfig.paper(k=2).abstain_isrel == 0.0


def test_a_calibration_fitted_for_another_file_is_an_error(tmp_path: Path) -> None:
    lm = clock_lm()
    lm.model_path = str(tmp_path / "mine.gguf")
    AbstentionCalibration("theirs.gguf", 0.4, 0.1).save(sidecar_path(lm.model_path))
    with pytest.raises(CalibrationError, match="fitted for theirs.gguf") as err:
        SelfRAGChain(lm, bm25())
    # the CLI prints a SelfRAGError as one line that says what to do, not a traceback
    from langchain_selfrag.errors import SelfRAGError

    assert isinstance(err.value, SelfRAGError) and "selfrag calibrate" in str(err.value)


def test_abstains_by_default_when_no_passage_is_relevant_and_paper_answers() -> None:
    question = "Which lamp was first lit at the estuary?"  # BM25 finds the lighthouse, not the clock
    out = SelfRAGChain(clock_lm(), bm25()).invoke(question)
    assert out["abstained"] and out["answer"] == ABSTAIN_ANSWER and out["citations"] == []
    assert "judged relevant" in out["abstain_reason"] and "IsRel >=" in out["abstain_reason"]
    chosen = [t for t in out["trace"] if t["chosen"]]
    assert len(chosen) == 1 and not chosen[0]["selected"] and chosen[0]["isrel"] < DEFAULT_BARS["abstain_isrel"]
    paper = SelfRAGChain(clock_lm(), bm25(), SelfRAGConfig.paper()).invoke(question)
    assert not paper["abstained"] and paper["answer"] == "A guess."
    answered = SelfRAGChain(clock_lm(), bm25()).invoke("What is the bell of the Dunmore Clock called?")
    assert not answered["abstained"] and answered["answer"] == "Old Tamsin."
    assert [d.metadata["source"] for d in answered["citations"]] == ["dunmore_clock.txt"]


def test_abstains_when_the_selected_answer_is_unsupported() -> None:
    lm = FakeReflectionLM(retrieve=0.9, default=FakeSegment("Maybe 1764.", isrel=0.9, issup="none"))
    out = SelfRAGChain(lm, bm25(), SelfRAGConfig(abstain_issup=0.5)).invoke("When was the Dunmore Clock built?")
    assert out["abstained"] and "not supported" in out["abstain_reason"] and "IsSup >= 0.5" in out["abstain_reason"]
    assert not SelfRAGChain(lm, bm25(), SelfRAGConfig.paper()).invoke("When was the Dunmore Clock built?")["abstained"]


def test_closed_book_answers_abstain_by_default_when_a_source_was_there() -> None:
    lm = clock_lm(retrieve=0.05)  # the model chooses not to retrieve
    out = SelfRAGChain(lm, bm25()).invoke("What is the capital of Canada?")
    assert out["abstained"] and not out["retrieved"] and "without retrieval" in out["abstain_reason"]
    assert "0.05" in out["abstain_reason"]
    for chain in (SelfRAGChain(lm, bm25(), SelfRAGConfig.paper()), SelfRAGChain(lm, None),
                  SelfRAGChain(lm, bm25(), SelfRAGConfig(mode="never"))):
        got = chain.invoke("What is the capital of Canada?")
        assert not got["abstained"] and got["answer"] == "Big Ben."


def test_offline_sweep_reproduces_the_graph_decision() -> None:
    """``would_abstain`` on the trace of a paper-preset run says what the defaults do."""
    lms = [clock_lm(), clock_lm(retrieve=0.05),
           FakeReflectionLM(retrieve=0.9, default=FakeSegment("Maybe.", isrel=0.9, issup="none")),
           FakeReflectionLM(retrieve=0.9, default=FakeSegment("", isrel=0.9))]
    questions = ["Which lamp was first lit at the estuary?", "What is the bell of the Dunmore Clock called?"]
    for lm in lms:
        for q in questions:
            for cfg in (SelfRAGConfig(), SelfRAGConfig(abstain_issup=0.5), SelfRAGConfig(abstain_isrel=0.99)):
                paper = SelfRAGChain(lm, bm25(), SelfRAGConfig.paper()).invoke(q)
                chain = SelfRAGChain(lm, bm25(), cfg)
                online = chain.invoke(q)
                bars = chain.config  # None bars filled with the model's (here the documented defaults)
                offline = A.would_abstain(A.signals(paper), bars.abstain_isrel, bars.abstain_issup,
                                          bars.abstain_closed_book)
                assert offline == online["abstained"], (q, cfg, online["abstain_reason"])


# -- corrective retrieval -------------------------------------------------------------------------
def test_round_plan_puts_rewrites_first_and_the_fallback_last_within_the_bound() -> None:
    assert round_plan(3, rewrite=True, fallback=True, retriever=True) == ["rewrite", "fallback"]
    assert round_plan(2, rewrite=True, fallback=True, retriever=True) == ["rewrite"]
    assert round_plan(4, rewrite=True, fallback=False, retriever=True) == ["rewrite"] * 3
    assert round_plan(3, rewrite=True, fallback=True, retriever=False) == ["fallback"]
    assert round_plan(1, rewrite=True, fallback=True, retriever=True) == []
    assert round_plan(5, rewrite=False, fallback=False, retriever=True) == []


def rounds_of(out: dict) -> list[dict]:
    return [t for t in out["trace"] if t.get("kind") == "retrieval_round"]


def test_rewrite_retrieves_again_and_answers_from_the_new_round() -> None:
    rewriter = FakeListChatModel(responses=["Dunmore Clock bell"])
    chain = SelfRAGChain(clock_lm(), bm25(k=1), rewrite=rewriter)
    out = chain.invoke("Which lamp was first lit at the estuary?")
    assert not out["abstained"] and out["answer"] == "Old Tamsin."
    assert [d.metadata["source"] for d in out["citations"]] == ["dunmore_clock.txt"]
    rounds = rounds_of(out)
    assert [(r["round"], r["source"], r["relevant"]) for r in rounds] == [(1, "retriever", False), (2, "rewrite", True)]
    assert rounds[1]["query"] == "Dunmore Clock bell"
    assert {t["round"] for t in out["trace"] if t.get("kind") is None} == {1, 2}
    from langchain_selfrag.cli import format_result

    assert "round 2 (rewrite): 'Dunmore Clock bell' -> 1 passage(s), best IsRel 0.97" in format_result(out)
    # The default config off: no rewrite without a rewriter, and the trace has no round entries.
    plain = SelfRAGChain(clock_lm(), bm25(k=1)).invoke("Which lamp was first lit at the estuary?")
    assert plain["abstained"] and rounds_of(plain) == []


def test_rounds_are_bounded_and_all_failing_rounds_abstain() -> None:
    rewriter = FakeListChatModel(responses=["Orlan canal locks", "Kesh marsh birds", "Siskin choir", "Tovar glass"])
    calls: list[str] = []
    original = rewriter.invoke
    object.__setattr__(rewriter, "invoke", lambda prompt, *a, **kw: calls.append(prompt) or original(prompt, *a, **kw))
    out = SelfRAGChain(clock_lm(), bm25(k=1), SelfRAGConfig(max_retrieval_rounds=3), rewrite=rewriter).invoke(
        "Which lamp was first lit at the estuary?")
    assert out["abstained"] and "judged relevant" in out["abstain_reason"]
    assert [r["round"] for r in rounds_of(out)] == [1, 2, 3] and len(calls) == 2
    assert "Orlan canal locks" in calls[1]  # the second rewrite is told what was tried
    one = SelfRAGChain(clock_lm(), bm25(k=1), SelfRAGConfig(max_retrieval_rounds=1),
                       rewrite=FakeListChatModel(responses=["Dunmore Clock bell"])).invoke(
        "Which lamp was first lit at the estuary?")
    assert one["abstained"] and [r["round"] for r in rounds_of(one)] == [1]


def test_fallback_tool_is_tried_after_the_rewrite_and_rounds_stream() -> None:
    @tool
    def web_search(query: str) -> str:
        """Search the web."""
        return "The Dunmore Clock's bell is called Old Tamsin."

    rewriter = FakeListChatModel(responses=["Orlan canal"])
    chain = SelfRAGChain(clock_lm(), bm25(k=1), rewrite=rewriter, fallback_retriever=web_search)
    chunks = list(chain.stream("Which lamp was first lit at the estuary?"))
    out = chunks[0]
    for chunk in chunks[1:]:
        out = out + chunk
    assert not out["abstained"] and out["answer"] == "Old Tamsin."
    assert [r["source"] for r in rounds_of(out)] == ["retriever", "rewrite", "fallback"]
    assert out["citations"][0].page_content.startswith("The Dunmore Clock's bell")
    events: list[dict] = []

    async def collect() -> None:
        async for ev in chain.astream_events("Which lamp was first lit at the estuary?", version="v2"):
            if ev["event"] == "on_custom_event" and ev["data"].get("event") == "retrieval_round":
                events.append(ev["data"])

    import asyncio

    asyncio.run(collect())
    assert [(e["round"], e["source"]) for e in events] == [(2, "rewrite"), (3, "fallback")]


def test_corrective_retrieval_in_the_graph_context_with_a_fallback_retriever_only() -> None:
    web = Document("The first lamp lit at the estuary was called Old Tamsin.", metadata={"source": "web"})
    fallback = BM25Docs(docs=[web], k=1)
    ctx = SelfRAGContext(lm=clock_lm(), retriever=bm25(k=1), fallback_retriever=fallback)
    out = compile_graph().invoke({"question": "Which lamp was first lit at the estuary?"}, context=ctx,
                                 config={"recursion_limit": 64})
    assert not out["abstained"] and [r["source"] for r in rounds_of(out)] == ["retriever", "fallback"]


def test_tool_outputs_become_documents() -> None:
    docs = as_documents([{"content": "A", "url": "http://x"}, "B", Document("C"), {"content": ""}])
    assert [d.page_content for d in docs] == ["A", "B", "C"] and docs[0].metadata["source"] == "http://x"


def test_cli_paper_flag_and_corrective_flags() -> None:
    from langchain_selfrag.cli import _settings, build_parser

    paper = SelfRAGConfig.from_mapping(_settings(build_parser().parse_args(["ask", "q", "--paper", "--k", "2"])))
    assert paper == SelfRAGConfig.paper(k=2)
    args = build_parser().parse_args(["ask", "q", "--closed-book", "--max-retrieval-rounds", "2",
                                      "--fallback-store", "x"])
    cfg = SelfRAGConfig.from_mapping(_settings(args))
    assert not cfg.abstain_closed_book and cfg.max_retrieval_rounds == 2 and args.fallback_store == "x"
    assert cfg.abstain_isrel == SelfRAGConfig().abstain_isrel


def test_model_card_renders_the_abstention_section_from_the_report_files(tmp_path: Path) -> None:
    from cookbook.selfrag_smollm2.abstention import choose
    from cookbook.selfrag_smollm2.card.abstention import abstention_section

    assert abstention_section(tmp_path) == []
    sets = {"squad": [{"signals": {"retrieved": True, "source": True, "abstained": False, "trace": [
                {"passage": 0, "isrel": 0.9, "issup": 1.0, "chosen": True}]}, "match": True}],
            "squad_noise": [{"signals": {"retrieved": True, "source": True, "abstained": False, "trace": [
                {"passage": 0, "isrel": 0.2, "issup": 1.0, "chosen": True}]}, "match": None}]}
    rows = A.sweep(sets)
    best = choose(rows, ["squad_noise"])
    assert best["abstain_isrel"] == 0.25 and best["squad_noise"]["abstain_rate"] == 1.0  # the lowest bar that rejects
    chosen = {"abstain_isrel": best["abstain_isrel"], "abstain_issup": 0.0, "abstain_closed_book": True, "rule": "r",
              "at_choice": {k: v for k, v in best.items() if isinstance(v, dict)}, "closed_book": {}}
    (tmp_path / "abstention_thresholds.json").write_text(json.dumps(chosen))
    text = "\n".join(abstention_section(tmp_path))
    assert "`abstain_isrel=0.25`" in text and "| same questions, noise-only passages | 1 | 1.000 (1/1) | - |" in text

    # the shipped calibration sets the defaults; the held-out figures at them are the sweep's row at its bars
    AbstentionCalibration("m.gguf", 0.95, 0.0, rule="balanced", fitted_on={
        "questions": {"answerable": 4, "near_miss": 3, "off_topic": 2}, "set": "trust suite, validation part (docs)"},
        expected={"handled": {"answerable": 0.5, "near_miss": 1.0, "off_topic": 1.0}, "coverage": 0.25,
                  "selective_accuracy": 1.0, "bars_off": {"handled": {"answerable": 0.75, "near_miss": 0.0,
                                                                      "off_topic": 0.0}}}).save(tmp_path / BUNDLED_FILE)
    heldout = {"n": 1, "sample": "s", "how": "h", "thresholds": {"abstain_isrel": 0.25, "abstain_issup": 0.0},
               "defaults": {"match": 1.0, "abstained_or_empty": 0.0, "negative_rejection": 1.0, "abstained": 0,
                            "abstained_right_answers": 0, "abstained_wrong_answers": 0},
               "paper": {"match": 1.0, "negative_rejection": 0.0}, "sweep": rows}
    (tmp_path / "abstention_eval.json").write_text(json.dumps(heldout))
    text = "\n".join(abstention_section(tmp_path))
    assert "Defaults `abstain_isrel=0.95`, `abstain_issup=0`" in text and "fitted for `m.gguf`" in text
    assert "| near miss: abstained | 3 | 1.000 | 0.000 |" in text
    assert "| through the chain | defaults 0.95 / 0 | earlier bars 0.25 / 0 | paper preset |" in text
    # at IsRel 0.95 the one answerable run (IsRel 0.9) is abstained on: match 0, abstained 1
    assert "| answer match | 0.000 | 1.000 | 1.000 |" in text and "| abstained or empty, answerable | 1.000 | 0.000 |" in text


def _run(isrel: float) -> dict[str, Any]:
    return {"retrieved": True, "source": True, "abstained": False,
            "trace": [{"passage": 0, "isrel": isrel, "issup": 1.0, "chosen": True}]}


def test_retrieval_ceiling_counts_answerable_questions_retrieval_left_noise_only() -> None:
    from cookbook.selfrag_smollm2.abstention import retrieval_ceiling
    from cookbook.selfrag_smollm2.card.abstention import ceiling_lines

    # four answerable questions, one of which retrieval missed (its best IsRel is noise-like)
    answerable = [{"id": str(i), "signals": _run(v), "match": True} for i, v in enumerate((0.9, 0.8, 0.7, 0.2))]
    noise = [{"id": str(i), "signals": _run(v), "match": None} for i, v in enumerate((0.1, 0.2, 0.4, 0.65))]
    retrieved = {"0": True, "1": True, "2": True, "3": False}
    out = retrieval_ceiling(answerable, noise, retrieved, 0.0, isrel_bars=(0.3, 0.5, 0.75))
    assert out["answer_not_retrieved"] == 1 and out["share"] == 0.25
    assert out["floor_at_rejection_0.95"] == 0.95 * 0.25
    by_bar = {r["abstain_isrel"]: r for r in out["by_isrel_bar"]}
    assert by_bar[0.3] == {"abstain_isrel": 0.3, "negative_rejection": 0.5, "abstained_answer_not_retrieved": 1.0,
                           "abstained_answerable": 0.25, "floor_from_retrieval": 0.125}
    assert by_bar[0.75]["negative_rejection"] == 1.0 and by_bar[0.75]["abstained_answerable"] == 0.5
    text = "\n".join(ceiling_lines(out))
    assert "For 1 of the 4 answerable questions (0.250)" in text and "| 0.5 | 0.750 | 1.000 | 0.250 | 0.188 |" in text


def test_model_card_renders_the_real_world_check(tmp_path: Path) -> None:
    from cookbook.selfrag_smollm2.card.abstention import realworld_lines

    assert realworld_lines({}) == []
    ev = {"seed": 1, "questions": {"popqa": 2, "hotpotqa": 1},
          "corpora": {"test": {"documents": 6, "defaults": {"n": 3, "abstained": 3, "highest_isrel": 0.41},
                               "restraint": {"n": 3, "abstained": 2, "settings": {"rho": 0.5}},
                               "answerable_defaults": {"n": 4, "right": 4}, "answerable_paper": {"n": 4, "right": 3}}}}
    text = "\n".join(realworld_lines(ev))
    assert "2 popqa, 1 hotpotqa questions (seed 1)" in text
    assert "| test, used for no choice (6 documents) | 3/3 | 2/3 | 0.410 | 4/4 / 3/4 |" in text


def test_compare_builds_applies_the_selection_rule_to_each_build(tmp_path: Path) -> None:
    from cookbook.selfrag_smollm2.abstention import compare_builds

    def write(name: str, answerable: tuple[float, ...], noise: tuple[float, ...]) -> Path:
        lines = [{"set": "squad", "id": str(i), "signals": _run(v), "match": True} for i, v in enumerate(answerable)]
        lines += [{"set": "squad_noise", "id": str(i), "signals": _run(v)} for i, v in enumerate(noise)]
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(json.dumps(line) for line in lines))
        return path

    # build "a" separates answerable from noise-only; build "b" judges one answerable passage like noise
    out = compare_builds({"a": write("a", (0.9, 0.8, 0.7), (0.1, 0.2, 0.3)),
                          "b": write("b", (0.9, 0.8, 0.2), (0.1, 0.2, 0.3))})
    a, b = out["a"], out["b"]
    assert a["rejection_sets"] == ["squad_noise"]
    assert a["bars_off"]["squad"]["match"] == 1.0 and a["bars_off"]["squad_noise"]["abstain_rate"] == 0.0
    # "a" rejects every noise-only question at no cost; "b" cannot lose a right answer, so it rejects less
    assert a["chosen"]["squad"]["match"] == 1.0 and a["chosen"]["squad_noise"]["abstain_rate"] == 1.0
    assert b["chosen"]["squad"]["match"] == 1.0 and b["chosen"]["squad_noise"]["abstain_rate"] < 1.0
    assert b["chosen"]["abstain_isrel"] <= 0.2


def test_squad_validation_leaves_out_later_phases_and_refuses_when_nothing_is_left() -> None:
    """Validation questions must be unseen: phase 1's sample and the questions of the --trained files
    are left out, and a build whose phases trained on them all has no validation sample at all."""
    import pytest

    from cookbook.selfrag_smollm2.abstention import squad_questions
    from training.selfrag.qa_data import Passage, QAItem, SquadCorpus

    questions = [QAItem(f"q{i}", f"question {i}?", ["x"], article="A", gold=[f"p{i}"]) for i in range(10)]
    corpus = SquadCorpus([Passage(f"p{i}", "A", f"text {i}", article="A") for i in range(10)], questions)
    split = {"train_articles": ["A"], "heldout_articles": [], "train_questions_used": 4, "seed": 0}
    phase1 = {q.id for q in questions} - {q.id for q in squad_questions(corpus, split, "validation", 10, 0)}
    assert len(phase1) == 4
    later = frozenset([q.id for q in questions if q.id not in phase1][:4])
    rest = squad_questions(corpus, split, "validation", 10, 0, trained=later)
    assert {q.id for q in rest} == {q.id for q in questions} - phase1 - later and len(rest) == 2
    with pytest.raises(ValueError, match="no answerable question .* left for validation"):
        squad_questions(corpus, split, "validation", 10, 0, trained=frozenset(q.id for q in questions))


def test_gate_fails_a_candidate_that_rejects_less_anywhere_or_loses_answers() -> None:
    from cookbook.selfrag_smollm2.abstention import gate

    def build(noise: float, unanswerable: float, squad: float, invented: float) -> dict:
        return {"rejection_sets": ["squad_noise", "invented_unanswerable"],
                "chosen": {"squad_noise": {"abstain_rate": noise}, "invented_unanswerable": {"abstain_rate": unanswerable},
                           "squad": {"match": squad, "abstain_rate": 0.1},
                           "invented_answerable": {"match": invented, "abstain_rate": 0.0}}}

    result = {"shipped": build(0.75, 0.33, 0.687, 0.933),
              "better": build(0.80, 1.00, 0.670, 0.933),  # match 0.017 lower: within MAX_LOST
              "trade": build(0.57, 1.00, 0.707, 0.933),  # more on average, less noise-only rejection
              "same": build(0.75, 0.33, 0.687, 0.933),
              "loses": build(0.80, 1.00, 0.660, 0.867)}
    verdicts = gate(result, "shipped")
    assert verdicts["better"] == []
    assert verdicts["trade"] == ["squad_noise rejected 0.570 < 0.750"]
    assert verdicts["same"] == ["mean rejection 0.540 is not above 0.540"]
    assert verdicts["loses"] == ["squad match 0.660 < 0.687 - 0.02", "invented_answerable match 0.867 < 0.933"]
    assert "shipped" not in verdicts
