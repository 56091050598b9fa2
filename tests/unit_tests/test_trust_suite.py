"""The trust suite's data and scoring (``benchmarks/trust_suite.py``), without a model."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from benchmarks.trust_suite import (
    SUITE,
    NoiseOnlyRetriever,
    answer_right,
    candidate_ceiling,
    relevance_separation,
    summarize,
    suite_questions,
    would_be_answer,
)
from keyword_embeddings import KeywordEmbeddings
from langchain_selfrag.retrieval.formats import read_clean


@pytest.mark.parametrize("kind", ["docs", "news", "invented"])
@pytest.mark.parametrize("split", ["validation", "test"])
def test_every_answerable_question_is_stated_in_its_clean_document(kind: str, split: str, tmp_path: Path) -> None:
    docs, questions = suite_questions(kind, split, None, 0, 0)
    for name, text in docs.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    clean = {name: read_clean(tmp_path / name).text.lower() for name in docs}
    parts = Counter(q["part"] for q in questions)
    assert {"answerable", "near_miss", "off_topic", "noise_only"} <= set(parts)
    # every answerable question is asked again with the passages holding its answer filtered out
    assert ({(q["question"], q["source"]) for q in questions if q["part"] == "noise_only"}
            == {(q["question"], q["source"]) for q in questions if q["part"] == "answerable"})
    for q in questions:
        if q["part"] == "answerable":
            assert any(a.lower() in clean[q["source"]] for a in q["answers"]), q
        elif q["part"] == "near_miss" and q["source"] is not None:
            assert q["source"] in docs


def test_validation_and_test_parts_share_no_document_or_question() -> None:
    for kind in ("docs", "news"):
        val = {p.name for p in (SUITE / kind / "validation").iterdir()}
        test = {p.name for p in (SUITE / kind / "test").iterdir()}
        assert val and test and not val & test
    off = json.loads((SUITE / "off_topic.json").read_text())
    assert not set(off["validation"]) & set(off["test"])


def test_squad_validation_ships_with_the_suite_and_is_never_trained_on() -> None:
    from benchmarks.trust_suite import SQUAD_TEST_ARTICLES
    from cookbook.data.varied_data import KEEP_OUT_ARTICLES

    docs, questions = suite_questions("squad", "validation", None, 60, 0)  # no ../shared needed
    titles = {name.removesuffix(".txt") for name in docs}
    assert len(titles) == 10 and not titles & set(SQUAD_TEST_ARTICLES)
    assert titles <= set(KEEP_OUT_ARTICLES) and set(SQUAD_TEST_ARTICLES) <= set(KEEP_OUT_ARTICLES)
    for q in questions:
        if q["part"] in ("answerable", "noise_only"):
            assert any(a in docs[q["source"]] for a in q["answers"]), q
    assert Counter(q["part"] for q in questions) == {"off_topic": 40, "answerable": 60, "unanswerable": 30,
                                                     "noise_only": 60}
    assert len({q["source"] for q in questions if q["part"] == "answerable"}) >= 5  # a sample of all ten


def test_more_unanswerable_squad_questions_keep_the_smaller_sample() -> None:
    """``--n-squad-unanswerable`` extends the default sample: earlier runs' records stay valid (resumable)."""
    _, default = suite_questions("squad", "validation", None, 60, 0)
    _, more = suite_questions("squad", "validation", None, 60, 0, n_unanswerable=150)
    unanswerable = [q["question"] for q in more if q["part"] == "unanswerable"]
    assert len(unanswerable) == 150
    assert unanswerable[:30] == [q["question"] for q in default if q["part"] == "unanswerable"]
    assert [q for q in more if q["part"] != "unanswerable"] == [q for q in default if q["part"] != "unanswerable"]


def test_squad_test_part_needs_the_shared_data(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="needs ../shared/data"):
        suite_questions("squad", "test", tmp_path, 60, 0)


