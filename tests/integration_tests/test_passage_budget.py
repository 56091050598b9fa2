"""Passages that fit: the token budget of evidence passages, the question-over-context error, and
``selfrag eval`` chunking long documents into pooled passages."""

from __future__ import annotations

import json
import random

import pytest
from langchain_core.documents import Document

from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.errors import QuestionExceedsContextError
from langchain_selfrag.passage_budget import (
    RESERVED_TOKENS,
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


def evidence_trace(out) -> dict:
    (entry,) = [t for t in out["trace"] if t["passage"] is not None]
    return entry


# -- with the real SmolLM2 GGUF ------------------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
    """SmolLM2 with a 1,024-token context: a full context costs ~50 s to read at 4,096 on one
    shared core, ~10 s here; the budget arithmetic is the same."""
    from langchain_selfrag.lm.llamacpp import LlamaCppReflectionLM

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
    from keyword_embeddings import KeywordEmbeddings

    from langchain_selfrag.evaluation import cli
    from langchain_selfrag.evaluation.qa import runner
    from langchain_selfrag.evaluation.qa.loaders import load_dataset
    from langchain_selfrag.evaluation.qa.retrieval import CHUNK_SIZES, corpus_chunks

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
