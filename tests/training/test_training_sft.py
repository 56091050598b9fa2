"""Generator/critic SFT: token addition, record encoding, collator masking, end-to-end runs, resume."""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")

from tiny_models import build_tiny_qwen2_model, plain_tiny_model, write_sft_records  # noqa: E402

from langchain_selfrag import tokens as T  # noqa: E402
from langchain_selfrag.export.hf import add_reflection_tokens, load_base, reflection_token_ids  # noqa: E402
from training.core.adapters import load_trained  # noqa: E402
from training.core.collate import IGNORE_INDEX, SelfRAGCollator, paragraph_mask  # noqa: E402
from training.core.config import SFTRunConfig, TrainingError  # noqa: E402
from training.core.records import encode_record  # noqa: E402
from training.critic_sft import main as critic_main  # noqa: E402
from training.generator_sft import main as generator_main  # noqa: E402
from training.selfrag.critic_eval import evaluate_critic  # noqa: E402
from training.trainers.common import cpu_has_fast_bf16  # noqa: E402
from training.trainers.sft import train_sft  # noqa: E402

RECORD = {
    "instruction": "Tell me about Paris.",
    "input": "",
    "output": "[Retrieval]<paragraph>Paris\nCapital.</paragraph>[Relevant]Paris is a city.[Fully supported]"
    "[Retrieval]<paragraph>Seine\nA river.</paragraph>[Relevant]The Seine runs there.[Partially supported][Utility:4]</s>",
}


