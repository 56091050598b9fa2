"""Passages read once: where a prompt's passage ends in its tokens, and the folder of saved KV states
(no model is loaded here; ``tests/integration_tests/test_question_layout_model.py`` restores real ones)."""

from __future__ import annotations

import os

import pytest

from langchain_selfrag.questions import ReflectionQuestions
from langchain_selfrag.lm.llamacpp.prefix_states import PrefixStates, passage_prefix_length, prefix_cache_mb
from langchain_selfrag.passage_reads import evidence_prompt, read_ahead
from langchain_selfrag.errors import InvalidInputError
from langchain_selfrag.questions import turn_of

MARKER = b"\n\nQuestion: "


def test_the_passage_ends_before_the_token_that_holds_the_marker() -> None:
    pieces = [b"<s>", b"Passage", b" text", b" ends", b".\n\n", b"Question", b":", b" Who", b"?"]
    assert passage_prefix_length(pieces, MARKER) == 4  # ".\n\n" joins the passage's last character
    split = [b"<s>", b"Passage", b" text", b"\n\n", b"Question", b":", b" Who"]
    assert passage_prefix_length(split, MARKER) == 3


def test_the_last_marker_counts_and_short_or_markerless_prompts_have_none() -> None:
    pieces = [b"A", b"\n\nQuestion: ", b"B", b" C", b"\n\n", b"Question", b": ", b"D"]
    assert passage_prefix_length(pieces, MARKER) == 4
    assert passage_prefix_length(pieces, MARKER, shortest=4) is None
    assert passage_prefix_length([b"no", b" marker"], MARKER) is None
    assert passage_prefix_length([b"x"], b"") is None


def test_a_state_is_found_by_its_tokens_and_model(tmp_path) -> None:
    states = PrefixStates(tmp_path, "model-a", 1 << 20)
    states.put([1, 2, 3], b"cells")
    assert states.get([1, 2, 3]) == b"cells" and states.has([1, 2, 3]) and states.size() == 5
    assert states.get([1, 2]) is None and states.get([1, 2, 3, 4]) is None
    assert PrefixStates(tmp_path, "model-b", 1 << 20).get([1, 2, 3]) is None
    assert [p.suffix for p in tmp_path.iterdir()] == [".kv"]  # no temporary file left


def test_the_least_recently_used_states_leave_first(tmp_path) -> None:
    states = PrefixStates(tmp_path, "m", 250)
    for i, when in zip(range(3), (100, 200, 300)):
        states.put([i], b"x" * 100)
        os.utime(states.path_of([i]), ns=(when * 10**9, when * 10**9))
    assert not states.has([0])  # the third put went over 250 bytes
    assert states.get([1]) == b"x" * 100  # used now: the most recent
    states.put([3], b"y" * 100)
    assert states.has([1]) and states.has([3]) and not states.has([2])
    states.put([4], b"z" * 300)  # larger than the whole folder: not kept
    assert not states.has([4]) and states.has([3])


def test_an_unwritable_folder_only_loses_the_speed_up(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    states = PrefixStates(blocker / "states", "m", 1 << 20)
    states.put([1], b"cells")
    assert states.get([1]) is None


def test_the_cache_size_comes_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("SELFRAG_PREFIX_CACHE_MB", raising=False)
    assert prefix_cache_mb() == 1024
    monkeypatch.setenv("SELFRAG_PREFIX_CACHE_MB", "0")
    assert prefix_cache_mb() == 0
    for bad in ("lots", "-1"):
        monkeypatch.setenv("SELFRAG_PREFIX_CACHE_MB", bad)
        with pytest.raises(ValueError, match="SELFRAG_PREFIX_CACHE_MB"):
            prefix_cache_mb()


def test_the_marker_is_what_follows_the_passage_when_it_comes_first() -> None:
    assert ReflectionQuestions().after_passage() == "\n\nQuestion: "
    question_first = ReflectionQuestions(isrel="Question: {question}\n\nPassage: {passage}\n\nRelevant?")
    assert question_first.after_passage() is None
    assert ReflectionQuestions(isrel="{passage}{question}").after_passage() is None


def test_an_evidence_prompt_holds_the_chunk_as_the_graph_gives_it() -> None:
    from langchain_core.documents import Document

    turn = turn_of(evidence_prompt(Document("Rain falls.", metadata={"source": "docs/weather.md"})))
    assert (turn.title, turn.passage) == ("weather", "Rain falls.")


def test_a_model_that_reads_each_passage_anew_is_refused() -> None:
    class PaperLayoutLM:
        name = "v4"

    with pytest.raises(InvalidInputError, match="nothing to read ahead"):
        read_ahead(PaperLayoutLM(), [])
