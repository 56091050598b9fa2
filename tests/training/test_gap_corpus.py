"""The invented gap corpus (``cookbook.data.gap_corpus``): documents that state some details of their subject
and lack others, seeded, and a varied form that asks more kinds of detail in more ways."""

from __future__ import annotations

import pytest


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


def test_a_varied_gap_corpus_asks_more_kinds_of_detail_in_more_ways():
    from cookbook.data.gap_corpus import gap_corpus

    def forms(docs) -> set[str]:  # a question's form: its words before the entity's name
        return {q.split(" the ")[0] for d in docs for q in [*(q for q, _ in d.answerable), *d.gaps]}

    plain, varied = gap_corpus(200, seed=4), gap_corpus(200, seed=4, varied=True)
    assert len(forms(varied)) > len(forms(plain)) + 10
    assert any("How many rooms" in q for d in varied for q in d.gaps) and not any("rooms" in d.text for d in plain)
