"""How the trust suite scores how-to, explanation and instruction questions (gold sentences, token F1) beside
factoids (gold answers), and counts each type apart; on hand-made records, without a model."""

from __future__ import annotations

import pytest

from benchmarks.project_docs import judge
from benchmarks.trust_loss import answer_right, loss_bucket
from benchmarks.trust_suite import summarize, type_rates
from langchain_selfrag.evaluation.qa.metrics import EXPLAINED_F1, explanation_f1, token_f1
from langchain_selfrag.graph import ABSTAIN_ANSWER

WHY = ("Invoke disables bytecode caching as it can cause hard-to-debug problems with task files and offers no "
       "noticeable speed benefit.")
HOW = "Use a pty when executing shell commands."
#: Four gold sentences that together answer "Describe how the store keeps entries." (made up for the test).
STORE = ["Each entry stays for ten minutes.", "A full store drops its oldest entry first.",
         "Entries are kept in memory only.", "Restarting the program empties the store."]


def rec(answer: str, *, type_: str | None = None, sentences: list[str] | None = None, answers: list[str] | None = None,
        cited: tuple[str, ...] = ("invoke.rst",), abstained: bool = False, part: str = "answerable",
        kind: str = "docs") -> dict:
    """A record as ``trust_suite.record`` writes it, its one candidate chosen from invoke.rst."""
    trace = [{"source": "invoke.rst", "passage": 0, "text": answer, "answer": answer, "isrel": 0.9, "issup": 0.9,
              "isuse": 0.5, "score": 1.0, "chosen": True, "dropped": False}]
    r = {"kind": kind, "split": "validation", "part": part, "question": f"{type_}:{answer}",
         "answers": answers if answers is not None else ["bytecode caching"], "source": "invoke.rst",
         "answer": ABSTAIN_ANSWER if abstained else answer, "abstained": abstained,
         "cited": [] if abstained else list(cited),
         "trace": trace, "bars": {"abstain_isrel": 0.7, "abstain_issup": 0.25}, "closed_book": True,
         "signals": {"retrieved": True, "source": True, "abstained": abstained, "trace": trace},
         "gold_ranks_read": [1], "gold_rank_store": 1}
    if type_ is not None:
        r["type"] = type_
    if sentences is not None:
        r["sentences"] = sentences
    return r


def test_an_explanation_is_right_when_it_reads_as_its_gold_sentence_and_cites_its_document() -> None:
    said = "It disables bytecode caching because it can cause hard-to-debug problems with task files."
    assert token_f1(said, WHY) >= EXPLAINED_F1
    assert answer_right(rec(said, type_="explanation", sentences=[WHY]), said, ["invoke.rst"])
    # the short answer alone holds the gold phrase, as a factoid would count it, but does not explain
    assert not answer_right(rec("bytecode caching", type_="explanation", sentences=[WHY]), "bytecode caching",
                            ["invoke.rst"])
    # the right words from another document are not right
    assert not answer_right(rec(said, type_="explanation", sentences=[WHY]), said, ["other.rst"])


def test_factoids_keep_their_gold_answer_scoring() -> None:
    r = rec("It disables bytecode caching.")  # no type: a factoid
    assert answer_right(r, r["answer"], r["cited"])
    assert answer_right({**r, "type": "factoid"}, "bytecode caching", ["invoke.rst"])
    assert not answer_right(r, "It writes .pyc files.", ["invoke.rst"])
    assert not answer_right(r, "bytecode caching", ["other.rst"])


def test_several_gold_sentences_count_alone_or_together() -> None:
    both = " ".join(STORE)
    alone = STORE[1]
    assert all(token_f1(both, s) < EXPLAINED_F1 for s in STORE)  # the whole answer is too long for any one
    assert explanation_f1(both, STORE) == pytest.approx(1.0)
    assert explanation_f1(both, STORE, together=False) < EXPLAINED_F1
    r = rec(both, type_="instruction", sentences=STORE, answers=["oldest entry"])
    assert answer_right(r, both, ["invoke.rst"]) and answer_right(r, alone, ["invoke.rst"])
    assert explanation_f1("anything", []) == 0.0


def test_a_typed_question_without_gold_sentences_is_refused() -> None:
    with pytest.raises(ValueError, match="no gold sentences"):
        answer_right(rec(HOW, type_="howto"), HOW, ["invoke.rst"])


def test_project_docs_scores_with_the_same_function() -> None:
    row = {"kind": "answerable", "question": "How do I use a pty?",
           "answers": [{"source": "invoke.rst", "sentence": HOW}]}
    assert judge(row, False, HOW, ["invoke.rst"])["handled"]
    assert judge(row, False, "pty", ["invoke.rst"])["f1"] == round(explanation_f1("pty", [HOW]), 3)
    assert not judge(row, False, "pty", ["invoke.rst"])["handled"]


def test_loss_bucket_follows_the_type() -> None:
    assert loss_bucket(rec(HOW, type_="howto", sentences=[HOW], answers=["pty"])) == "right"
    assert loss_bucket(rec("--pty", type_="howto", sentences=[HOW], answers=["pty"])) == "wrong_kept"


def test_the_summary_counts_each_question_type_apart() -> None:
    records = [
        rec("bytecode caching"),                                            # factoid, right
        rec("pyc files"),                                                   # factoid, wrong
        rec(HOW, type_="howto", sentences=[HOW], answers=["pty"]),           # right
        rec("--pty", type_="howto", sentences=[HOW], answers=["pty"]),       # a span: wrong
        rec(WHY, type_="explanation", sentences=[WHY]),                      # right
        rec(WHY, type_="explanation", sentences=[WHY], cited=("other.rst",)),  # the wrong document
        rec(WHY, type_="instruction", sentences=[WHY], abstained=True),      # abstained: not right
        rec("", part="near_miss", answers=[], abstained=True),               # near miss, abstained
        rec(HOW, type_="howto", sentences=[HOW], answers=["pty"], part="noise_only", abstained=True),
        rec("bytecode caching", kind="news"),                                # another kind: factoids only
    ]
    summary = summarize(records, n_resamples=0)["kinds"]
    types = summary["docs"]["types"]
    assert types["answerable"] == {
        "factoid": {"n": 2, "right": 1, "rate": 0.5},
        "howto": {"n": 2, "right": 1, "rate": 0.5},
        "explanation": {"n": 2, "right": 1, "rate": 0.5},
        "instruction": {"n": 1, "right": 0, "rate": 0.0},
    }
    assert types["noise_only"] == {"howto": {"n": 1, "right": 1, "rate": 1.0}}  # abstaining is right there
    assert set(types) == {"answerable", "noise_only"}  # near misses are not typed
    assert summary["docs"]["parts"]["answerable"]["right"] == 3
    assert "types" not in summary["news"] and type_rates([records[-1]]) == {}
