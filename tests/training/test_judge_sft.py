"""IsRel SFT end to end on a tiny Qwen2 model: LoRA in the base's own vocabulary, the held-out report, and
the merged GGUF asked on llama.cpp (ChatReflectionLM) answering as the trained model answers in transformers."""

from __future__ import annotations

import dataclasses
import json
from types import MappingProxyType

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")
pytest.importorskip("llama_cpp")

import gguf  # noqa: E402
from tiny_models import build_tiny_qwen2_model  # noqa: E402

from langchain_selfrag import tokens as T  # noqa: E402
from langchain_selfrag.export.gguf import export_gguf  # noqa: E402
from langchain_selfrag.lm import ChatReflectionLM, load_reflection_lm  # noqa: E402
from langchain_selfrag.prompts import format_prompt, with_evidence  # noqa: E402
from langchain_selfrag.questions import ReflectionQuestions, Turn, in_chatml  # noqa: E402
from training.core.adapters import load_trained, prepare_model  # noqa: E402
from training.core.config import META_FILE, SFTRunConfig  # noqa: E402
from benchmarks import judge_heldout  # noqa: E402
from training.judge_sft import (answer_records, main, read_pairs, train_judge, trained_questions,  # noqa: E402
                                write_judge_gguf, yes_shares)

#: measured on this tiny model, f32 files: 1.6e-5 between transformers and llama.cpp
F32_TOL = 1e-3


def single_token_words(tokenizer, words):
    return [w for w in words if len(tokenizer(w, add_special_tokens=False)["input_ids"]) == 1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("judge")
    base = build_tiny_qwen2_model(folder / "base", reflection_tokens=False)
    base_gguf = export_gguf(base, folder / "base.gguf", outtype="f32")
    _, tokenizer, _ = prepare_model(str(base_gguf), add_tokens=False)
    words = single_token_words(tokenizer, ["Yes", "No", "a", "b", "c"])
    assert len(words) >= 2, "the tiny vocabulary has no two one-token words to answer with"
    defaults = ReflectionQuestions()
    prompt = dataclasses.replace(defaults, answer_words=MappingProxyType(
        {**defaults.answer_words, T.Kind.ISREL: MappingProxyType({words[0]: T.RELEVANT, words[1]: T.IRRELEVANT})}))
    sentences = ["The river reads a long letter before noon.", "A small cat paints the evening sky in 1914.",
                 "Our teacher visits the wooden bridge with great care.", "The quiet city finds three questions."]
    pairs = [{"question": f"Who {verb} it?", "title": "Notes", "passage": sentences[n % 4], "label": n % 2,
              "variant": "doc_relevant" if n % 2 else "doc_near_miss"}
             for n, verb in enumerate(["reads", "paints", "visits", "finds", "wrote", "follows", "answers", "remembers"])]
    path = folder / "pairs.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    return folder, base_gguf, prompt, pairs, path


def test_a_trained_judge_runs_on_llama_cpp_as_it_judged_in_transformers(tiny):
    folder, base_gguf, prompt, pairs, path = tiny
    cfg = SFTRunConfig(str(base_gguf), str(path), str(folder / "run"), max_steps=3, batch_size=4, save_steps=100,
                       learning_rate=5e-2, threads=1, max_length=256)
    result = train_judge(cfg, prompt)
    meta = json.loads((result.adapter_dir / META_FILE).read_text())
    assert meta["reflection_token_ids"] == {} and meta["config"]["method"] == "judge_sft"
    assert meta["config"]["pairs"] == len(pairs) and meta["steps"] == 3
    assert not json.loads((result.adapter_dir / "adapter_config.json").read_text()).get("trainable_token_indices")

    assert trained_questions(result.adapter_dir) == prompt  # the held-out report asks as training did
    judge_heldout.main(["--adapter", str(result.adapter_dir), "--eval-file", str(path), "--json", str(folder / "r.json")])
    figures = json.loads((folder / "r.json").read_text())["figures"]
    assert figures["heldout"]["pairs"] == len(pairs) and set(figures["heldout"]["all"]) == {"untrained", "trained"}
    assert figures["heldout"]["doc_near_miss"]["pairs"] == len(pairs)
    assert figures["training"]["steps"] == 3 and figures["training"]["pairs"] == len(pairs)

    merged, tokenizer, _ = load_trained(result.adapter_dir)
    trained = yes_shares(merged, tokenizer, pairs, prompt)
    base, _, _ = prepare_model(str(base_gguf), add_tokens=False)
    assert abs(trained - yes_shares(base, tokenizer, pairs, prompt)).max() > 0.01  # the adapter changed the judge

    out = write_judge_gguf(str(base_gguf), result.adapter_dir, folder / "judge.gguf", outtype="f32")
    vocab = lambda p: len(gguf.GGUFReader(str(p)).fields["tokenizer.ggml.tokens"].data)  # noqa: E731
    assert vocab(out) == vocab(base_gguf)  # no reflection tokens appended: the judge answers in words
    judge = ChatReflectionLM(load_reflection_lm(str(out), n_threads=1, n_ctx=1024), questions=prompt)
    try:
        isrel = judge.candidate_probs([with_evidence(format_prompt(p["question"]), p["title"], p["passage"]) for p in pairs],
                                      [T.RELEVANT, T.IRRELEVANT])
    finally:
        judge.close()
    assert max(abs(r[T.RELEVANT] - t) for r, t in zip(isrel, trained)) < F32_TOL


def test_the_command_says_what_is_wrong_with_its_data(tiny, tmp_path, capsys):
    _, base_gguf, _, _, _ = tiny
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "Q?", "passage": "P."}) + "\n")
    with pytest.raises(SystemExit) as exc:
        main(["--base-model", str(base_gguf), "--train-file", str(bad), "--output-dir", str(tmp_path / "run")])
    assert exc.value.code == 2
    assert "row 1 is neither a Self-RAG record" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["--base-model", str(tmp_path / "missing"), "--train-file", str(bad), "--output-dir", str(tmp_path / "r"),
              "--eval-only", "--gguf-out", str(tmp_path / "j.gguf")])
    assert exc.value.code == 2