@pytest.fixture(scope="module")
def plain_dir(tmp_path_factory):
    return plain_tiny_model(tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module")
def tokenizer_with_tokens(plain_dir):
    model, tok = load_base(plain_dir)
    add_reflection_tokens(model, tok)
    return tok


# -- tokens ----------------------------------------------------------------------------------
def test_add_reflection_tokens_resizes_and_initialises_rows(plain_dir):
    model, tok = load_base(plain_dir)
    old = len(tok)
    emb_before = model.get_input_embeddings().weight.detach().clone()
    pieces = tok(T.RELEVANT, add_special_tokens=False)["input_ids"]
    with pytest.raises(TrainingError, match="not a single token"):
        reflection_token_ids(tok)
    ids = add_reflection_tokens(model, tok)
    # consecutive ids after the old vocabulary, in checkpoint order
    assert [ids[t] for t in T.REFLECTION_TOKENS] == list(range(old, old + 15))
    assert model.get_input_embeddings().weight.shape[0] == len(tok) == old + 15
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert set(T.REFLECTION_TOKENS) <= set(tok.all_special_tokens)
    # each token is one id inside running text, and decodes back unchanged
    text = "x[Retrieval]<paragraph>t\nb</paragraph>[Relevant]y"
    enc = tok(text, add_special_tokens=False)["input_ids"]
    assert ids[T.RETRIEVAL] in enc and ids[T.PARAGRAPH_END] in enc and ids[T.RELEVANT] in enc
    assert tok.decode(enc) == text
    row = model.get_input_embeddings().weight[ids[T.RELEVANT]].detach()
    assert torch.allclose(row, emb_before[pieces].mean(0), atol=1e-6)
    # idempotent: a second call adds nothing
    assert add_reflection_tokens(model, tok) == ids and len(tok) == old + 15


def test_a_gguf_base_ends_examples_on_the_token_llama_cpp_stops_on(smollm2_gguf):
    """transformers 5.17 converted SmolLM2's GGUF tokenizer with eos = bos (<|im_start|>); models
    trained on that never stop under llama.cpp. The GGUF's own eos id wins."""
    from types import SimpleNamespace

    from langchain_selfrag.export.hf import gguf_eos_token_id, use_gguf_eos

    model, tok = load_base(smollm2_gguf)
    eos = gguf_eos_token_id(smollm2_gguf)
    assert tok.convert_ids_to_tokens(eos) == "<|im_end|>"
    assert tok.eos_token_id == eos == model.config.eos_token_id
    tok.eos_token, tok.pad_token = "<|im_start|>", None  # what the faulty conversion gives
    net = SimpleNamespace(config=SimpleNamespace(eos_token_id=1), generation_config=None)
    use_gguf_eos(tok, net, smollm2_gguf)
    assert (tok.eos_token, tok.pad_token, net.config.eos_token_id) == ("<|im_end|>", "<|im_end|>", eos)
    assert encode_record(tok, RECORD, 512)["input_ids"][-1] == eos


# -- encoding and masking -----------------------------------------------------------------------
def test_paragraph_mask_token_by_token():
    S, E = 100, 101
    ids = [1, S, 5, 6, E, 7, 8, S, 9, E, 10]
    assert paragraph_mask(ids, S, E) == [False, True, True, True, True, False, False, True, True, True, False]
    assert paragraph_mask([1, S, 2, 3], S, E) == [False, True, True, True]  # unclosed runs to the end
    assert paragraph_mask([1, E, 2], S, E) == [False, True, False]  # stray close is masked alone


def test_encode_record_masks_prompt_and_no_loss_spans(tokenizer_with_tokens):
    tok = tokenizer_with_tokens
    rec = dict(RECORD, output="[Irrelevant]wrong[Utility:1]", no_loss_spans=[[12, 17]])
    enc = encode_record(tok, rec)
    ids, mask = enc["input_ids"], enc["completion_mask"]
    prompt_len = len(tok("### Instruction:\nTell me about Paris.\n\n### Response:\n")["input_ids"])
    assert mask[:prompt_len] == [0] * prompt_len
    completion = list(zip(ids[prompt_len:], mask[prompt_len:]))
    text_of = [(tok.decode([i]), m) for i, m in completion]
    assert text_of[0] == (T.IRRELEVANT, 1)
    assert "".join(t for t, m in text_of if m == 0) == "wrong"
    assert text_of[-2] == (T.UTILITY[0], 1) and completion[-1] == (tok.eos_token_id, 1)
    with pytest.raises(TrainingError, match="no_loss"):
        encode_record(tok, dict(rec, no_loss_spans=[[5, 999]]))
    assert encode_record(tok, RECORD, max_length=10) is None  # prompt alone too long
    with pytest.raises(TrainingError):
        encode_record(tok, {"instruction": "x"})


def test_collator_masks_each_paragraph_on_its_own(tokenizer_with_tokens):
    tok = tokenizer_with_tokens
    ids = reflection_token_ids(tok)
    enc = encode_record(tok, RECORD)
    short = encode_record(tok, {"instruction": "Hi", "output": "[No Retrieval]Hello[Utility:5]"})
    collate = SelfRAGCollator(tok.pad_token_id or 0, ids[T.PARAGRAPH_START], ids[T.PARAGRAPH_END])
    batch = collate([enc, short])
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape
    row_ids = batch["input_ids"][0].tolist()
    row_labels = batch["labels"][0].tolist()
    prompt_len = enc["completion_mask"].index(1)
    trained = []
    inside = False
    for pos, (tid, lab) in enumerate(zip(row_ids, row_labels)):
        piece = tok.decode([tid])
        if pos < prompt_len:
            assert lab == IGNORE_INDEX, f"prompt token {piece!r} at {pos} is trained"
            continue
        if tid == ids[T.PARAGRAPH_START]:
            inside = True
        if inside:
            assert lab == IGNORE_INDEX, f"evidence token {piece!r} at {pos} is trained"
        else:
            assert lab == tid, f"completion token {piece!r} at {pos} is not trained"
            trained.append(tid)
        if tid == ids[T.PARAGRAPH_END]:
            inside = False
    text = tok.decode(trained)
    # the sentence between the two paragraphs is trained (the authors' first-to-last mask dropped it)
    assert text == ("[Retrieval][Relevant]Paris is a city.[Fully supported][Retrieval][Relevant]The Seine runs there."
                    "[Partially supported][Utility:4]" + tok.eos_token)
    # padding of the short row: no attention, no labels
    n = len(short["input_ids"])
    assert batch["attention_mask"][1, n:].sum() == 0 and (batch["labels"][1, n:] == IGNORE_INDEX).all()
    assert batch["labels"][1, : short["completion_mask"].index(1)].eq(IGNORE_INDEX).all()


# -- end to end ----------------------------------------------------------------------------------
def test_generator_sft_end_to_end_resumes_and_plots(plain_dir, tmp_path, capsys):
    train = write_sft_records(tmp_path / "train.jsonl")
    out = tmp_path / "gen"
    common = ["--base-model", str(plain_dir), "--train-file", str(train), "--output-dir", str(out), "--batch-size", "4",
              "--save-steps", "2", "--logging-steps", "1", "--threads", "1", "--token-lr", "1e-2"]
    assert generator_main([*common, "--max-steps", "2"]) == 0
    meta = json.loads((out / "adapter" / "selfrag_training.json").read_text())
    # bf16 autocast where this CPU computes bf16 in hardware (avx512_bf16 or AMX), fp32 elsewhere
    assert meta["steps"] == 2 and meta["resumed_from"] is None and meta["bf16"] is cpu_has_fast_bf16()
    assert meta["seconds_total"] == meta["seconds"]
    first_seconds = meta["seconds"]
    assert (out / "loss_curve.png").stat().st_size > 1000
    assert generator_main([*common, "--max-steps", "3"]) == 0
    meta = json.loads((out / "adapter" / "selfrag_training.json").read_text())
    assert meta["steps"] == 3 and meta["resumed_from"].endswith("checkpoint-2")
    assert meta["seconds_total"] == pytest.approx(first_seconds + meta["seconds"], abs=0.11)  # both runs' time
    # an interrupted run (no adapter written) resumes with the seconds its checkpoint recorded
    recorded = json.loads((out / "checkpoint-2" / "selfrag_elapsed.json").read_text())
    assert recorded["step"] == 2 and 0 < recorded["seconds"] <= first_seconds
    shutil.rmtree(out / "adapter")
    shutil.rmtree(out / "checkpoint-3")
    assert generator_main([*common, "--max-steps", "3"]) == 0
    meta = json.loads((out / "adapter" / "selfrag_training.json").read_text())
    assert meta["resumed_from"].endswith("checkpoint-2")
    assert meta["seconds_total"] == pytest.approx(recorded["seconds"] + meta["seconds"], abs=0.11)
    history = json.loads((out / "loss_history.json").read_text())
    assert [s for s, _ in history["train"]] == [1, 2, 3]
    # another training file in the same folder is not resumed into (the run would continue its step count)
    other = write_sft_records(tmp_path / "other.jsonl", n=16)
    swapped = [str(other) if a == str(train) else a for a in common]
    with pytest.raises(SystemExit) as exit_info:
        generator_main([*swapped, "--max-steps", "4"])
    assert exit_info.value.code == 2
    assert "another run" in capsys.readouterr().err
    # the adapter holds LoRA weights and only the 15 reflection-token rows, not the whole embedding
    from safetensors import safe_open

    with safe_open(str(out / "adapter" / "adapter_model.safetensors"), "pt") as fh:
        keys = list(fh.keys())
        token_keys = [k for k in keys if "trainable_tokens_delta" in k]
        assert token_keys and all(fh.get_tensor(k).shape[0] == 15 for k in token_keys)
    assert any("lora_A" in k for k in keys)
    model, tok, _ = load_trained(out / "adapter")
    ids = reflection_token_ids(tok)
    base, _ = load_base(plain_dir)
    # the token rows were trained away from their initial value; old rows are unchanged
    new_rows = model.get_input_embeddings().weight[list(ids.values())]
    assert model.get_input_embeddings().weight.shape[0] == base.get_input_embeddings().weight.shape[0] + 15
    assert torch.equal(model.get_input_embeddings().weight[:10], base.get_input_embeddings().weight[:10])
    assert new_rows.abs().sum() > 0


def test_critic_sft_end_to_end_reports_per_aspect_accuracy(plain_dir, tmp_path):
    from training.selfrag.labels import Case, critic_example
    from training.selfrag.qa_data import Passage

    p = Passage("1", "Paris", "Paris is the capital of France.")
    rows = [
        critic_example(Case("retrieve", "Capital of France?"), T.RETRIEVAL),
        critic_example(Case("retrieve", "Write a poem", kind="instruction"), T.NO_RETRIEVAL),
        critic_example(Case("isrel", "Capital of France?", evidence=p), T.RELEVANT),
        critic_example(Case("issup", "Capital of France?", output="Paris", evidence=p), T.FULLY_SUPPORTED),
        critic_example(Case("isuse", "Capital of France?", output="Paris"), T.UTILITY[4]),
    ]
    train = tmp_path / "critic.jsonl"
    train.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "critic"
    assert critic_main(["--base-model", str(plain_dir), "--train-file", str(train), "--eval-file", str(train),
                        "--output-dir", str(out), "--max-steps", "2", "--batch-size", "5", "--max-length", "2048",
                        "--threads", "1"]) == 0
    report = json.loads((out / "critic_accuracy.json").read_text())
    assert set(report) == {"retrieve", "isrel", "issup", "isuse", "overall"}
    assert report["overall"]["n"] == 5 and all(0.0 <= v["accuracy"] <= 1.0 for v in report.values())


def test_evaluate_critic_counts_correct_labels():
    class Fixed:
        def candidate_probs(self, prompts, candidates):
            return [{c: (0.9 if c in (T.RELEVANT, T.RETRIEVAL) else 0.1 / len(candidates)) for c in candidates} for _ in prompts]

    recs = [
        {"aspect": "isrel", "instruction": "i", "input": "x", "output": T.RELEVANT},
        {"aspect": "isrel", "instruction": "i", "input": "y", "output": T.IRRELEVANT},
        {"instruction": "i", "input": "z", "output": T.RETRIEVAL},
    ]
    report = evaluate_critic(Fixed(), recs)
    assert report["isrel"] == {"accuracy": 0.5, "n": 2}
    assert report["retrieve"] == {"accuracy": 1.0, "n": 1}
    assert report["overall"]["accuracy"] == pytest.approx(2 / 3)


def test_train_sft_rejects_bad_input(plain_dir, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"instruction": "x"}) + "\n")
    with pytest.raises(TrainingError, match="output"):
        train_sft(SFTRunConfig(str(plain_dir), str(bad), str(tmp_path / "o")))
    with pytest.raises(TrainingError, match="could not load"):
        load_base(tmp_path / "missing-model")


