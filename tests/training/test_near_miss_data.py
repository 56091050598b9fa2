"""Phase-3 near-miss data: SQuAD 2.0 unanswerable questions on their own chunk, with contrasts."""

from __future__ import annotations

import random

import pytest

from cookbook.experiments.near_miss import near_miss_pairs, paragraph_of
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


@pytest.mark.parametrize("varied", [False, True])
def test_gap_documents_state_what_they_answer_and_lack_what_their_gap_questions_ask(varied: bool):
    from cookbook.data.gap_corpus import PLACE_KINDS, gap_corpus
    from langchain_selfrag.evaluation.bio.data import data_words

    avoid = ["The Orlan Canal links Brevasse to Saltmere."]
    docs = gap_corpus(60, seed=3, avoid=avoid, varied=varied)
    assert [d.text for d in docs] == [d.text for d in gap_corpus(60, seed=3, avoid=avoid, varied=varied)]  # seeded
    assert len({d.source for d in docs}) == 60 and all(d.source.endswith(".md") for d in docs)
    for doc in docs:
        assert doc.title.lower().split()[0] in doc.text.split(".")[0].lower()  # the first sentence names it
        for question, answer in doc.answerable:
            assert answer in doc.text and question not in doc.gaps
        assert not set(doc.gaps) & {q for q, _ in doc.answerable}
    assert sum(bool(d.gaps) for d in docs) >= 50
    names = data_words(d.title for d in docs) - {kind.lower() for kind in PLACE_KINDS}  # "Canal" is no name
    assert not data_words(avoid) & names  # no invented name of the avoided corpora


def test_gap_rows_pair_an_irrelevant_gap_question_with_a_stated_one_on_the_same_text():
    from cookbook.data.gap_corpus import gap_corpus
    from cookbook.experiments.near_miss import gap_rows

    docs = [d for d in gap_corpus(5, seed=1) if d.gaps]
    rows = gap_rows(docs, random.Random(0))
    assert [r["variant"] for r in rows] == ["gap", "gap_contrast"] * len(docs)
    for doc, (gap, stated) in zip(docs, zip(rows[::2], rows[1::2])):
        evidence = T.RETRIEVAL + f"<paragraph>{doc.source.removesuffix('.md')}\n{doc.text}</paragraph>"
        assert gap["instruction"] in doc.gaps and gap["output"].startswith(evidence + T.IRRELEVANT)
        (start, end), = gap["no_loss_spans"]
        assert gap["output"][end:] == T.UTILITY[0] and gap["output"][start:end] in doc.text  # read, not trained
        question, answer = next((q, a) for q, a in doc.answerable if q == stated["instruction"])
        assert stated["output"] == evidence + T.RELEVANT + answer + T.FULLY_SUPPORTED + T.UTILITY[4]


def test_a_varied_gap_corpus_asks_more_kinds_of_detail_in_more_ways():
    from cookbook.data.gap_corpus import gap_corpus

    def forms(docs) -> set[str]:  # a question's form: its words before the entity's name
        return {q.split(" the ")[0] for d in docs for q in [*(q for q, _ in d.answerable), *d.gaps]}

    plain, varied = gap_corpus(200, seed=4), gap_corpus(200, seed=4, varied=True)
    assert len(forms(varied)) > len(forms(plain)) + 10
    assert any("How many rooms" in q for d in varied for q in d.gaps) and not any("rooms" in d.text for d in plain)
