"""The cookbook evaluation's metrics, computed from SelfRAGChain outputs and traces."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document

from cookbook.selfrag_smollm2.evaluate import (
    answer_record,
    answer_summary,
    chain_summary,
    failed_output,
    isrel_summary,
    issup_label,
    issup_summary,
    paired_match_difference,
    run_chain,
)
from langchain_selfrag import tokens as T
from training.selfrag.qa_data import Passage, QAItem
from training.selfrag.retrievers import BM25DocumentRetriever

FULL, PARTIAL, NONE = T.FULLY_SUPPORTED, T.PARTIALLY_SUPPORTED, T.NO_SUPPORT


def doc(pid: str, text: str, title: str = "T") -> Document:
    return Document(page_content=text, metadata={"id": pid, "title": title})


def entry(passage: int | None, text: str = "", isrel: float | None = None, issup: dict | None = None) -> dict:
    reflections = [{"token": max(issup, key=issup.get), "kind": "issup", "position": 3, "probs": issup}] if issup else []
    return {"passage": passage, "text": text, "isrel": isrel, "issup": None, "reflections": reflections}


def question(qid="q1", answers=("Shakespeare",), gold=("g",)) -> QAItem:
    return QAItem(qid, "Who wrote Hamlet?", list(answers), gold=list(gold))


def test_answers_count_abstentions_empty_answers_and_errors_apart_from_matches():
    q = question()
    outs = [
        {"answer": "William Shakespeare.", "abstained": False, "retrieved": True},
        {"answer": "I cannot answer this reliably.", "abstained": True, "abstain_reason": "no text"},
        {"answer": " : ", "abstained": False},  # nothing left after normalisation
        failed_output(ValueError("boom")),
        {"answer": "Marlowe", "abstained": False},
    ]
    records = [answer_record(q, o) for o in outs]
    assert [r["match"] for r in records] == [True, False, False, False, False]
    assert [r["empty"] for r in records] == [False, False, True, True, False]
    s = answer_summary(records)
    assert (s["n"], s["matched"], s["abstained"], s["empty"], s["abstained_or_empty"]) == (5, 1, 1, 2, 3)
    assert s["match"] == pytest.approx(0.2) and s["abstained_or_empty_share"] == pytest.approx(0.6)
    assert s["abstain_reasons"] == {"no text": 1} and s["errors"] == {"ValueError: boom": 1}
    assert s["retrieved_share"] == pytest.approx(0.2)
    # An abstention that happens to quote the answer is still no match.
    assert not answer_record(q, {"answer": "Shakespeare", "abstained": True})["match"]


def test_isrel_auc_labels_gold_passages_and_skips_answer_bearing_non_gold():
    q1, q2 = question("q1"), question("q2", gold=("h",))
    out1 = {"passages": [doc("g", "Hamlet was written by Shakespeare."), doc("x", "Macbeth is a play."),
                         doc("y", "Shakespeare also wrote sonnets.")],
            "trace": [entry(0, isrel=0.9), entry(1, isrel=0.2), entry(2, isrel=0.1), entry(None, isrel=None)]}
    out2 = {"passages": [doc("h", "Shakespeare's Hamlet."), doc("z", "Paris is in France.")],
            "trace": [entry(0, isrel=0.3), entry(1, isrel=0.4)]}
    s = isrel_summary([q1, q2], [out1, out2])
    # positives 0.9, 0.3; negatives 0.2, 0.4: pairs won 0.9>0.2, 0.9>0.4, 0.3>0.2 -> 3 of 4.
    assert (s["positives"], s["negatives"], s["skipped"], s["questions"]) == (2, 2, 1, 2)
    assert s["auc"] == pytest.approx(0.75)
    low, high = s["auc_ci95"]
    assert 0.0 <= low <= high <= 1.0
    assert isrel_summary([q1], [{"passages": [doc("g", "Shakespeare")], "trace": [entry(0, isrel=0.5)]}])["auc"] is None


def test_issup_label_is_gold_derived_from_the_answer_and_the_passage():
    passage = Passage("g", "Hamlet", "Hamlet was written by William Shakespeare around 1600.")
    assert issup_label("Shakespeare", passage, ["Shakespeare"]) == FULL
    assert issup_label("Christopher Marlowe", passage, ["Shakespeare"]) == NONE
    assert issup_label("around 1600", passage, ["Shakespeare"]) is None  # wrong, but copied from the passage
    assert issup_label("Shakespeare", Passage("x", "Paris", "Paris is in France."), ["Shakespeare"]) == NONE
    assert issup_label("", passage, ["Shakespeare"]) is None


def test_issup_agreement_is_the_argmax_of_the_traced_issup_probabilities():
    q = question()

    def peaked(top: str) -> dict:
        return {tok: (0.8 if tok == top else 0.1) for tok in (FULL, PARTIAL, NONE)}

    docs = [doc("g", "Hamlet was written by Shakespeare."), doc("x", "Macbeth is a play about a king.")]
    trace = [
        entry(0, "Shakespeare", 0.9, peaked(FULL)),       # label full, argmax full: agree
        entry(1, "Christopher Marlowe", 0.1, peaked(FULL)),  # label no support, argmax full: disagree
        entry(1, "Marlowe", 0.1, peaked(NONE)),           # label no support, argmax no support: agree
        entry(1, "a king", 0.1, peaked(NONE)),            # unlabelled (in the passage, not the answer)
        entry(0, "Shakespeare", 0.9, None),               # no IsSup token
        entry(None, "Shakespeare"),                       # no evidence: not an IsSup case
    ]
    s = issup_summary([q], [{"passages": docs, "trace": trace}])
    assert (s["n"], s["unlabelled"], s["without_issup_token"]) == (3, 1, 1)
    assert s["agreement"] == pytest.approx(2 / 3)
    assert s["per_label"][FULL] == {"n": 1, "agreement": 1.0}
    assert s["per_label"][NONE] == {"n": 2, "agreement": 0.5}
    assert s["score_auc_full_vs_no"] is not None
    assert issup_summary([q], [{"passages": [], "trace": []}])["agreement"] is None


def test_the_chain_over_bm25_yields_traces_with_identifiable_passages():
    from langchain_selfrag import SelfRAGChain
    from langchain_selfrag.config import SelfRAGConfig
    from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment
    from training.selfrag.bm25 import BM25Retriever

    passages = [Passage("g", "Hamlet", "Hamlet is a tragedy written by William Shakespeare."),
                Passage("x", "Macbeth", "Macbeth is a tragedy about a Scottish king and Hamlet's cousin."),
                Passage("y", "Paris", "Paris is the capital of France.")]
    lm = FakeReflectionLM(retrieve=0.9, passages={
        "William Shakespeare": FakeSegment("William Shakespeare", isrel=0.9, issup="full"),
        "Scottish king": FakeSegment("King Duncan", isrel=0.2, issup="none"),
    }, default=FakeSegment("France", isrel=0.1, issup="none"))
    retriever = BM25DocumentRetriever(bm25=BM25Retriever(passages))
    q = QAItem("q1", "Who wrote the tragedy Hamlet?", ["Shakespeare"], gold=["g"])
    outs = run_chain(SelfRAGChain(lm, retriever, SelfRAGConfig()), [q], "test")
    s = chain_summary([q], outs)
    assert s["match"] == 1.0 and s["abstained_or_empty"] == 0
    assert s["isrel"]["positives"] == 1 and s["isrel"]["negatives"] >= 1 and s["isrel"]["auc"] == 1.0
    assert s["issup"]["agreement"] == 1.0 and s["issup"]["per_label"][FULL]["n"] == 1
    top1 = run_chain(SelfRAGChain(lm, retriever, SelfRAGConfig(mode="always", k=1)), [q], "test")[0]
    assert [t["passage"] for t in top1["trace"]] == [0] and top1["passages"][0].metadata["id"] == "g"


def test_paired_match_difference_compares_the_same_questions():
    top1 = [{"match": True}, {"match": False}, {"match": False}, {"match": True}]
    selfrag = [{"match": True}, {"match": True}, {"match": False}, {"match": False}]
    d = paired_match_difference(top1, selfrag)
    assert d["n"] == 4 and d["value"] == pytest.approx(0.0) and (d["better"], d["worse"]) == (1, 1)
    assert d["ci95"][0] < 0 < d["ci95"][1]


def test_hybrid_retrieval_finds_what_bm25_alone_misses(tmp_path):
    """Real MiniLM + in-memory Chroma fused with BM25: a paraphrase with no shared word still finds
    its passage, a rare name still finds its own, and plain RAG top-1 reads the fused first."""
    from cookbook.selfrag_smollm2.evaluate import build_retriever, top_passage
    from langchain_selfrag.retrieval.fusion import FusionRetriever
    from training.selfrag.bm25 import BM25Retriever

    passages = [
        Passage("otter", "Drennick Marsh", "Drennick Marsh is home to the spotted fen-otter, a small mammal that hunts eels at night."),
        Passage("quist", "Velmora lighthouse", "Ansel Quist kept the Velmora lighthouse log entirely in green ink from 1871."),
        Passage("tax", "Orlan tariffs", "The Orlan salt tariff of 1790 was repealed when merchants petitioned the council."),
        Passage("bell", "Harrowgate bells", "The eight bells of Harrowgate were recast in 1902 by a foundry in Leeds."),
    ]
    bm25 = BM25Retriever(passages)
    paraphrase = "Which creature catches fish after dark in the wetland?"
    assert bm25(paraphrase, 4) == []  # no word in common
    assert isinstance(build_retriever("bm25", bm25, passages, tmp_path), BM25DocumentRetriever)
    hybrid = build_retriever("hybrid", bm25, passages, tmp_path)
    assert isinstance(hybrid, FusionRetriever)
    assert hybrid.model_copy(update={"k": 1}).invoke(paraphrase)[0].metadata["id"] == "otter"
    assert top_passage(hybrid)("What colour of ink did Ansel Quist use?").id == "quist"
    with pytest.raises(ValueError, match="unknown retrieval"):
        build_retriever("splade", bm25, passages, tmp_path)
