"""benchmarks/model_cost.py --breakdown on a real llama.cpp model: the seconds the model computes for the
demo question, the same model twice in one process (each call closes what it loaded)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.model_cost import CORPUS, QUESTION, model_seconds
from langchain_selfrag.cli import main as selfrag_main


@pytest.mark.slow
def test_the_model_is_timed_and_a_second_call_loads_afresh(bundled_gguf, tmp_path: Path) -> None:
    # one page of the demo corpus: its few chunks are the chain's only candidates, and the timings the same kind
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copyfile(CORPUS / "overview.md", docs / "overview.md")
    store = tmp_path / "store"
    assert selfrag_main(["index", str(docs), "--store", str(store), "--quiet"]) == 0
    alone = model_seconds(bundled_gguf, store, QUESTION)
    assert set(alone) == {"model", "ask_s"} and 0 < alone["model"] <= alone["ask_s"]
    # the model is loaded again after the close above
    again = model_seconds(bundled_gguf, store, QUESTION, k=2)
    assert set(again) == {"model", "ask_s"} and 0 < again["model"] <= again["ask_s"]