def test_held_out_dev_articles_join_the_validation_part_only(tmp_path: Path) -> None:
    """``--squad-holdout-articles``: dev-half articles a model was trained without validate beside the ten."""
    from tests.support.squad import squad_file

    squad_file(tmp_path).rename(tmp_path / "squad2_dev_half.json")
    docs, questions = suite_questions("squad", "validation", tmp_path, 60, 0, n_unanswerable=400,
                                      holdout=("Zorvian_Canal",))
    assert len(docs) == 11 and "Zorvian_Canal.txt" in docs
    assert any(q["source"] == "Zorvian_Canal.txt" and q["part"] == "unanswerable" for q in questions)
    with pytest.raises(ValueError, match="validation part only"):
        suite_questions("squad", "test", tmp_path, 60, 0, holdout=("Zorvian_Canal",))
    with pytest.raises(ValueError, match="test articles cannot validate: Normans"):
        suite_questions("squad", "validation", tmp_path, 60, 0, holdout=("Normans",))
    with pytest.raises(ValueError, match="not articles of .*: Nowhere"):
        suite_questions("squad", "validation", tmp_path, 60, 0, holdout=("Nowhere",))
    with pytest.raises(FileNotFoundError, match="needs ../shared/data"):
        suite_questions("squad", "validation", None, 60, 0, holdout=("Zorvian_Canal",))


def test_noise_only_retriever_drops_every_passage_holding_an_answer() -> None:
    docs = [Document("The dam was built in 1961."), Document("The dam holds back the Tesk."),
            Document("The dam is 40 metres tall.")]
    store = InMemoryVectorStore.from_documents(docs, KeywordEmbeddings())
    got = NoiseOnlyRetriever(store=store, answers=["1961"], k=5).invoke("When was the dam built?")
    assert got and all("1961" not in d.page_content for d in got)


def _record(part: str, abstained: bool, answer: str, cited: list[str], answers=(), source=None, chosen_text=""):
    trace = [{"source": source, "passage": 0, "text": chosen_text or answer, "isrel": 0.8, "issup": 0.9,
              "score": 1.0, "chosen": True}]
    return {"kind": "docs", "split": "validation", "part": part, "question": f"q-{part}-{answer}",
            "answers": list(answers), "source": source, "answer": answer, "abstained": abstained,
            "cited": cited, "confidence": 0.72, "trace": trace}


def test_summary_counts_each_part_against_its_bar() -> None:
    records = [
        _record("answerable", False, "pip install fastcsv", ["fastcsv.md"], ["pip install fastcsv"], "fastcsv.md"),
        _record("answerable", False, "pip install fastcsv", ["other.md"], ["pip install fastcsv"], "fastcsv.md"),
        _record("answerable", True, "I cannot answer", [], ["3.9"], "fastcsv.md", chosen_text="3.9"),
        _record("near_miss", True, "I cannot answer", [], source="fastcsv.md"),
        _record("off_topic", False, "Paris", ["fastcsv.md"]),
    ]
    entry = summarize(records, n_resamples=0)["kinds"]["docs"]
    assert entry["parts"]["answerable"] == {"n": 3, "right": 1, "rate": pytest.approx(1 / 3), "bar": 0.7, "holds": False}
    assert entry["parts"]["near_miss"]["right"] == 1 and entry["parts"]["off_topic"]["right"] == 0
    # the abstained answerable run would have been right: it counts in the risk-coverage curve
    assert would_be_answer(records[2]) == ("3.9", ["fastcsv.md"])
    assert answer_right(records[2], *would_be_answer(records[2]))
    assert not answer_right(records[1], records[1]["answer"], records[1]["cited"])  # the wrong document cited
    assert entry["selective"]["coverage"]["value"] == pytest.approx(3 / 5)
    # the reader's ceiling: right before abstention (the first and the abstained third), bars off
    assert entry["reader_ceiling"] == {"n": 3, "right": 2, "rate": pytest.approx(2 / 3)}


