"""build_data trains on no text of a held-out article, not even as a negative passage (needs ../shared/data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cookbook.selfrag_smollm2 import build_data
from training.selfrag.qa_data import load_squad

pytestmark = pytest.mark.shared_data


def test_no_training_row_holds_a_passage_of_a_heldout_article(shared_data: Path, tmp_path: Path) -> None:
    build_data.main(["--data", str(shared_data), "--out", str(tmp_path), "--max-questions", "80",
                     "--phase2-questions", "80", "--critic-per-aspect", "20"])
    split = json.loads((tmp_path / "split.json").read_text())
    corpus = load_squad(shared_data / "squad2_dev_half.json", max_passage_chars=split["max_passage_chars"])

    def as_in_rows(articles: list[str]) -> list[str]:
        """The articles' passages as they read inside a JSONL row (JSON-escaped, once)."""
        return [json.dumps(p.text, ensure_ascii=False)[1:-1] for p in corpus.subset(articles).passages]

    heldout, trained = as_in_rows(split["heldout_articles"]), as_in_rows(split["train_articles"])

    def rows_holding(name: str, texts: list[str]) -> int:
        rows = [json.dumps(json.loads(line), ensure_ascii=False) for line in (tmp_path / name).read_text().splitlines()]
        return sum(any(t in r for t in texts) for r in rows)

    for name in ("generator_train.jsonl", "generator_phase2.jsonl", "critic_train.jsonl"):
        assert rows_holding(name, heldout) == 0, name
        assert rows_holding(name, trained) > 0, name  # the check can see a passage when one is there
    assert rows_holding("critic_eval.jsonl", heldout) > 0  # the held-out critic set retrieves from everything
