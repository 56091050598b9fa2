"""varied_data's SQuAD sources: more files of articles, the suite's articles left out, clear errors."""

from __future__ import annotations

import json
import random

import pytest

from cookbook.selfrag_smollm2.varied_data import KEEP_OUT_ARTICLES, squad_items

CONTEXT = ("The Zorvian Canal was dug in 1871 by the river guild. It links the two harbours of the old town "
           "and carries about forty barges a day.")


def squad_file(tmp_path, title="Zorvian_Canal"):
    qas = [{"question": "When was the Zorvian Canal dug?", "id": "a", "is_impossible": False,
            "answers": [{"text": "1871", "answer_start": CONTEXT.index("1871")}]},
           {"question": "When was the Zorvian Canal filled in?", "id": "u", "is_impossible": True, "answers": [],
            "plausible_answers": [{"text": "1871", "answer_start": CONTEXT.index("1871")}]}]
    articles = [{"title": t, "paragraphs": [{"context": CONTEXT, "qas": qas}]} for t in (title, KEEP_OUT_ARTICLES[0])]
    path = tmp_path / "part.json"
    path.write_text(json.dumps({"version": "v2.0", "data": articles}))
    return path


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
