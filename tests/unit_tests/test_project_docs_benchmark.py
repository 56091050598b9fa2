"""benchmarks/project_docs.py: the labelled questions about the demo corpus (examples/corpus/), and the judging."""

from __future__ import annotations

import json

import pytest

from benchmarks.project_docs import judge, load_questions, summarise

HARD = {"question": "What happens with hard constraints?", "kind": "answerable",
        "answers": [{"source": "ranking.md",
                     "sentence": "Hard constraints drop every candidate whose IsSup token is [No support / Contradictory]."}]}


def test_every_labelled_answer_is_a_sentence_of_its_file_in_the_corpus() -> None:
    rows = load_questions()
    assert {r["kind"] for r in rows} == {"answerable", "near_miss"}
    assert rows[0]["question"] == "How does Self-RAG decide whether to retrieve passages?"  # make demo's question


def test_a_label_that_the_corpus_no_longer_states_is_refused(tmp_path) -> None:
    (tmp_path / "ranking.md").write_text("Hard constraints were removed.\n")
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"questions": [HARD]}))
    with pytest.raises(ValueError, match="not in ranking.md"):
        load_questions(path, tmp_path)


def test_an_answer_explains_only_as_the_cited_sources_sentence() -> None:
    sentence = HARD["answers"][0]["sentence"]
    assert judge(HARD, False, sentence, ["ranking.md"])["handled"]
    assert not judge(HARD, False, "drop", ["ranking.md"])["handled"]  # a span does not explain
    assert not judge(HARD, False, sentence, ["overview.md"])["handled"]  # nor the right words from another file
    assert not judge(HARD, True, sentence, ["ranking.md"])["handled"]
    near = {"question": "How many passages are retrieved by default?", "kind": "near_miss"}
    assert judge(near, True, "", [])["handled"] and not judge(near, False, "5", ["retrieval.md"])["handled"]


def test_summary_counts_each_way_of_going_wrong() -> None:
    out = [{"kind": "answerable", "abstained": True, "cites_source": False, "handled": False},
           {"kind": "answerable", "abstained": False, "cites_source": False, "handled": False},
           {"kind": "answerable", "abstained": False, "cites_source": True, "handled": False},
           {"kind": "answerable", "abstained": False, "cites_source": True, "handled": True},
           {"kind": "near_miss", "abstained": True, "cites_source": None, "handled": True}]
    s = summarise(out)
    assert s["answerable"] == {"n": 4, "explained": 1, "abstained": 1, "answered_without_the_source": 1,
                               "cited_but_not_its_sentence": 1}
    assert s["near_miss"] == {"n": 1, "abstained": 1}
