"""benchmarks/model_cost.py --breakdown on real llama.cpp models: the seconds each model computes for the
demo question, the same models twice in one process (each call closes what it loaded)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.model_cost import CORPUS, QUESTION, model_seconds
from langchain_selfrag.cli import main as selfrag_main


@pytest.mark.slow
def test_each_model_is_timed_and_a_second_call_loads_afresh(bundled_gguf, smollm2_gguf, tmp_path: Path) -> None:
    # one page of the demo corpus: its few chunks are the chain's only candidates, and the timings the same kind
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copyfile(CORPUS / "overview.md", docs / "overview.md")
    store = tmp_path / "store"
    assert selfrag_main(["index", str(docs), "--store", str(store), "--quiet"]) == 0
    alone = model_seconds(bundled_gguf, store, QUESTION)
    assert set(alone) == {"model", "ask_s"} and 0 < alone["model"] <= alone["ask_s"]
    # the chat model reads and judges: one model, one entry; the critic is loaded again after the close above
    pair = model_seconds(bundled_gguf, store, QUESTION, str(smollm2_gguf), str(smollm2_gguf))
    assert set(pair) == {"critic", "reader+judge", "ask_s"}
    assert pair["critic"] > 0 and pair["reader+judge"] > 0
    assert pair["critic"] + pair["reader+judge"] <= pair["ask_s"] + 0.05
