"""unanswerable_pairs: untrained unanswerable questions as [Irrelevant], paired with an answerable one of the
same passage as [Relevant], plus a replay of the trained file."""

from __future__ import annotations

import json
import random
import shutil

import pytest

from cookbook.data.unanswerable_pairs import build, main, pair_rows
from cookbook.data.varied_data import squad_items
from langchain_selfrag import tokens as T
from tests.support.squad import squad_file


def items(tmp_path):
    return squad_items(squad_file(tmp_path), random.Random(0))


def test_an_unanswerable_question_is_irrelevant_and_its_partner_relevant_on_the_same_passage(tmp_path):
    _, answerable, unanswerable = items(tmp_path)
    rows = pair_rows(answerable, unanswerable, set(), 5, random.Random(0), pair_share=1.0)
    assert [r["variant"] for r in rows] == ["squad_unanswerable_more", "squad_pair_relevant"]
    irrelevant, relevant = rows
    assert irrelevant["instruction"] == "When was the Zorvian Canal filled in?"
    assert T.IRRELEVANT in irrelevant["output"] and irrelevant["no_loss_spans"]  # the plausible answer is not trained
    assert relevant["instruction"] == "When was the Zorvian Canal dug?"
    assert relevant["output"].endswith(T.RELEVANT + "1871" + T.FULLY_SUPPORTED + T.UTILITY[4])
    assert irrelevant["passage"] == relevant["passage"]


def test_questions_already_trained_are_not_used_again(tmp_path):
    _, answerable, unanswerable = items(tmp_path)
    assert pair_rows(answerable, unanswerable, {"When was the Zorvian Canal filled in?"}, 5, random.Random(0)) == []
    unpaired = pair_rows(answerable, unanswerable, set(), 5, random.Random(0), pair_share=0.0)
    assert [r["variant"] for r in unpaired] == ["squad_unanswerable_more"]


def test_the_file_mixes_new_rows_with_a_replay_of_the_trained_file(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(squad_file(tmp_path), data / "squad2_dev_half.json")
    trained = tmp_path / "trained.jsonl"
    trained.write_text("".join(json.dumps({"instruction": f"q{i}", "input": "", "output": "x", "id": f"t{i}"}) + "\n"
                               for i in range(10)))
    rows, summary = build(data, trained, unanswerable=5, replay=4, seed=0, pair_share=1.0)
    assert summary["examples"] == len(rows) == 6
    assert sum(r["id"].startswith("t") for r in rows) == 4
    assert summary["variants"]["squad_unanswerable_more"] == 1
    out = tmp_path / "cont.jsonl"
    assert main(["--data", str(data), "--trained", str(trained), "--out", str(out), "--replay", "2"]) == 0
    assert len(out.read_text().splitlines()) >= 3


def test_a_missing_trained_file_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--trained", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o.jsonl")])
    assert "no such file" in capsys.readouterr().err