def test_cli_config_file_sets_defaults_and_rejects_unknown_keys(plain_dir, tmp_path):
    train = write_sft_records(tmp_path / "train.jsonl", n=4)
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"base_model": str(plain_dir), "train_file": str(train), "output-dir": str(tmp_path / "o"),
                               "max_steps": 1, "batch_size": 2, "threads": 1}))
    assert generator_main(["--config", str(cfg), "--batch-size", "4"]) == 0
    meta = json.loads((tmp_path / "o" / "adapter" / "selfrag_training.json").read_text())
    assert meta["steps"] == 1 and meta["config"]["batch_size"] == 4  # the command line wins over the file
    cfg.write_text(json.dumps({"base_model": str(plain_dir), "learning_rte": 1}))
    with pytest.raises(SystemExit):
        generator_main(["--config", str(cfg)])
    with pytest.raises(SystemExit):
        generator_main(["--base-model", str(plain_dir)])  # no train file / output dir


def test_second_phase_starts_from_an_earlier_adapter(plain_dir, tmp_path):
    train = write_sft_records(tmp_path / "train.jsonl", n=4)
    first = train_sft(SFTRunConfig(str(plain_dir), str(train), str(tmp_path / "p1"), max_steps=1, batch_size=4, threads=1,
                                   token_learning_rate=5e-2))
    second = train_sft(SFTRunConfig(str(plain_dir), str(train), str(tmp_path / "p2"), max_steps=1, batch_size=4, threads=1,
                                    init_adapter=str(first.adapter_dir), learning_rate=0.0, token_learning_rate=0.0))
    from safetensors.torch import load_file

    a = load_file(str(first.adapter_dir / "adapter_model.safetensors"))
    b = load_file(str(second.adapter_dir / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:  # learning rate 0 in phase 2: the phase-1 weights come through unchanged
        assert torch.allclose(a[key], b[key]), key


@pytest.mark.parametrize("command", ["critic_sft", "generator_sft", "research_sft", "dpo", "rloo"])
def test_a_missing_data_file_is_a_one_line_error(command, tmp_path, capsys):
    """Every training command reports a missing data file in one line (exit 2), not a traceback."""
    import importlib

    main = importlib.import_module(f"training.{command}").main
    data = ["--train-file"] if command.endswith("sft") and command != "research_sft" else ["--data"]
    with pytest.raises(SystemExit) as exit_info:
        main([*data, str(tmp_path / "missing.jsonl"), "--base-model", "x", "--output-dir", str(tmp_path / "out")]
             + (["--offline"] if command == "rloo" else []))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: file not found: {tmp_path / 'missing.jsonl'}"


def test_training_from_a_layer_up_leaves_the_lower_layers_and_token_rows_unchanged(tmp_path):
    """``--train-from-layer 1`` (of 2): layer 0's LoRA weights and the token rows of the earlier adapter
    come through unchanged, layer 1's move; a layer past the last is a clear error."""
    plain_dir = plain_tiny_model(tmp_path / "two_layers", layers=2)
    train = write_sft_records(tmp_path / "train.jsonl", n=4)
    first = train_sft(SFTRunConfig(str(plain_dir), str(train), str(tmp_path / "p1"), max_steps=1, batch_size=4, threads=1,
                                   token_learning_rate=5e-2))
    second = train_sft(SFTRunConfig(str(plain_dir), str(train), str(tmp_path / "p2"), max_steps=2, batch_size=4, threads=1,
                                    init_adapter=str(first.adapter_dir), learning_rate=5e-2, token_learning_rate=5e-2,
                                    train_from_layer=1))
    from safetensors.torch import load_file

    a = load_file(str(first.adapter_dir / "adapter_model.safetensors"))
    b = load_file(str(second.adapter_dir / "adapter_model.safetensors"))
    lower = [k for k in a if ".layers.0." in k or "trainable_tokens" in k]
    upper = [k for k in a if ".layers.1." in k and "lora_B" in k]
    assert lower and upper
    assert all(torch.equal(a[k], b[k]) for k in lower)
    assert any(not torch.equal(a[k], b[k]) for k in upper)
    with pytest.raises(TrainingError, match="leaves nothing to train"):
        train_sft(SFTRunConfig(str(plain_dir), str(train), str(tmp_path / "p3"), max_steps=1, batch_size=4, threads=1,
                               init_adapter=str(first.adapter_dir), train_from_layer=2))


def test_upper_layers_of_an_untied_model_train_the_head_rows_and_pack_without_idle_layers(tmp_path):
    """A fresh run from layer 1 (of 2) on an untied model (Qwen2): layer 0's LoRA and the input token rows
    stay as they started, layer 1's LoRA and the output head's token rows train; the packed adapter leaves
    layer 0 out and rebuilds the same model."""
    from safetensors.torch import load_file

    from langchain_selfrag import bundled
    from training.core.adapters import prepare_model
    from training.core.export import pack_adapter

    base = build_tiny_qwen2_model(tmp_path / "base", reflection_tokens=False)
    train = write_sft_records(tmp_path / "train.jsonl", n=4)
    run = train_sft(SFTRunConfig(str(base), str(train), str(tmp_path / "run"), max_steps=2, batch_size=4, threads=1,
                                 learning_rate=5e-2, token_learning_rate=5e-2, train_from_layer=1))
    weights = load_file(str(run.adapter_dir / "adapter_model.safetensors"))
    model, _, ids = prepare_model(str(base))
    rows = sorted(ids.values())
    start_in = model.get_input_embeddings().weight[rows]
    start_out = model.get_output_embeddings().weight[rows]
    assert all(not weights[k].any() for k in weights if ".layers.0." in k and "lora_B" in k)
    assert any(weights[k].any() for k in weights if ".layers.1." in k and "lora_B" in k)
    assert torch.allclose(weights["base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta"], start_in)
    assert not torch.allclose(weights["base_model.model.lm_head.token_adapter.trainable_tokens_delta"], start_out)

    folder = pack_adapter(run.adapter_dir, tmp_path / "pack", base_name="tiny-qwen2")
    packed = load_file(str(folder / "adapter_model.safetensors"))
    assert packed and not any(".layers.0." in k for k in packed)
    assert json.loads((folder / "adapter_config.json").read_text())["layers_to_transform"] == [1]
    reference, _, _ = load_trained(run.adapter_dir)
    rebuilt, _ = bundled.build_model(folder, base)
    ref_state = reference.state_dict()
    for name, value in rebuilt.state_dict().items():
        assert torch.allclose(value, ref_state[name], atol=2e-3), name  # LoRA shipped in fp16