def test_pairs_too_long_to_train_on_are_counted_aloud(tiny, tmp_path, capsys):
    _, base_gguf, prompt, pairs, _ = tiny
    long_pair = {**pairs[0], "passage": " ".join([pairs[0]["passage"]] * 60)}
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in [*pairs, long_pair]))
    assert main(["--base-model", str(base_gguf), "--train-file", str(path), "--output-dir", str(tmp_path / "run"),
                 "--max-length", "128", "--max-steps", "1", "--batch-size", "4", "--threads", "1", "--bf16", "false"]) == 0
    out, err = capsys.readouterr()
    assert f"left out 1 of {len(pairs) + 1} records" in err and "--max-length" in err
    summary = out[out.index('{\n "adapter"'):]
    assert json.loads(summary[: summary.index("}") + 1])["dropped_too_long"] == 1
    meta = json.loads((tmp_path / "run" / "adapter" / META_FILE).read_text())
    assert meta["dropped_too_long"] == 1 and meta["examples"] == len(pairs)


def test_answer_records_ask_as_the_question_model_asks_and_train_only_relevant_answered_pairs(tmp_path):
    pairs = [{"question": "Who reads it?", "title": "Notes", "passage": "The river reads.", "label": 1, "answer": "The river"},
             {"question": "Who paints it?", "title": "Notes", "passage": "A cat sleeps.", "label": 0, "answer": "x"},
             {"question": "Who visits it?", "title": "", "passage": "Our teacher visits.", "label": 1},
             {"question": "Who finds it?", "title": "Notes", "passage": "The city finds.", "label": 1, "answer": "The city"}]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    read = read_pairs(path)
    assert [p.get("answer") for p in read] == ["The river", "x", None, "The city"]
    questions = ReflectionQuestions()
    records = answer_records(read, questions, limit=5)
    assert [r["output"] for r in records] == ["The river", "The city"]
    turn = Turn("Who reads it?", "", "Notes", "The river reads.")
    assert records[0]["prompt"] == in_chatml(questions.answer(turn))  # the writer's own request
    assert "Answer the question from the passage" in records[0]["prompt"]
    assert [r["output"] for r in answer_records(read, questions, limit=1)] == ["The river"]
