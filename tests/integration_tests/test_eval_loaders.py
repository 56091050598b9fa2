"""Evaluation loaders on small files written by the tests, and their errors."""

from __future__ import annotations

import pytest

from langchain_selfrag.evaluation.qa.loaders import (
    detect_format,
    load_dataset,
)


@pytest.mark.shared_data
def test_shared_files_detected(shared_data):
    expected = {
        "squad2_dev_half.json": "squad",
        "hotpotqa_dev_200.jsonl": "selfrag-jsonl",
        "popqa.jsonl": "popqa",
        "selfaware.json": "selfaware",
        "arc_challenge_test.jsonl": "arc",
    }
    for name, fmt in expected.items():
        assert detect_format(shared_data / name) == fmt
    squad = load_dataset(shared_data / "squad2_dev_half.json")
    assert len(squad.examples) == 6078 and len(squad.corpus) == 646
    assert sum(ex.answerable is False for ex in squad.examples) == 3168
