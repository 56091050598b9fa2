"""Passages that fit: the token budget of evidence passages, the question-over-context error, and
``selfrag eval`` chunking long documents into pooled passages."""

from __future__ import annotations

import json
import random
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

SYLLABLES = ["ka", "lo", "mer", "ti", "zan", "or", "vel", "su", "dri", "pa", "nu", "quo", "shen", "ab", "rim", "tho"]


def invented_prose(seed: int, n_words: int) -> str:
    """Deterministic made-up sentences (about 2.5 SmolLM2 tokens per word)."""
    rng = random.Random(seed)
    sentences, words = [], 0
    while words < n_words:
        n = rng.randint(6, 14)
        sentence = " ".join("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(n))
        sentences.append(sentence.capitalize() + ".")
        words += n
    return " ".join(sentences)


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
    from langchain_selfrag.evaluation.loaders import Example
    from langchain_selfrag.evaluation.systems import run_plain_rag

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


# -- with the real SmolLM2 GGUF ------------------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
    """SmolLM2 with a 1,024-token context: a full context costs ~50 s to read at 4,096 on one
    shared core, ~10 s here; the budget arithmetic is the same."""
    from langchain_selfrag.lm.llamacpp_lm import LlamaCppReflectionLM

    lm = LlamaCppReflectionLM(smollm2_gguf, n_ctx=1024)
    yield lm
    lm.close()


def test_smollm2_20000_token_passage_is_truncated_not_an_error(smollm2):
    assert smollm2.context_length == 1024
    text = invented_prose(1, 8500)
    total = len(smollm2.tokenize(text, add_bos=False))
    assert total >= 20_000
    chain = SelfRAGChain.from_retriever(smollm2, None, mode="always", k=1, max_new_tokens=2)
    out = chain.invoke({"question": "What does the chronicle say about Lodri?",
                        "passages": [Document(text, metadata={"title": "Chronicle"})]})
    entry = evidence_trace(out)
    assert entry["truncated"] is True and entry["passage_tokens_total"] == total
    # what is left of 1024 once the prompt (~30 tokens), 2 new tokens and 16 reserved are taken
    assert 900 < entry["passage_tokens"] < 1024 - 2 - RESERVED_TOKENS
    assert out["retrieved"] is True


def test_smollm2_question_over_the_context(smollm2):
    question = invented_prose(2, 600)  # ~1,500 tokens, allowed by max_question_chars
    chain = SelfRAGChain.from_retriever(smollm2, None, mode="always", k=1, max_new_tokens=2,
                                        max_question_chars=100_000)
    n_prompt = len(smollm2.tokenize(question, add_bos=True))
    with pytest.raises(QuestionExceedsContextError, match="context of 1024") as info:
        chain.invoke({"question": question, "passages": [Document("short")]})
    assert n_prompt < info.value.prompt_tokens < n_prompt + 20


# -- selfrag eval on long documents --------------------------------------------------------------
def long_squad(tmp_path):
    facts = [("Zorbania", "capital", "Quelmth"), ("Vintaro", "river", "Ossel"), ("Pelmura", "mountain", "Drask")]
    articles = []
    for n, (place, thing, name) in enumerate(facts):
        before, after = invented_prose(10 + n, 1000), invented_prose(20 + n, 1000)
        fact = f"The {thing} of {place} is {name}."
        context = f"{before} {fact} {after}"
        articles.append({"title": place, "paragraphs": [{"context": context, "qas": [{
            "id": place, "question": f"What is the {thing} of {place}?", "is_impossible": False,
            "answers": [{"text": name, "answer_start": context.index(name)}]}]}]})
    path = tmp_path / "long.json"
    path.write_text(json.dumps({"version": "v2.0", "data": articles}))
    return path


def test_eval_chunks_long_documents(monkeypatch, tmp_path, smollm2, smollm2_gguf):
    from test_eval_run import KeywordEmbeddings

    from langchain_selfrag.evaluation import cli, runner
    from langchain_selfrag.evaluation.loaders import load_dataset
    from langchain_selfrag.evaluation.retrieval import CHUNK_SIZES, corpus_chunks

    path = long_squad(tmp_path)
    corpus = load_dataset(path).corpus
    # none would fit whole even the default n_ctx of 4,096
    assert all(len(smollm2.tokenize(p.text, add_bos=False)) > 4096 for p in corpus)
    chunks = corpus_chunks(corpus)
    assert CHUNK_SIZES == {"chunk_size": 800, "chunk_overlap": 100}  # `selfrag index` defaults
    assert len(chunks) > 3 * 10 and all(len(doc.page_content) <= 800 for _, doc in chunks)
    assert {doc.metadata["title"] for _, doc in chunks} == {"Zorbania", "Vintaro", "Pelmura"}

    monkeypatch.setattr(runner, "default_embeddings", lambda: KeywordEmbeddings())
    monkeypatch.setattr(cli, "load_model", lambda _: smollm2)
    out = tmp_path / "run"
    code = cli.main([str(path), "--out", str(out), "--model", str(smollm2_gguf), "--k", "2", "--max-new-tokens", "2",
                     "--systems", "plain_rag,selfrag_always", "--no-sweeps", "--quiet"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    for name, entry in report["systems"].items():
        assert entry["n"] == 3 and entry["metrics"]["errors"] == 0, name
    for line in (out / "predictions" / "selfrag_always.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert "error" not in record and record["n_passages"] == 2
        assert not any(t["truncated"] for t in record["trace"])  # chunks fit whole
    import chromadb

    client = chromadb.PersistentClient(path=str(out / "chroma"))
    (collection,) = client.list_collections()
    assert client.get_collection(getattr(collection, "name", collection)).count() == len(chunks)
