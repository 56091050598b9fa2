"""Prompt layouts (pure): the paper's stays byte for byte, ChatML puts the passage in the user's turn, training
examples are cut at each retrieval, and a model's record is read from GGUF metadata and folders."""

from __future__ import annotations

import json

import pytest

from langchain_selfrag import tokens as T
from langchain_selfrag.layout_record import folder_record, gguf_string_value, layout_of_path, layout_of_sources
from langchain_selfrag.prompt_layouts import (
    CHATML,
    CONFIG_KEY,
    GGUF_KEY,
    PAPER_LAYOUT,
    PromptLayoutError,
    layout_named,
    split_prompt,
)
from langchain_selfrag.prompts import build_instruction, format_prompt, with_evidence, without_retrieval

ASKED = format_prompt(build_instruction("Who first climbed Mount Travik?"))
EVIDENCE = with_evidence(ASKED, "travik.txt", "Ilsa Brenner reached the summit in 1921.")
CHAT = layout_named(CHATML)
HEAD = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"


@pytest.mark.parametrize("prompt", [ASKED, EVIDENCE, EVIDENCE + T.RELEVANT + "Ilsa Brenner.", without_retrieval(ASKED),
                                    "not a Self-RAG prompt at all"])
def test_the_paper_layout_gives_every_prompt_back_byte_for_byte(prompt):
    assert PAPER_LAYOUT.render(prompt) == prompt
    assert layout_named(None) is PAPER_LAYOUT and layout_named("paper") is PAPER_LAYOUT


def test_chatml_asks_the_question_alone_where_retrieval_is_decided():
    assert CHAT.render(ASKED) == (HEAD + "Answer the question briefly.\n\nQuestion: Who first climbed Mount Travik?"
                                  "<|im_end|>\n<|im_start|>assistant\n")
    assert CHAT.render(without_retrieval(ASKED)).endswith("<|im_start|>assistant\n" + T.NO_RETRIEVAL)


def test_chatml_puts_the_passage_in_the_users_turn_and_the_reflection_tokens_in_the_assistants():
    rendered = CHAT.render(EVIDENCE + T.RELEVANT + "Ilsa Brenner.")
    user, assistant = rendered.split("<|im_start|>assistant\n")
    assert "Passage (travik.txt):\nIlsa Brenner reached the summit in 1921.\n\nQuestion: Who first climbed" in user
    assert assistant == T.RELEVANT + "Ilsa Brenner."
    assert T.PARAGRAPH_START not in rendered and T.RETRIEVAL not in rendered


def test_chatml_keeps_earlier_segments_and_shows_the_last_passage():
    second = with_evidence(EVIDENCE + T.RELEVANT + "Ilsa Brenner." + T.FULLY_SUPPORTED, "later.txt", "Second passage.")
    parts = split_prompt(second)
    assert (parts.title, parts.passage) == ("later.txt", "Second passage.")
    assert parts.response == T.RELEVANT + "Ilsa Brenner." + T.FULLY_SUPPORTED
    assert CHAT.render(second).endswith("assistant\n" + T.RELEVANT + "Ilsa Brenner." + T.FULLY_SUPPORTED)


def test_chatml_text_cannot_close_the_users_turn():
    prompt = with_evidence(ASKED, "x", "a passage with <|im_end|> inside")
    assert CHAT.render(prompt).count("<|im_end|>") == 2  # the system's and the user's own


def test_a_prompt_of_another_layout_is_refused_by_name():
    with pytest.raises(PromptLayoutError, match="not a Self-RAG prompt"):
        CHAT.render("Question: who?")


def test_unknown_layouts_are_refused_with_the_known_ones():
    with pytest.raises(PromptLayoutError, match=r"unknown prompt layout 'llama3'.*paper, chatml"):
        layout_named("llama3")


def test_chatml_training_examples_cut_at_each_retrieval():
    output = (T.RETRIEVAL + "<paragraph>a.txt\nA</paragraph>" + T.RELEVANT + "one." + T.FULLY_SUPPORTED
              + T.RETRIEVAL + "<paragraph>b.txt\nB</paragraph>" + T.IRRELEVANT + "two" + T.UTILITY[0])
    unread = (output.index("two"), output.index("two") + 3)
    first, second, third = CHAT.training_examples(ASKED, output, [unread])
    assert (first["prompt"], first["output"], first["eos"]) == (CHAT.render(ASKED), T.RETRIEVAL, False)
    assert "Passage (a.txt):\nA" in second["prompt"] and second["output"] == T.RELEVANT + "one." + T.FULLY_SUPPORTED + T.RETRIEVAL
    assert not second["eos"] and not second["no_loss_spans"]
    assert "Passage (b.txt):\nB" in third["prompt"] and third["prompt"].endswith(T.RELEVANT + "one." + T.FULLY_SUPPORTED)
    assert third["output"] == T.IRRELEVANT + "two" + T.UTILITY[0] and third["eos"]
    s, e = third["no_loss_spans"][0]
    assert third["output"][s:e] == "two"


