"""``answer_form="sentence"``: the answer is the cited passage's sentence that holds the model's words."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_selfrag.abstention import (
    AbstentionCalibration,
    CalibrationError,
    calibrated_config,
    sidecar_path,
)
from langchain_selfrag.answer_sentence import passage_sentences, quoted_answer, sentence_with
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.config import ConfigError, SelfRAGConfig
from langchain_selfrag.evaluation.qa import abstention as A
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment
from tests.unit_tests.test_abstention import bm25

README_LIKE = """Colour

termcolor obeys these rules, in order:

1. Setting the NO_COLOR environment variable to any non-empty value
   disables colour.
2. Setting the FORCE_COLOR environment variable to any non-empty value forces colour.

>>> humanize.naturalsize(1_000_000)
'1.0 MB'

The project is released under the MIT License. It was submitted by Dr. Ada Vell in 2020.
Dr. Ada Vell wrote the parser."""

TAMSIN = "The clock has four faces and a bell named Old Tamsin that strikes every hour."


def test_passage_sentences_join_wrapped_lines_and_keep_list_items_apart() -> None:
    got = passage_sentences(README_LIKE)
    assert "Setting the NO_COLOR environment variable to any non-empty value disables colour." in got
    assert "Setting the FORCE_COLOR environment variable to any non-empty value forces colour." in got
    assert ">>> humanize.naturalsize(1_000_000) '1.0 MB'" in got  # a doctest output stays with its call
    assert "It was submitted by Dr. Ada Vell in 2020." in got  # "Dr." ends no sentence
    assert "1." not in got and "Colour" in got


def test_sentence_with_matches_whole_words_and_prefers_the_sentence_the_question_asks_about() -> None:
    assert sentence_with("FORCE_COLOR", README_LIKE) == (
        "Setting the FORCE_COLOR environment variable to any non-empty value forces colour.")
    assert sentence_with("MIT", README_LIKE) == "The project is released under the MIT License."  # not "subMITted"
    assert sentence_with("1.0 MB", README_LIKE) == ">>> humanize.naturalsize(1_000_000) '1.0 MB'"
    assert sentence_with("Dr. Ada Vell", README_LIKE, "Who wrote the parser?") == "Dr. Ada Vell wrote the parser."
    assert sentence_with("Dr. Ada Vell", README_LIKE, "When was it submitted?") == (
        "It was submitted by Dr. Ada Vell in 2020.")
    assert sentence_with("Ada Vell wrote", README_LIKE, "Who?") == "Dr. Ada Vell wrote the parser."
    # not in the passage word for word, nothing to quote, or already the whole sentence: no sentence
    assert sentence_with("GPL", README_LIKE) is None
    assert sentence_with("...", README_LIKE) is None
    assert sentence_with("Dr. Ada Vell wrote the parser", README_LIKE) is None
    assert quoted_answer("GPL", README_LIKE) == "GPL" and quoted_answer("MIT", None) == "MIT"


def test_a_sentence_that_holds_most_of_the_answers_words_in_another_form_is_quoted() -> None:
    changelog = ("If you had a spec broken by this, you can quick-fix it without downgrading by setting "
                 "`glom.core.PATH_STAR = False`. Paths are now split on stars.")
    assert sentence_with("set glom.core.PATH_STAR = False", changelog).startswith("If you had a spec broken")
    assert sentence_with("--target-file TARGET_FILE", "Save it to a file and use ``--target-file`` to do it. "
                         "Then run it.") == "Save it to a file and use ``--target-file`` to do it."
    # too few of its words, one word alone, or only empty words: nothing is quoted
    assert sentence_with("downgrade the brass pipeline", changelog) is None
    assert sentence_with("splitting", changelog) is None
    assert sentence_with("no, true", changelog) is None


def tamsin_lm(text: str = "Old Tamsin.") -> FakeReflectionLM:
    return FakeReflectionLM(retrieve=0.9, passages={"Old Tamsin": FakeSegment(text, isrel=0.97)},
                            default=FakeSegment("A guess.", isrel=0.05, issup="partial"))


def test_the_chain_quotes_the_sentence_that_holds_the_answer_and_keeps_the_generation_in_the_trace(
        tmp_path: Path) -> None:
    question = "What is the bell of the Dunmore Clock called?"
    out = SelfRAGChain(tamsin_lm(), bm25(), SelfRAGConfig(answer_form="sentence")).invoke(question)
    assert not out["abstained"] and out["answer"] == TAMSIN
    assert [d.metadata["source"] for d in out["citations"]] == ["dunmore_clock.txt"]
    chosen = [t for t in out["trace"] if t["chosen"]]
    assert chosen[0]["text"] == "Old Tamsin." and chosen[0]["answer"] == TAMSIN
    generated = SelfRAGChain(tamsin_lm(), bm25(), SelfRAGConfig(answer_form="generated")).invoke(question)
    # options (closed set) are never quoted: the answer is the option
    options = SelfRAGChain(tamsin_lm(), bm25(), SelfRAGConfig(answer_form="sentence"))
    assert options.invoke({"question": question, "options": ["Old Tamsin", "Big Ben"]})["answer"] == "Old Tamsin."
    # generated form, and the paper's preset: the model's own words
    assert generated["answer"] == "Old Tamsin."
    assert SelfRAGConfig.paper().answer_form == "generated"
    # the model's words in another order or form: the sentence that holds them; words it does not hold: as generated
    paraphrase = SelfRAGChain(tamsin_lm("Old Tamsin, a bell."), bm25(), SelfRAGConfig(answer_form="sentence"))
    assert paraphrase.invoke(question)["answer"] == TAMSIN
    invented = SelfRAGChain(tamsin_lm("A brass bell."), bm25(), SelfRAGConfig(answer_form="sentence"))
    assert invented.invoke(question)["answer"] == "A brass bell."
    # an abstained run's would-be answer is the sentence too (what the calibration judges)
    strict = SelfRAGChain(tamsin_lm(), bm25(), SelfRAGConfig(answer_form="sentence", abstain_isrel=0.99))
    held = strict.invoke(question)
    assert held["abstained"] and A.chosen_text(held) == TAMSIN


def test_the_answer_form_comes_from_the_models_calibration_else_generated(tmp_path: Path) -> None:
    lm = tamsin_lm()
    lm.model_path = str(tmp_path / "mine.gguf")
    assert SelfRAGConfig().answer_form is None
    assert calibrated_config(SelfRAGConfig(), lm).answer_form == "generated"
    cal = AbstentionCalibration("mine.gguf", 0.4, 0.1, answer_form="sentence")
    cal.save(sidecar_path(lm.model_path))
    assert AbstentionCalibration.load(sidecar_path(lm.model_path)) == cal
    chain = SelfRAGChain(lm, bm25())
    assert (chain.config.answer_form, chain.config.abstain_isrel) == ("sentence", 0.4)
    assert chain.invoke("What is the bell of the Dunmore Clock called?")["answer"] == TAMSIN
    assert SelfRAGChain(lm, bm25(), SelfRAGConfig(answer_form="generated")).config.answer_form == "generated"
    # explicit bars do not stop the form from being filled in
    assert calibrated_config(SelfRAGConfig(abstain_isrel=0.2, abstain_issup=0.0), lm).answer_form == "sentence"
    # a calibration without a form reads and writes as before
    plain = AbstentionCalibration("mine.gguf", 0.4, 0.1)
    assert "answer_form" not in plain.to_dict() and AbstentionCalibration.from_dict(plain.to_dict()) == plain
    with pytest.raises(CalibrationError, match="answer_form"):
        AbstentionCalibration("mine.gguf", 0.4, 0.1, answer_form="paraphrase")
    with pytest.raises(ConfigError, match="answer_form"):
        SelfRAGConfig(answer_form="quote")


def test_table_rows_and_long_units_are_not_quoted_whole() -> None:
    table = ("Benchmarks\n\n| | ujson | json\nArray with 256 doubles | | |\nencode | 18,282 | 5,935\n"
             "decode | 28,765 | 13,367\n\n" + "word " * 70 + "with 42 in it")
    units = passage_sentences(table)
    assert "encode | 18,282 | 5,935" in units and "decode | 28,765 | 13,367" in units
    assert sentence_with("18,282", table) == "encode | 18,282 | 5,935"
    assert sentence_with("42", table) is None  # a 70-word unit is no quote


def test_wrapped_lines_stay_in_their_sentence_and_empty_words_are_not_quoted() -> None:
    assert passage_sentences("## Usage\nThe tool runs fast on big\ninputs and uses 4 threads.") == [
        "Usage", "The tool runs fast on big inputs and uses 4 threads."]
    assert passage_sentences("1. Setting NO_COLOR to any non-empty\nvalue disables colour.") == [
        "Setting NO_COLOR to any non-empty value disables colour."]  # a lazy continuation line
    wrapped = "The town grew from 40 people in 1900 to\n250. Most of it was built after the war."
    assert sentence_with("250", wrapped) == "The town grew from 40 people in 1900 to 250."
    for empty in ("No", "the", "True"):
        assert sentence_with(empty, "No one knows. It was true. The end came.") is None


def test_only_a_cited_passage_is_quoted() -> None:
    lm = FakeReflectionLM(retrieve=0.9, default=FakeSegment("Old Tamsin", isrel=0.1, issup="none"))
    out = SelfRAGChain(lm, bm25(), SelfRAGConfig.paper(answer_form="sentence")).invoke(
        "What is the bell of the Dunmore Clock called?")
    assert out["citations"] == [] and out["answer"] == "Old Tamsin"  # judged irrelevant: not cited, not quoted


def test_a_stale_sidecar_does_not_block_bars_set_by_hand(tmp_path: Path) -> None:
    lm = tamsin_lm()
    lm.model_path = str(tmp_path / "new.gguf")
    AbstentionCalibration("old.gguf", 0.4, 0.1, answer_form="sentence").save(sidecar_path(lm.model_path))
    by_hand = calibrated_config(SelfRAGConfig(abstain_isrel=0.5, abstain_issup=0.2), lm)
    assert (by_hand.abstain_isrel, by_hand.answer_form) == (0.5, "generated")
    with pytest.raises(CalibrationError, match="fitted for old.gguf"):
        calibrated_config(SelfRAGConfig(), lm)  # the bars would come from it


def test_the_server_context_offers_every_setting() -> None:
    import typing
    from dataclasses import fields

    from langchain_selfrag.graph.context import ServerContext

    assert {f.name for f in fields(SelfRAGConfig)} <= set(typing.get_type_hints(ServerContext))
