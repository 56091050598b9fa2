"""Where the trust suite's answers are lost (``benchmarks/trust_loss.py``), on hand-made records, without a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.documents import Document

from benchmarks.trust_loss import (
    STORE_DEPTH,
    format_loss_table,
    gold_ranks,
    loss_bucket,
    loss_table,
    rank_fields,
    reindexed_ranks,
    replay_misses,
    requoted,
    rescored,
)
from benchmarks.trust_suite import PARTS, main, record, summarize, with_run_settings
from langchain_selfrag.answer_sentence import quoted_answer
from langchain_selfrag.graph import ABSTAIN_ANSWER

BARS = {"abstain_isrel": 0.7, "abstain_issup": 0.25}
RELEVANCE = "no retrieved passage was judged relevant (best IsRel 0.60; the bar is IsRel >= 0.7)"
SUPPORT = "the selected answer is not supported by its passage (IsSup 0.10; the bar is IsSup >= 0.25)"


def cand(i: int | None, answer: str, isrel: float | None = 0.9, issup: float | None = 0.9, chosen: bool = False,
         source: str | None = "fastcsv.md") -> dict:
    return {"source": source if i is not None else None, "passage": i, "text": answer, "answer": answer,
            "isrel": isrel, "issup": issup, "isuse": 0.5, "score": 1.0, "chosen": chosen, "dropped": False}


def rec(trace: list[dict], *, abstained: bool = True, answer: str = ABSTAIN_ANSWER, cited: list[str] | None = None,
        part: str = "answerable", reason: str | None = None, read: list[int] | None = None,
        store: int | None = None, bars: dict | None = None) -> dict:
    """A record of the question "Which Python does fastcsv need?" (gold "3.9" in fastcsv.md)."""
    r = {"kind": "docs", "split": "validation", "part": part, "question": f"q{len(trace)}-{answer}-{reason}",
         "answers": ["3.9"] if part == "answerable" else [], "source": "fastcsv.md", "answer": answer,
         "abstained": abstained, "reason": reason, "cited": cited or [], "trace": trace,
         "bars": bars or BARS, "closed_book": True,
         "signals": {"retrieved": any(t["passage"] is not None for t in trace), "source": True,
                     "abstained": abstained, "abstain_reason": reason, "trace": trace}}
    if read is not None:
        r.update({"gold_ranks_read": read, "gold_rank_store": store, "store_depth": STORE_DEPTH})
    return r


RIGHT = rec([cand(0, "It needs Python 3.9.", chosen=True)], abstained=False, answer="It needs Python 3.9.",
            cited=["fastcsv.md"], read=[1], store=1)
WRONG_KEPT = rec([cand(0, "It needs Python 3.8.", chosen=True)], abstained=False, answer="It needs Python 3.8.",
                 cited=["fastcsv.md"], read=[1], store=1)
WRONG_FILE = rec([cand(0, "Python 3.9", chosen=True, source="other.md")], abstained=False, answer="Python 3.9",
                 cited=["other.md"], read=[], store=3)
CLOSED_BOOK = rec([cand(None, "3.9", isrel=None, issup=None, chosen=True)],
                  reason="the model chose to answer without retrieval ... a closed-book answer is not trusted")
NOT_READ = rec([cand(0, "It needs 3.8", isrel=0.5, chosen=True)], reason=RELEVANCE, read=[], store=12)
NOT_RANKED = rec([cand(0, "It needs 3.8", isrel=0.5, chosen=True)], reason=RELEVANCE)
JUDGED_IRRELEVANT = rec([cand(0, "3.8", isrel=0.9, issup=0.1, chosen=True), cand(1, "3.9", isrel=0.6)],
                        reason=SUPPORT, read=[2], store=2)
REFUSED_SUPPORT = rec([cand(0, "Python 3.9", issup=0.1, chosen=True)], reason=SUPPORT, read=[1], store=1)
RIGHT_ELSEWHERE = rec([cand(0, "Python 3.9", issup=0.1, chosen=True), cand(1, "3.7", isrel=0.8)],
                      reason=SUPPORT, read=[2], store=2)  # the right answer written from a chunk without it
MISREAD = rec([cand(0, "Python 3.8", issup=0.1, chosen=True)], reason=SUPPORT, read=[1], store=1)
OTHER_CHOSEN = rec([cand(0, "3.8", isrel=0.95, issup=0.1, chosen=True), cand(1, "3.9", isrel=0.8)],
                   reason=SUPPORT, read=[2], store=2)
NEAR_MISS_ABSTAINED = rec([cand(0, "4.0", isrel=0.3, chosen=True)], part="near_miss", reason=RELEVANCE)
NEAR_MISS_ANSWERED = rec([cand(0, "4.0", chosen=True)], part="near_miss", abstained=False, answer="4.0",
                         cited=["fastcsv.md"])


@pytest.mark.parametrize(("record_", "bucket"), [
    (RIGHT, "right"),
    (WRONG_KEPT, "wrong_kept"),
    (WRONG_FILE, "wrong_kept"),  # the answer without its document cited is not right
    (CLOSED_BOOK, "retrieval"),  # nothing read: no ranks needed
    (NOT_READ, "retrieval"),
    (NOT_RANKED, "not_ranked"),  # passages read, ranks never recorded: not guessed
    (JUDGED_IRRELEVANT, "judgement"),  # the gold chunk (passage 1) judged 0.6 < 0.7
    (REFUSED_SUPPORT, "support"),
    (RIGHT_ELSEWHERE, "support"),  # support is checked before reading
    (MISREAD, "reading"),
    (OTHER_CHOSEN, "judgement"),  # the gold chunk judged relevant and answered right, another chosen
    (NEAR_MISS_ABSTAINED, "abstained"),
    (NEAR_MISS_ANSWERED, "wrong_kept"),
])
def test_each_question_lands_in_one_bucket(record_: dict, bucket: str) -> None:
    assert loss_bucket(record_) == bucket


def test_with_the_isrel_bar_off_a_passage_is_relevant_at_the_models_own_half() -> None:
    misread = {**JUDGED_IRRELEVANT, "trace": [JUDGED_IRRELEVANT["trace"][0], cand(1, "3.7", isrel=0.6)]}
    assert loss_bucket(misread) == "judgement"  # 0.6 under the bar 0.7
    off = {**misread, "bars": {"abstain_isrel": 0.0, "abstain_issup": 0.25}}
    assert loss_bucket(off) == "reading"  # 0.6 over the model's own 0.5: relevant, its answer wrong
    assert loss_bucket({**off, "trace": [off["trace"][0], cand(1, "3.7", isrel=0.4)]}) == "judgement"


def test_gold_ranks_count_chunks_of_the_gold_document_holding_a_gold_answer() -> None:
    r = {"answers": ["Python 3.9"], "source": "fastcsv.md"}
    chunks = [("fastcsv.md", "Install it."), ("other.md", "Needs Python 3.9."), ("fastcsv.md", "Needs PYTHON 3.9!"),
              ("fastcsv.md", "python  3.9 or later")]
    assert gold_ranks(chunks, r) == [3, 4]
    assert gold_ranks(chunks, {**r, "source": None}) == [2, 3, 4]  # a question with no one document
    fields = rank_fields(chunks[:2], chunks, r)
    assert fields == {"gold_ranks_read": [], "gold_rank_store": 3, "store_depth": STORE_DEPTH}
    deep = [("fastcsv.md", "nothing")] * STORE_DEPTH + [("fastcsv.md", "Python 3.9")]
    assert rank_fields([], deep, r)["gold_rank_store"] is None  # below the top STORE_DEPTH: absent


def test_record_keeps_the_gold_ranks_read_and_in_the_store() -> None:
    q = {"part": "answerable", "question": "Which Python?", "answers": ["3.9"], "source": "fastcsv.md"}
    read = [Document("Install it.", metadata={"source": "/x/fastcsv.md"}),
            Document("Needs Python 3.9.", metadata={"source": "/x/fastcsv.md"})]
    out = {"answer": "3.9", "abstained": False, "retrieved": True, "passages": read, "citations": read[1:],
           "trace": [{"passage": 0, "text": "no", "isrel": 0.2}, {"passage": 1, "text": "3.9", "isrel": 0.9,
                                                                 "chosen": True}]}
    hits = [Document("Python 3.9 is needed", metadata={"source": "/x/other.md"}), *reversed(read)]
    got = record(q, out, hits)
    assert (got["gold_ranks_read"], got["gold_rank_store"]) == ([2], 2)
    assert "gold_ranks_read" not in record(q, out)  # no store given: nothing guessed
    assert "gold_ranks_read" not in record({**q, "answers": []}, out, hits)


def test_reindexed_ranks_only_when_the_search_reproduces_what_the_run_read() -> None:
    hits = [("other.md", "Install fastcsv."), ("fastcsv.md", "Needs Python 3.9."), ("fastcsv.md", "3.9 only")]
    r = {**NOT_RANKED, "trace": [cand(0, "x", source="other.md", chosen=True), cand(1, "3.9")]}
    assert reindexed_ranks(r, hits) == {"gold_ranks_read": [2], "gold_rank_store": 2, "store_depth": STORE_DEPTH}
    moved = {**r, "trace": [cand(0, "x", source="fastcsv.md"), cand(1, "3.9", source="other.md")]}
    assert reindexed_ranks(moved, hits) is None
    assert reindexed_ranks({**r, "trace": [cand(5, "x")]}, hits) is None  # read more than the search finds
    quoted = {**cand(1, "3.9"), "answer": "Needs Python 3.9."}  # the sentence quoted from the passage read
    assert reindexed_ranks({**r, "trace": [r["trace"][0], quoted]}, hits) is not None
    rechunked = {**quoted, "answer": "It needs Python 3.9 or later."}  # that passage is not the hit's chunk
    assert reindexed_ranks({**r, "trace": [r["trace"][0], rechunked]}, hits) is None
    assert reindexed_ranks(CLOSED_BOOK, hits)["gold_ranks_read"] == []  # read nothing


def test_requoting_quotes_each_judged_answer_from_the_passage_a_fresh_search_gives() -> None:
    hits = [("fastcsv.md", "Install it with pip. The reader needs Python 3.9 or later."), ("other.md", "Unrelated.")]
    given = {**RIGHT, "trace": [{**cand(0, "needs Python 3.9", chosen=True)}, cand(1, "", isrel=0.1, source="other.md")],
             "answer": "needs Python 3.9"}
    again = requoted(given, hits, quoted_answer)
    assert again["answer"] == "The reader needs Python 3.9 or later." == again["trace"][0]["answer"]
    assert again["trace"][0]["text"] == "needs Python 3.9" and again["trace"][1] == given["trace"][1]
    assert (again["abstained"], again["cited"]) == (given["abstained"], given["cited"])  # choice and bars: the run's
    held = {**given, "abstained": True, "answer": ABSTAIN_ANSWER}  # an abstention keeps its answer, its trace is quoted
    assert requoted(held, hits, quoted_answer)["answer"] == ABSTAIN_ANSWER
    unjudged = {**given, "trace": [cand(0, "needs Python 3.9", isrel=0.2, chosen=True)]}  # not cited: not quoted
    assert requoted(unjudged, hits, quoted_answer)["trace"][0]["answer"] == "needs Python 3.9"
    assert requoted(given, [("other.md", "Unrelated.")] * 2, quoted_answer) is None  # the search moved


def test_rescoring_replays_the_bars_with_the_graphs_own_rule() -> None:
    low = rec([cand(0, "Python 3.9", isrel=0.6, chosen=True)], reason=RELEVANCE, read=[1], store=1)
    assert loss_bucket(low) == "judgement"
    assert rescored(low, 0.7, 0.25) == {**low, "bars": BARS}  # the run's own bars: the run as it was
    given = rescored(low, 0.5, 0.25)
    assert (given["abstained"], given["answer"], given["cited"]) == (False, "Python 3.9", ["fastcsv.md"])
    assert loss_bucket(given) == "right"
    refused = rescored(RIGHT, 0.95, 0.25)  # IsRel 0.9 falls under a higher bar
    assert (refused["abstained"], refused["answer"], refused["cited"]) == (True, ABSTAIN_ANSWER, [])
    assert loss_bucket(refused) == "judgement"
    assert loss_bucket(rescored(RIGHT, 0.7, 0.95)) == "support"
    no_text = rec([cand(0, "", chosen=True)], reason="the model produced no answer text", read=[1], store=1)
    assert rescored(no_text, 0.0, 0.0)["abstained"]  # not an evidence abstention: no bars give an answer
    assert rescored(CLOSED_BOOK, 0.0, 0.0)["abstained"]  # closed book stays refused while closed_book is on
    assert not rescored({**CLOSED_BOOK, "closed_book": False}, 0.0, 0.0)["abstained"]
    assert replay_misses([low, RIGHT, no_text, CLOSED_BOOK]) == 0
    assert replay_misses([low, {**RIGHT, "bars": {"abstain_isrel": 0.95, "abstain_issup": 0.25}}]) == 1


def test_loss_table_counts_buckets_and_ranks_per_kind_and_part() -> None:
    answerable = [RIGHT, WRONG_KEPT, CLOSED_BOOK, NOT_READ, JUDGED_IRRELEVANT, REFUSED_SUPPORT, MISREAD, OTHER_CHOSEN]
    table = loss_table([*answerable, NEAR_MISS_ABSTAINED, NEAR_MISS_ANSWERED], ["docs"], PARTS)
    row = table["docs"]["answerable"]
    assert {k: row[k] for k in ("n", "right", "wrong_kept", "retrieval", "judgement", "reading", "support",
                                "not_ranked")} == {"n": 8, "right": 1, "wrong_kept": 1, "retrieval": 2, "judgement": 2,
                                                   "reading": 1, "support": 1, "not_ranked": 0}
    # seven ranked (the closed-book run has none); gold read by six; store ranks 1, 1, 12, 2, 1, 1, 2
    assert (row["ranked"], row["gold_read"]) == (7, 6)
    assert row["store"] == {"at_5": 6, "at_10": 6, "at_20": 7}
    assert row["ranks_from"] == {"run": 7, "not recorded": 1}
    assert table["docs"]["near_miss"] == {"n": 2, "abstained": 1, "wrong_kept": 1}
    lines = format_loss_table(table)
    assert lines[2] == "| docs | answerable | 8 | 1 | 1 | 2 | 2 | 1 | 1 | 0 | 6 of 7 ranked | 6 / 6 / 7 of 7 ranked |"
    assert lines[3] == "| docs | near_miss | 2 | abstained 1 | 1 |  |  |  |  |  |  |  |"


def test_records_without_ranks_say_not_recorded() -> None:
    table = loss_table([NOT_RANKED, CLOSED_BOOK], ["docs"], PARTS)
    assert table["docs"]["answerable"]["not_ranked"] == 1
    assert format_loss_table(table)[2].endswith("| not recorded | not recorded |")
    assert summarize([NOT_RANKED], n_resamples=0)["loss"] == loss_table([NOT_RANKED], ["docs"], PARTS)


def test_old_records_get_the_bars_their_run_used() -> None:
    old = [{k: v for k, v in NOT_READ.items() if k not in ("bars", "closed_book")}]
    model = "/nowhere/selfrag-uncalibrated.gguf"  # no calibration: the documented defaults
    assert with_run_settings(old, {"model": model})[0]["bars"] == {"abstain_isrel": 0.5, "abstain_issup": 0.25}
    paper = with_run_settings(old, {"model": model, "paper": True})[0]
    assert (paper["bars"], paper["closed_book"]) == ({"abstain_isrel": 0.0, "abstain_issup": 0.0}, False)
    assert with_run_settings([NOT_READ], {})[0]["bars"] == BARS  # recorded bars win
    with pytest.raises(SystemExit, match="no run.json"):
        with_run_settings(old, {})


def test_summarize_only_rescores_and_prints_the_loss_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    low = rec([cand(0, "Python 3.9", isrel=0.6, chosen=True)], reason=RELEVANCE, read=[1], store=1)
    records = [low, RIGHT, NEAR_MISS_ABSTAINED]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "run.json").write_text(json.dumps({"model": "/nowhere/m.gguf", "split": "validation"}))
    assert main(["--out", str(tmp_path), "--kinds", "docs", "--summarize-only"]) == 0
    assert "| docs | answerable | 2 | 1 | 0 | 0 | 1 |" in capsys.readouterr().out
    assert main(["--out", str(tmp_path), "--kinds", "docs", "--summarize-only", "--rescore-bars", "0.5,0.25"]) == 0
    printed = capsys.readouterr().out
    assert "re-scored at IsRel >= 0.5, IsSup >= 0.25" in printed
    summary = json.loads((tmp_path / "summary-at-0.5-0.25.json").read_text())
    assert summary["rescored_at"] == {"abstain_isrel": 0.5, "abstain_issup": 0.25, "own_bars_not_reproduced": 0}
    assert summary["loss"]["docs"]["answerable"]["right"] == 2
    assert summary["loss"]["docs"]["near_miss"] == {"n": 1, "abstained": 1, "wrong_kept": 0}  # IsRel 0.3
    assert json.loads((tmp_path / "summary.json").read_text())["loss"]["docs"]["answerable"]["right"] == 1
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "--summarize-only", "--rescore-bars", "0.5"])