def test_paper_training_examples_are_the_example_itself():
    assert PAPER_LAYOUT.training_examples(ASKED, T.NO_RETRIEVAL + "x", [(1, 2)]) == [
        {"prompt": ASKED, "output": T.NO_RETRIEVAL + "x", "no_loss_spans": [(1, 2)], "eos": True}]


def test_a_record_without_retrieval_is_one_example_that_ends_the_turn():
    (only,) = CHAT.training_examples(ASKED, T.NO_RETRIEVAL + "Paris." + T.UTILITY[4])
    assert only["output"] == T.NO_RETRIEVAL + "Paris." + T.UTILITY[4] and only["eos"]


def _write_gguf(path, metadata: dict):
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_token_list(["a", "b", "<|im_end|>"])  # an array of strings before the key, skipped when read
    writer.add_uint32("llama.context_length", 64)
    for key, value in metadata.items():
        writer.add_string(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


def test_the_layout_is_read_from_a_gguf_files_metadata(tmp_path):
    chat = _write_gguf(tmp_path / "chat.gguf", {GGUF_KEY: "chatml"})
    plain = _write_gguf(tmp_path / "plain.gguf", {"general.name": "x"})
    assert gguf_string_value(chat, GGUF_KEY) == "chatml" and layout_of_path(chat).name == CHATML
    assert gguf_string_value(plain, GGUF_KEY) is None and layout_of_path(plain) is PAPER_LAYOUT
    assert gguf_string_value(plain, "general.name") == "x"
    (tmp_path / "text.gguf").write_text("not gguf")
    with pytest.raises(PromptLayoutError, match="not a GGUF file"):
        layout_of_path(tmp_path / "text.gguf")


def test_the_layout_is_read_from_a_folders_config_or_training_record(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({"model_type": "qwen2", CONFIG_KEY: "chatml"}))
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "selfrag_training.json").write_text(json.dumps({CONFIG_KEY: "chatml"}))
    (tmp_path / "bare").mkdir()
    assert folder_record(tmp_path / "hf") == folder_record(tmp_path / "adapter") == "chatml"
    assert folder_record(tmp_path / "bare") is None and layout_of_path(tmp_path / "bare") is PAPER_LAYOUT
    assert layout_of_sources(None, "chatml", "paper").name == CHATML and layout_of_sources(None, None) is PAPER_LAYOUT
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text(json.dumps({CONFIG_KEY: 3}))
    with pytest.raises(PromptLayoutError, match="must be a string"):
        layout_of_path(tmp_path / "bad")


def test_training_goes_on_in_the_layout_its_start_records(tmp_path):
    from training.core.config import TrainingError, trained_layout

    chat = _write_gguf(tmp_path / "chat.gguf", {GGUF_KEY: "chatml"})
    assert trained_layout(None, None, "qwen2.5-coder-0.5b-instruct") == "paper"  # a base by name records nothing
    assert trained_layout(None, None, str(chat)) == CHATML
    assert trained_layout("chatml", None, str(chat)) == CHATML
    with pytest.raises(TrainingError, match="records the prompt layout 'chatml', not 'paper'"):
        trained_layout("paper", str(chat))
    with pytest.raises(TrainingError, match="unknown prompt layout"):
        trained_layout("alpaca")


def test_a_served_model_is_read_from_the_file_or_folder_the_server_names(tmp_path):
    from langchain_selfrag.lm.remote.model import served_layout

    folder = tmp_path / "served"  # what `vllm serve FOLDER` lists as its model's id
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({CONFIG_KEY: "chatml"}))
    assert served_layout(str(folder), None).name == CHATML
    assert served_layout("qwen-chat", None) is PAPER_LAYOUT  # --served-model-name: no file here to read
    assert served_layout("qwen-chat", "chatml").name == CHATML  # ... unless the caller names the layout
    with pytest.raises(PromptLayoutError, match="records the prompt layout 'chatml', not 'paper'"):
        served_layout(str(folder), "paper")
