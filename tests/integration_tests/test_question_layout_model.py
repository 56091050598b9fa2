"""A ``chatml-questions`` model built by the question head on a real chat model (SmolLM2-135M-Instruct on
llama.cpp): the GGUF records its layout and keeps the base's tensors, ``load_reflection_lm`` reads it one
question per group, the untouched groups read as the chat model's words do, the fitted IsRel is the
head's, and answers are the chat model's, with no reflection token in them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from langchain_selfrag import tokens as T
from langchain_selfrag.bundled import build_gguf
from langchain_selfrag.layout_record import path_record
from langchain_selfrag.lm import ChatReflectionLM, load_reflection_lm
from langchain_selfrag.lm.question_layout import QuestionLayoutLM
from langchain_selfrag.lm.transports import BackendTransport
from langchain_selfrag.prompts import format_prompt
from langchain_selfrag.questions import ReflectionQuestions, Turn
from training.core.hidden_states import LlamaCppHiddenStates
from training.question_head import train_question_head

from .test_relevance_head import write_training_file

QUESTION = "What is the capital of Land3?"
PASSAGES = [("Land3", "The capital of Land3 is City3."), ("Weather", "Rain in Land3 on day 7.")]


def _prompts() -> list[str]:
    head = format_prompt(QUESTION)
    return [head + T.RETRIEVAL + T.PARAGRAPH_START + f"{title}\n{text}" + T.PARAGRAPH_END for title, text in PASSAGES]


@pytest.fixture(scope="module")
def built(tmp_path_factory, smollm2_gguf):
    root = tmp_path_factory.mktemp("question-head")
    train = root / "train.jsonl"
    write_training_file(train)
    meta = train_question_head(str(smollm2_gguf), str(train), str(root / "run"), limit=24)  # $SELFRAG_THREADS
    model = build_gguf(root / "model.gguf", folder=root / "run" / "adapter", base=smollm2_gguf, outtype="keep",
                       progress=False)
    return root, meta, model


def test_the_adapter_records_the_layout_and_the_file_keeps_the_base(built, smollm2_gguf) -> None:
    import gguf

    root, meta, model = built
    assert meta["selfrag_prompt_layout"] == "chatml-questions" and meta["isrel_fitted"]
    assert sorted(meta["reflection_token_ids"]) == sorted(T.REFLECTION_TOKENS)
    assert path_record(model) == "chatml-questions"
    base = {t.name: t for t in gguf.GGUFReader(str(smollm2_gguf)).tensors}
    for tensor in gguf.GGUFReader(str(model)).tensors:
        if tensor.name.startswith("blk.0."):  # left alone by the adapter: the same bytes, the same type
            assert tensor.tensor_type == base[tensor.name].tensor_type
            assert np.array_equal(tensor.data, base[tensor.name].data)


def test_the_model_is_read_one_question_per_group(built, smollm2_gguf) -> None:
    _, _, model = built
    lm = load_reflection_lm(model, n_ctx=1024)
    chat = ChatReflectionLM(BackendTransport(load_reflection_lm(smollm2_gguf, n_ctx=1024)))
    try:
        assert isinstance(lm, QuestionLayoutLM) and lm.model_path == model
        ours, theirs = lm.generate(_prompts(), max_new_tokens=24), chat.generate(_prompts(), max_new_tokens=24)
        for a, b in zip(ours, theirs):
            assert a.answer == b.answer and not T.find_reflection_tokens(a.answer)
            got = {p.kind: p.probs for p in a.reflections}
            want = {p.kind: p.probs for p in b.reflections}
            # IsUse's words (digits) are single tokens: the same read, up to the rows' Q8_0 rounding
            if T.Kind.ISUSE in want:
                for tok, p in want[T.Kind.ISUSE].items():
                    assert got[T.Kind.ISUSE][tok] == pytest.approx(p, abs=0.02)
        retrieve = lm.candidate_probs([format_prompt(QUESTION)], [T.NO_RETRIEVAL, T.RETRIEVAL])
        words = chat.candidate_probs([format_prompt(QUESTION)], [T.NO_RETRIEVAL, T.RETRIEVAL])
        assert retrieve[0][T.RETRIEVAL] == pytest.approx(words[0][T.RETRIEVAL], abs=0.02)
    finally:
        lm.close()
        chat.close()


def test_the_fitted_isrel_is_the_heads(built, smollm2_gguf) -> None:
    root, _, model = built
    meta = json.loads((root / "run" / "adapter" / "selfrag_training.json").read_text())
    from safetensors.numpy import load_file

    rows = load_file(str(root / "run" / "adapter" / "adapter_model.safetensors"))
    rows = rows["base_model.model.model.embed_tokens.trainable_tokens_delta"]  # tied: the output rows
    ids = meta["reflection_token_ids"]
    first = min(ids.values())
    direction = (rows[ids[T.RELEVANT] - first] - rows[ids[T.IRRELEVANT] - first]).astype(np.float64)
    # the rows score the training pairs as the head does (its bias moved onto the shared direction)
    assert meta["in_sample_log_loss"]["rows"] <= meta["in_sample_log_loss"]["head"] + 0.05
    questions = ReflectionQuestions()
    lm = load_reflection_lm(model, n_ctx=1024)
    states = LlamaCppHiddenStates(smollm2_gguf, n_ctx=1024)
    try:
        isrel = lm.candidate_probs(_prompts(), [T.IRRELEVANT, T.RELEVANT])
        texts = [lm.asked.render(questions.ask(T.Kind.ISREL, Turn(QUESTION, "", t, p))) for t, p in PASSAGES]
        by_rows = states.last_hidden(texts).astype(np.float64) @ direction
        # the rows are Q8_0 in the file and llama.cpp quantises activations; this toy head is steep
        # (log-odds about 20), so its Q8_0 rounding shows in the odds, not in the probabilities
        assert [p[T.RELEVANT] for p in isrel] == pytest.approx(list(1 / (1 + np.exp(-by_rows))), abs=0.02)
        assert isrel[0][T.RELEVANT] > isrel[1][T.RELEVANT]
    finally:
        lm.close()
        states.close()


def test_a_chain_over_the_model_answers_from_the_relevant_passage(built) -> None:
    from langchain_core.documents import Document

    from langchain_selfrag.chain import SelfRAGChain

    _, _, model = built
    lm = load_reflection_lm(model, n_ctx=1024)
    docs = [Document(text, metadata={"source": f"{title}.md", "title": title}) for title, text in PASSAGES]
    try:
        out = SelfRAGChain.from_retriever(lm, lambda q: docs, mode="always", abstain_isrel=0.0,
                                          abstain_issup=0.0).invoke(QUESTION)
        assert not out["abstained"] and "City3" in out["answer"]
        chosen = [c for c in out["trace"] if c["chosen"]]
        assert [c["passage"] for c in chosen] == [0]  # the passage that states it (citing also needs IsSup)
        assert chosen[0]["isrel"] > max(c["isrel"] for c in out["trace"] if c["passage"] == 1)
    finally:
        lm.close()


def test_an_untrained_isrel_reads_no_features_and_is_the_bases_own_yes(tmp_path, smollm2_gguf) -> None:
    # a base already trained to judge (training.judge_sft's merged GGUF) keeps its own Yes / No for IsRel
    meta = train_question_head(str(smollm2_gguf), None, str(tmp_path / "run"), fit_isrel=False)
    assert not meta["isrel_fitted"] and "relevance_head" not in meta
    assert not (tmp_path / "run" / "features").exists()
    model = build_gguf(tmp_path / "model.gguf", folder=tmp_path / "run" / "adapter", base=smollm2_gguf,
                       outtype="keep", progress=False)
    lm = load_reflection_lm(model, n_ctx=1024)
    chat = ChatReflectionLM(BackendTransport(load_reflection_lm(smollm2_gguf, n_ctx=1024)))
    try:
        ours = lm.candidate_probs(_prompts(), [T.IRRELEVANT, T.RELEVANT])
        theirs = chat.candidate_probs(_prompts(), [T.IRRELEVANT, T.RELEVANT])
        assert [p[T.RELEVANT] for p in ours] == pytest.approx([p[T.RELEVANT] for p in theirs], abs=0.02)
    finally:
        lm.close()
        chat.close()


# Passages long enough to be kept (more than 32 tokens), asked about by two questions.
LONG_PASSAGES = [
    ("Land3", "The capital of Land3 is City3, a port on the northern coast. City3 has been the seat of the "
              "council since the old capital, City9, was abandoned after the floods of day 40."),
    ("Weather", "Rain fell in Land3 on day 7 and again on day 12. The northern coast is wetter than the "
                "southern hills, where the harvest begins on day 30 in most years."),
]
OTHER_QUESTION = "Which city is the seat of the council of Land3?"


def _long_prompts(question: str) -> list[str]:
    head = format_prompt(question)
    return [head + T.RETRIEVAL + T.PARAGRAPH_START + f"{t}\n{p}" + T.PARAGRAPH_END for t, p in LONG_PASSAGES]


def _counting_decodes(lm) -> list[int]:
    """Count the tokens the backend decodes from now on."""
    backend, counted = lm._model, []
    decode = backend._decode_entries
    backend._decode_entries = lambda entries: counted.append(len(entries)) or decode(entries)
    return counted


def _relevant(probs) -> list[float]:
    return [p[T.RELEVANT] for p in probs]


def test_a_restored_passage_reads_exactly_as_one_decoded(built, tmp_path, monkeypatch) -> None:
    _, _, model = built
    monkeypatch.setenv("SELFRAG_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SELFRAG_PREFIX_CACHE_MB", "0")
    plain = load_reflection_lm(model, n_ctx=2048)
    monkeypatch.delenv("SELFRAG_PREFIX_CACHE_MB")
    first, second = load_reflection_lm(model, n_ctx=2048), load_reflection_lm(model, n_ctx=2048)
    prompt = _long_prompts(QUESTION)[1:]
    try:
        assert first.reads_passages_once and not plain.reads_passages_once
        whole = _counting_decodes(first)
        assert _relevant(first.candidate_probs(prompt, [T.IRRELEVANT, T.RELEVANT])) == pytest.approx(
            _relevant(plain.candidate_probs(prompt, [T.IRRELEVANT, T.RELEVANT])), abs=1e-12)
        assert len(list((tmp_path / "prefix-states").glob("*.kv"))) == 1
        counted = _counting_decodes(second)
        other = _long_prompts(OTHER_QUESTION)[1:]
        restored = second.candidate_probs(other, [T.IRRELEVANT, T.RELEVANT])
        decoded = plain.candidate_probs(other, [T.IRRELEVANT, T.RELEVANT])
        # its cells where a whole decode puts them, the restored passage reads bit for bit as decoded
        assert _relevant(restored) == pytest.approx(_relevant(decoded), abs=1e-12)
        assert sum(counted) < sum(whole) - 40  # the passage (about 55 tokens) was restored, not decoded
    finally:
        for lm in (plain, first, second):
            lm.close()


def test_the_passages_of_a_batch_are_saved_and_restored(built, tmp_path, monkeypatch) -> None:
    _, _, model = built
    monkeypatch.setenv("SELFRAG_CACHE_DIR", str(tmp_path))
    lm = load_reflection_lm(model, n_ctx=2048)
    monkeypatch.setenv("SELFRAG_PREFIX_CACHE_MB", "0")
    plain = load_reflection_lm(model, n_ctx=2048)
    try:
        lm.candidate_probs(_long_prompts(QUESTION), [T.IRRELEVANT, T.RELEVANT])
        saved = sorted((tmp_path / "prefix-states").glob("*.kv"))
        assert len(saved) == 2  # one per passage
        counted, plain_counted = _counting_decodes(lm), _counting_decodes(plain)
        again = lm.candidate_probs(_long_prompts(OTHER_QUESTION), [T.IRRELEVANT, T.RELEVANT])
        plain.candidate_probs(_long_prompts(OTHER_QUESTION), [T.IRRELEVANT, T.RELEVANT])
        assert sum(counted) < sum(plain_counted) - 80  # both passages restored, only the questions decoded
        assert sorted((tmp_path / "prefix-states").glob("*.kv")) == saved
        # (batched cells sit elsewhere than a whole decode's: this toy head, log-odds about 30, turns that
        # rounding into large swings; the bundled model's agreement is measured in docs/performance.md)
        assert again[0][T.RELEVANT] > again[1][T.RELEVANT]
        # the answer request reuses the restored passage's cells: no reflection token in the answer
        assert all(not T.find_reflection_tokens(g.answer) for g in lm.generate(_long_prompts(OTHER_QUESTION),
                                                                                max_new_tokens=16))
    finally:
        lm.close()
        plain.close()


def test_passages_are_read_ahead_once(built, tmp_path, monkeypatch) -> None:
    from langchain_core.documents import Document

    from langchain_selfrag.passage_reads import read_ahead

    _, _, model = built
    monkeypatch.setenv("SELFRAG_CACHE_DIR", str(tmp_path))
    docs = [Document(text, metadata={"source": f"{title}.md", "title": title}) for title, text in LONG_PASSAGES]
    lm = load_reflection_lm(model, n_ctx=2048)
    try:
        progress: list[tuple[int, int]] = []
        assert read_ahead(lm, docs, lambda done, total: progress.append((done, total))) == (2, 0, 0)
        assert progress == [(2, 2)]
        assert read_ahead(lm, docs + docs[:1]) == (0, 3, 0)
        counted = _counting_decodes(lm)
        lm.candidate_probs(_long_prompts(QUESTION), [T.IRRELEVANT, T.RELEVANT])
        assert 0 < sum(counted) < 90  # the two question parts (about 40 tokens each), no passage
    finally:
        lm.close()


def test_reading_ahead_stops_when_the_folder_is_full(built, tmp_path, monkeypatch) -> None:
    from langchain_core.documents import Document

    from langchain_selfrag.passage_reads import read_ahead

    _, _, model = built
    monkeypatch.setenv("SELFRAG_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SELFRAG_PREFIX_CACHE_MB", "2")  # a passage of this model is about 1.5 MB
    docs = [Document(text, metadata={"title": title}) for title, text in LONG_PASSAGES]
    lm = load_reflection_lm(model, n_ctx=2048)
    try:
        assert read_ahead(lm, docs) == (1, 0, 1)
        assert len(list((tmp_path / "prefix-states").glob("*.kv"))) == 1
    finally:
        lm.close()


def test_selfrag_index_reads_ahead(built, bundled_gguf, tmp_path, monkeypatch, capsys) -> None:
    from langchain_selfrag.cli import main

    _, _, model = built
    monkeypatch.setenv("SELFRAG_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "docs"
    folder.mkdir()
    for title, text in LONG_PASSAGES:
        (folder / f"{title}.md").write_text(f"# {title}\n\n{text}\n")
    index = ["index", str(folder), "--store", str(tmp_path / "store"), "--quiet", "--read-ahead"]
    assert main([*index, "--model", str(model)]) == 0
    assert "read 2 passage(s) ahead" in capsys.readouterr().out
    assert main([*index, "--model", str(model)]) == 0
    out = capsys.readouterr().out
    assert "read 0 passage(s) ahead" in out and "(2 read before)" in out
    # a model in the paper's layout reads each passage with its question: indexed, and a note says so
    assert main([*index, "--model", str(bundled_gguf)]) == 0
    err = capsys.readouterr().err
    assert "nothing to read ahead" in err and "Traceback" not in err
