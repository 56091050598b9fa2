"""holdout_articles: a training file without any row that touches the held-out SQuAD articles."""

from __future__ import annotations

import json
import random

import pytest

from cookbook.data.holdout_articles import ArticleIndex, hold_out, main
from cookbook.data.varied_data import irrelevant_row, relevant_row, squad_items
from tests.support.squad import squad_file


def rows_and_index(tmp_path):
    squad = json.loads(squad_file(tmp_path).read_text())
    other = json.loads(json.dumps(squad["data"][0]).replace("Zorvian", "Brellish"))  # a second article
    other["title"] = "Brellish_Canal"
    for qa in other["paragraphs"][0]["qas"]:
        qa["id"] += "-brellish"
    squad["data"] = [squad["data"][0], other]
    path = tmp_path / "two.json"
    path.write_text(json.dumps(squad))
    _, answerable, unanswerable = squad_items(path, random.Random(0))
    rows = [relevant_row(q, a, p, "squad_relevant") | {"id": f"squad_relevant/{i}"}
            for i, (q, a, p, _) in enumerate(answerable)]
    rows += [irrelevant_row(q, p, plausible, "squad_unanswerable") | {"id": f"squad_unanswerable/{i}"}
             for i, (q, plausible, p) in enumerate(unanswerable)]
    rows.append({"instruction": "What does pip install?", "input": "", "output": "[No Retrieval]Packages.",
                 "variant": "no_retrieval", "id": "no_retrieval/0"})
    return rows, ArticleIndex.from_squad(squad), other["title"], path


def test_every_row_that_shows_or_asks_a_held_out_article_is_dropped(tmp_path):
    rows, index, other, _ = rows_and_index(tmp_path)
    kept, dropped = hold_out(rows, {"Zorvian_Canal"}, index)
    assert dropped["Zorvian_Canal"] == 2
    assert all(index.articles_of(r) <= {other} for r in kept)
    assert {r["variant"] for r in kept} == {"squad_relevant", "squad_unanswerable", "no_retrieval"}
    assert len(kept) == len(rows) - 2


def test_a_row_is_matched_by_its_squad_id_its_question_or_its_passage_title(tmp_path):
    _, index, _, _ = rows_and_index(tmp_path)
    assert index.articles_of({"id": "a"}) == {"Zorvian_Canal"}
    assert index.articles_of({"id": "squad_pair/a"}) == {"Zorvian_Canal"}
    assert index.articles_of({"instruction": "When was the Zorvian Canal dug?"}) == {"Zorvian_Canal"}
    assert index.articles_of({"output": "[Retrieval]<paragraph>Zorvian Canal\nText</paragraph>"}) == {"Zorvian_Canal"}
    assert index.articles_of({"id": "x", "instruction": "Who?", "output": "[No Retrieval]No one."}) == set()


def test_the_command_writes_the_kept_rows_and_refuses_unknown_articles(tmp_path, capsys):
    rows, _, _, path = rows_and_index(tmp_path)
    path.rename(tmp_path / "squad2_dev_half.json")
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out" / "kept.jsonl"
    assert main(["--data", str(tmp_path), "--train-file", str(train), "--out", str(out),
                 "--articles", "Zorvian_Canal"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {"rows_in": len(rows), "rows_out": len(rows) - 2, "dropped": {"Zorvian_Canal": 2}}
    assert len(out.read_text().splitlines()) == len(rows) - 2
    with pytest.raises(SystemExit):
        main(["--data", str(tmp_path), "--train-file", str(train), "--out", str(out), "--articles", "Nowhere"])
    assert "not articles of squad2_dev_half.json: Nowhere" in capsys.readouterr().err
