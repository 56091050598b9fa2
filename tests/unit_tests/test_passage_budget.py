"""Passages that fit: the token budget of evidence passages, the question-over-context error, and
``selfrag eval`` chunking long documents into pooled passages."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from langchain_core.documents import Document

from langchain_selfrag import cli as selfrag_cli
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.config import ConfigError, SelfRAGConfig
from langchain_selfrag.errors import InvalidInputError, QuestionExceedsContextError, QuestionTooLongError
from langchain_selfrag.fakes import FakeReflectionLM
from langchain_selfrag.passage_budget import (
    RESERVED_TOKENS,
    FittedPassage,
    fit_text,
    passage_budget,
    prompt_room,
)


@dataclass(eq=False)
class WordFake(FakeReflectionLM):
    """FakeReflectionLM with a whitespace tokenizer (one token per word, ``<s>`` as BOS) and a context."""

    context_length: int = 300

    def tokenize(self, text: str, *, add_bos: bool) -> list[str]:
        return (["<s>"] if add_bos else []) + text.split()

    def decode(self, ids) -> str:
        return " ".join(ids)


WORDS = " ".join(f"w{i}" for i in range(1000))
# "### Instruction:\nWhere is X?\n\n### Response:\n" is 7 words, 8 tokens with <s>; the evidence
# markup adds "[Retrieval]<paragraph>Doc" and "</paragraph>": 10 tokens around an empty passage.
QUESTION = "Where is X?"


def ask(lm, passage: str = WORDS, **settings):
    chain = SelfRAGChain.from_retriever(lm, None, mode="always", k=1, max_new_tokens=10, **settings)
    return chain.invoke({"question": QUESTION, "passages": [Document(passage, metadata={"title": "Doc"})]})


def evidence_trace(out) -> dict:
    (entry,) = [t for t in out["trace"] if t["passage"] is not None]
    return entry


# -- the arithmetic -----------------------------------------------------------------------------
def test_passage_budget_by_hand():
    assert RESERVED_TOKENS == 16
    # short form: 4096 - 50 (frame) - 100 (answer) - 16 (reserve)
    assert passage_budget(4096, 50, 20, 100) == 3930
    # long form, 3 segments to go: 4096 - 50 - 116 - 2 * (20 + 116) = 3658, split three ways
    assert passage_budget(4096, 50, 20, 100, segments=3) == 1219
    assert passage_budget(4096, 50, 20, 100, limit=500) == 500
    assert passage_budget(4096, 50, 20, 100, limit=5000) == 3930  # a limit never raises the fit
    assert passage_budget(None, 50, 20, 100) is None and passage_budget(None, 50, 20, 100, limit=64) == 64
    assert passage_budget(200, 150, 20, 100) == -66  # even an empty passage overflows by 66
    with pytest.raises(ValueError):
        passage_budget(4096, 50, 20, 100, segments=0)
    assert prompt_room(4096, 4000, 100) == -20 and prompt_room(4096, 1000, 100, segments=3) == 2748


def test_long_form_split_leaves_room_for_later_segments():
    # depth 0 takes 1219; after a 100-token segment, depth 1 (2 to go) still gets at least as much
    frame1 = 50 + 1219 + 100 + 20
    assert passage_budget(4096, frame1, 20, 100, segments=2) == 1227
    assert frame1 + 1227 + 100 + 20 + 100 + 2 * RESERVED_TOKENS <= 4096


def test_fit_text_with_a_word_tokenizer():
    def words(text):
        return text.split()

    def join(ids):
        return " ".join(ids)

    assert fit_text("a b c d e", 3, words, join) == FittedPassage("a b c", 3, 5)
    assert fit_text("a b c d e", 3, words, join).truncated
    whole = fit_text("a  b c", 3, words, join)
    assert whole == FittedPassage("a  b c", 3, 3) and not whole.truncated  # a fitting text is untouched
    assert fit_text("a b", None, words, join) == FittedPassage("a b", 2, 2)
    assert fit_text("a b", 0, words, join) == FittedPassage("", 0, 2)
    assert fit_text("", 5, words, join) == FittedPassage("", 0, 0)
    # a cut inside a multi-byte character loses the half character, not the text
    assert fit_text("xy", 1, list, lambda ids: "".join(ids) + "\ufffd").text == "x"


# -- in the graph, with a word-tokenizing fake ---------------------------------------------------
def test_long_passage_is_cut_to_what_fits():
    lm = WordFake()
    out = ask(lm)
    entry = evidence_trace(out)
    # 300 - 10 (frame) - 10 (max_new_tokens) - 16 (reserve) = 264 words of passage
    assert entry["truncated"] is True
    assert (entry["passage_tokens"], entry["passage_tokens_total"]) == (264, 1000)
    (prompts, _, _), = lm.calls_of("generate")
    assert prompts[0].endswith(" w262 w263</paragraph>")
    assert "[Retrieval]<paragraph>Doc\nw0 " in prompts[0]  # the title is kept
    assert len(lm.tokenize(prompts[0], add_bos=True)) + 10 + RESERVED_TOKENS <= lm.context_length
    assert out["passages"][0].page_content == WORDS  # the document itself is not changed


def test_limit_and_short_passages():
    assert evidence_trace(ask(WordFake(), max_passage_tokens=50))["passage_tokens"] == 50
    assert evidence_trace(ask(WordFake(), max_passage_tokens=10_000))["passage_tokens"] == 264
    short = evidence_trace(ask(WordFake(), passage="w0 w1 w2"))
    assert (short["truncated"], short["passage_tokens"], short["passage_tokens_total"]) == (False, 3, 3)
    # a model without a tokenizer gets passages whole, and says nothing about them
    plain = FakeReflectionLM()
    entry = evidence_trace(ask(plain))
    assert entry["truncated"] is False and entry["passage_tokens"] is None
    assert plain.calls_of("generate")[0][0][0].endswith("w999</paragraph>")


def test_eval_plain_rag_cuts_the_same_way():
    from langchain_selfrag.evaluation.qa.data import Example
    from langchain_selfrag.evaluation.qa.systems import run_plain_rag

    lm = WordFake()
    run_plain_rag(lm, Example(id="q", question=QUESTION, answers=["w1"]),
                  [Document(WORDS, metadata={"title": "Doc"})], 10)
    (prompts, _, _), = lm.calls_of("generate")
    assert prompts[0].endswith(" w262 w263</paragraph>")


def test_long_form_budget_at_depth_zero():
    entry = evidence_trace(ask(WordFake(), long_form=True, max_segments=3))
    # (300 - 10 - 26 - 2 * (2 + 26)) // 3 = 69: room kept for two more segments and their passages
    assert (entry["truncated"], entry["passage_tokens"]) == (True, 69)


def test_question_over_the_context_is_a_clear_error_before_decoding():
    lm = WordFake()
    question = " ".join(["why"] * 290)
    chain = SelfRAGChain.from_retriever(lm, None, mode="always", k=1, max_new_tokens=10)
    with pytest.raises(QuestionExceedsContextError) as info:
        chain.invoke({"question": question, "passages": [Document("short")]})
    err = info.value
    assert isinstance(err, QuestionTooLongError) and isinstance(err, InvalidInputError)
    # <s> + 4 prompt words + 290 question words, then 10 + 16 for the answer: 321 > 300
    assert (err.prompt_tokens, err.answer_tokens, err.context_length) == (295, 26, 300)
    assert "295 tokens" in str(err) and "321 tokens" in str(err) and "context of 300" in str(err)
    assert lm.calls == []  # nothing was decoded
    # long form needs room for every segment
    with pytest.raises(QuestionExceedsContextError, match="needs 78 more"):
        SelfRAGChain.from_retriever(WordFake(), None, long_form=True, max_segments=3, max_new_tokens=10).invoke(
            " ".join(["why"] * 250))


def test_knob_validation_and_cli_flag(capsys):
    assert SelfRAGConfig().max_passage_tokens is None
    assert SelfRAGConfig(max_passage_tokens=64).max_passage_tokens == 64
    for bad in (0, -5, 2.5, True, "64"):
        with pytest.raises(ConfigError, match="max_passage_tokens"):
            SelfRAGConfig(max_passage_tokens=bad)
    args = selfrag_cli.build_parser().parse_args(["ask", "q", "--max-passage-tokens", "64"])
    assert selfrag_cli._settings(args)["max_passage_tokens"] == 64
    assert selfrag_cli.main(["ask", "q", "--max-passage-tokens", "0", "--mode", "never"]) == 2
    assert "max_passage_tokens must be a positive integer" in capsys.readouterr().err
