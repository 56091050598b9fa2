"""Phase-3 near-miss data: SQuAD 2.0 unanswerable questions on their own chunk, with contrasts."""

from __future__ import annotations

import random

from cookbook.selfrag_smollm2.near_miss import near_miss_pairs, paragraph_of
from langchain_selfrag import tokens as T
from training.selfrag.qa_data import load_squad

from .test_training_data import squad_file


def test_unanswerable_question_is_irrelevant_to_its_own_chunk_and_paired_with_an_answerable_one(tmp_path):
    corpus = load_squad(squad_file(tmp_path), max_passage_chars=400)
    rows = near_miss_pairs(corpus.questions, corpus.by_id(), random.Random(0), n=10)
    assert [r["variant"] for r in rows] == ["near_miss", "near_miss_contrast"]
    miss, contrast = rows
    assert miss["id"] == "q3" and miss["instruction"] == "Who founded Paris?"
    head = T.RETRIEVAL + "<paragraph>Paris\n"
    assert miss["output"].startswith(head) and T.IRRELEVANT in miss["output"]
    assert miss["output"].endswith(T.IRRELEVANT + "Seine" + T.UTILITY[0])
    (start, end), = miss["no_loss_spans"]
    assert miss["output"][start:end] == "Seine"  # the plausible answer is read, not trained
    assert T.RELEVANT not in miss["output"] and T.FULLY_SUPPORTED not in miss["output"]
    # the contrast reads the same paragraph; both of its questions qualify, the lower id wins the tie
    assert contrast["id"] == "q1" and contrast["passage"] == miss["passage"]
    assert contrast["output"].endswith(T.RELEVANT + "Paris" + T.FULLY_SUPPORTED + T.UTILITY[4])
    assert "no_loss_spans" not in contrast


def test_kept_out_questions_are_never_used_and_contrasts_are_not_reused(tmp_path):
    corpus = load_squad(squad_file(tmp_path), max_passage_chars=400)
    rows = near_miss_pairs(corpus.questions, corpus.by_id(), random.Random(0), n=10, keep_out={"q1"})
    assert [r["id"] for r in rows] == ["q3", "q2"]
    assert near_miss_pairs(corpus.questions, corpus.by_id(), random.Random(0), n=10, keep_out={"q3"}) == []
    assert near_miss_pairs(corpus.questions, corpus.by_id(), random.Random(0), n=0) == []
    assert paragraph_of("Paris/0/2") == "Paris/0"
