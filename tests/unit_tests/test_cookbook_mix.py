"""The GPU recipe's data mix: one convention for the answer after [Irrelevant]."""

from __future__ import annotations

import json

import pytest

from cookbook.data.mix import answer_untrained_after_irrelevant, main, mix
from langchain_selfrag import tokens as T

HEAD = T.RETRIEVAL + "<paragraph>Scottish Parliament\nBills pass in stages.</paragraph>" + T.IRRELEVANT
PHASE2 = {"instruction": "How long does the debate last?", "output": HEAD + "[Date] 45 minutes" + T.UTILITY[4]}


def test_the_answer_after_irrelevant_is_read_not_trained_and_utility_is_1():
    row = answer_untrained_after_irrelevant(PHASE2)
    assert row["output"] == HEAD + "[Date] 45 minutes" + T.UTILITY[0]
    start, end = row["no_loss_spans"][0]
    assert row["output"][start:end] == "[Date] 45 minutes"
    assert PHASE2["output"].endswith(T.UTILITY[4])  # the input row is not changed


def test_rows_of_other_shapes_come_back_unchanged():
    relevant = {"output": T.RETRIEVAL + "<paragraph>x</paragraph>" + T.RELEVANT + "y" + T.FULLY_SUPPORTED + T.UTILITY[4]}
    already = dict(PHASE2, no_loss_spans=[[1, 2]])
    two_segments = {"output": HEAD + "a" + T.RETRIEVAL + "<paragraph>z</paragraph>" + T.IRRELEVANT + "b" + T.UTILITY[4]}
    for row in (relevant, already, two_segments):
        assert answer_untrained_after_irrelevant(row) == row


def test_mix_is_a_seeded_shuffle_of_every_row(tmp_path):
    a = [{"output": f"a{i}"} for i in range(20)]
    b = [PHASE2]
    rows = mix([a, b], seed=3, untrained_after_irrelevant=True)
    assert rows == mix([a, b], seed=3, untrained_after_irrelevant=True) != mix([a, b], seed=4)
    assert sorted(r["output"] for r in rows if r["output"].startswith("a")) == sorted(r["output"] for r in a)
    assert [r for r in rows if "no_loss_spans" in r] == [answer_untrained_after_irrelevant(PHASE2)]


def test_cli_writes_the_mix_and_names_a_missing_file(tmp_path, capsys):
    src = tmp_path / "p2.jsonl"
    src.write_text(json.dumps(PHASE2) + "\n")
    out = tmp_path / "mix.jsonl"
    assert main([str(src), "--out", str(out), "--answer-after-irrelevant", "untrained"]) == 0
    assert json.loads(out.read_text())["output"].endswith(T.UTILITY[0])
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "nope.jsonl"), "--out", str(out)])
    assert exc.value.code == 2
    assert "nope.jsonl" in capsys.readouterr().err
