"""varied_data's SQuAD sources: more files of articles, the suite's articles left out, clear errors."""

from __future__ import annotations

import random

import pytest

from cookbook.data.varied_data import squad_items
from tests.support.squad import CONTEXT, squad_file


def test_a_file_gives_its_answerable_and_unanswerable_questions_on_their_chunk(tmp_path):
    chunks, answerable, unanswerable = squad_items(squad_file(tmp_path), random.Random(0))
    assert list(chunks) == ["Zorvian_Canal.txt"]  # the trust suite's article is left out
    [(question, answer, passage, golds)] = answerable
    assert (question, answer, golds) == ("When was the Zorvian Canal dug?", "1871", ["1871"])
    assert "1871" in passage.text and passage.article == "squad:Zorvian_Canal.txt"
    [(question, plausible, passage)] = unanswerable
    assert question == "When was the Zorvian Canal filled in?" and plausible == "1871"


def test_a_file_that_is_not_squad_says_so(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"question": "q"}]')
    with pytest.raises(SystemExit, match="not a SQuAD 2.0 JSON file"):
        squad_items(bad, random.Random(0))
    with pytest.raises(SystemExit, match="not a SQuAD 2.0 JSON file"):
        squad_items(tmp_path / "missing.json", random.Random(0))


def test_in_passage_distractors_are_other_answers_of_the_same_passage_and_never_a_gold_one() -> None:
    from cookbook.data.varied_data import in_passage_distractors, issup_negative_row
    from langchain_selfrag import tokens as T
    from training.selfrag.qa_data import Passage

    p = Passage("squad:Canal#0", "Zorvian Canal", CONTEXT, article="squad:Canal")
    other = Passage("squad:Canal#1", "Zorvian Canal", "The guild hall burned in 1902.", article="squad:Canal")
    items = [("When was the Zorvian Canal dug?", "1871", p, ["1871"]),
             ("Who dug the Zorvian Canal?", "the river guild", p, ["the river guild"]),
             ("In what year was the Zorvian Canal dug out?", "in 1871", p, ["in 1871"]),  # a paraphrase, gold overlaps
             ("How many barges use the canal each day?", "about forty", p, ["about forty", "forty"]),
             ("When did the guild hall burn?", "1902", other, ["1902"])]
    pairs = in_passage_distractors(items, random.Random(0))
    by_question = {q: (a, w, passage) for q, a, w, passage in pairs}
    assert "When did the guild hall burn?" not in by_question  # alone in its passage
    for question, (answer, wrong, passage) in by_question.items():
        assert wrong in passage.text and wrong != answer
        assert "1871" not in wrong or "1871" not in answer
    assert by_question["When was the Zorvian Canal dug?"][1] in ("the river guild", "about forty")
    row = issup_negative_row("When was the Zorvian Canal dug?", "the river guild", p, "issup_in_passage")
    assert row["output"].endswith(T.RELEVANT + "the river guild" + T.NO_SUPPORT + T.UTILITY[0])
    start, end = row["no_loss_spans"][0]
    assert row["output"][start:end] == "the river guild" and row["variant"] == "issup_in_passage"