def test_candidate_ceiling_counts_a_question_any_candidate_answers_right_from_its_own_passage() -> None:
    def cand(i, source, answer, chosen=False, dropped=False):
        return {"source": source, "passage": i, "text": answer.split()[-1], "answer": answer, "isrel": 0.5,
                "issup": 0.5, "score": 1.0, "chosen": chosen, "dropped": dropped}

    rec = _record("answerable", True, "I cannot answer", [], ["3.9"], "fastcsv.md")
    wrong_first = {**rec, "trace": [cand(0, "fastcsv.md", "It needs 3.8", chosen=True), cand(1, "fastcsv.md", "Python 3.9")]}
    wrong_file = {**rec, "trace": [cand(0, "other.md", "Python 3.9", chosen=True)]}
    dropped = {**rec, "trace": [cand(0, "fastcsv.md", "It needs 3.8", chosen=True),
                                cand(1, "fastcsv.md", "Python 3.9", dropped=True)]}
    closed_book = {**rec, "trace": [{"source": None, "passage": None, "text": "3.9", "chosen": True}]}
    near = _record("near_miss", True, "I cannot answer", [], source="fastcsv.md")
    figures = candidate_ceiling([wrong_first, wrong_file, dropped, closed_book, near])
    assert figures == {"n": 4, "right": 1, "rate": pytest.approx(1 / 4)}  # only the second candidate of the first
    assert summarize([wrong_first], n_resamples=0)["kinds"]["docs"]["candidate_ceiling"]["right"] == 1
    assert summarize([wrong_first], n_resamples=0)["kinds"]["docs"]["reader_ceiling"]["right"] == 0


def test_relevance_separation_is_the_auc_of_the_best_isrel_per_part() -> None:
    def rec(part: str, *isrels: float | None) -> dict:
        trace = [{"source": "a.md", "passage": i, "text": "x", "isrel": v, "chosen": i == 0}
                 for i, v in enumerate(isrels)]
        return {**_record(part, True, "I cannot answer", []), "trace": trace}

    records = [rec("answerable", 0.2, 0.9), rec("answerable", 0.6), rec("near_miss", 0.7), rec("near_miss", 0.6),
               rec("off_topic", 0.1), rec("noise_only", None)]
    got = relevance_separation(records)
    # answerable best IsRel 0.9 and 0.6 against near misses 0.7 and 0.6: wins 1 + 1, a tie 0.5, a loss
    assert got == {"near_miss": {"n": 2, "auc": pytest.approx(2.5 / 4)}, "off_topic": {"n": 1, "auc": 1.0}}
    assert summarize(records, n_resamples=0)["kinds"]["docs"]["relevance_separation"] == got


def test_index_options_pass_the_chunking_to_selfrag_index_and_refuse_bad_values() -> None:
    from benchmarks.trust_suite import index_options

    assert index_options() == []  # the command's defaults, as a user indexes
    assert index_options(400, 50) == ["--chunk-size", "400", "--chunk-overlap", "50"]
    assert index_options(chunk_overlap=0) == ["--chunk-overlap", "0"]
    with pytest.raises(SystemExit, match="--chunk-size must be positive"):
        index_options(0)
    with pytest.raises(SystemExit, match="--chunk-overlap must be at least 0"):
        index_options(400, -1)


def test_parts_at_replays_other_bars_from_the_traces() -> None:
    from benchmarks.trust_suite import parts_at

    def with_signals(r: dict, isrel: float) -> dict:
        r["trace"][0]["isrel"] = isrel
        reason = "no retrieved passage was judged relevant (IsRel >= 0.9)" if r["abstained"] else None
        r["signals"] = {"abstained": r["abstained"], "abstain_reason": reason, "retrieved": True,
                        "source": "fastcsv.md", "trace": r["trace"]}
        return r

    records = [
        with_signals(_record("answerable", False, "pip install fastcsv", ["fastcsv.md"], ["pip install fastcsv"],
                             "fastcsv.md"), 0.95),
        with_signals(_record("answerable", True, "I cannot answer", [], ["3.9"], "fastcsv.md", chosen_text="3.9"), 0.7),
        with_signals(_record("near_miss", True, "I cannot answer", [], source="fastcsv.md", chosen_text="4.0"), 0.6),
        with_signals(_record("off_topic", False, "Paris", ["fastcsv.md"]), 0.2),
    ]
    assert parts_at(records, 0.9, 0.0)["docs"] == {"answerable": {"n": 2, "right": 1}, "near_miss": {"n": 1, "right": 1},
                                                  "off_topic": {"n": 1, "right": 1}}
    # lower bars: the abstained answerable run answers (right), the near miss answers too (wrong)
    assert parts_at(records, 0.5, 0.0)["docs"] == {"answerable": {"n": 2, "right": 2}, "near_miss": {"n": 1, "right": 0},
                                                  "off_topic": {"n": 1, "right": 1}}
    # bars off: nothing abstains on evidence
    assert parts_at(records, 0.0, 0.0)["docs"]["off_topic"] == {"n": 1, "right": 0}
