"""cookbook.selfrag_qwen.package: the judge LoRA and the question model's rows packed as one adapter."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cookbook.selfrag_qwen.package import pack, seconds_at_step, trained_lora, training_time
from langchain_selfrag import tokens as T
from langchain_selfrag.export.merge import load_adapter

P = "base_model.model.model.layers"
IDS = list(range(100, 115))


def write_lora(folder, seconds=50.0, resumed=None):
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    tensors = {}
    for layer in (0, 1):
        tensors[f"{P}.{layer}.self_attn.q_proj.lora_A.weight"] = rng.normal(size=(4, 8)).astype(np.float32)
        b = rng.normal(size=(8, 4)).astype(np.float32) if layer == 1 else np.zeros((8, 4), np.float32)
        tensors[f"{P}.{layer}.self_attn.q_proj.lora_B.weight"] = b
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "trainable_token_indices": None}))
    (folder / "selfrag_training.json").write_text(json.dumps({
        "base_model": "qwen2.5-coder-1.5b-instruct", "steps": 10, "seconds": seconds, "seconds_total": seconds,
        "resumed_from": resumed}))
    return tensors


def write_question_model(folder):
    from safetensors.numpy import save_file

    adapter = folder / "adapter"
    adapter.mkdir(parents=True)
    rows = {"base_model.model.lm_head.trainable_tokens_delta": np.full((15, 8), 2.0, np.float32),
            "base_model.model.model.embed_tokens.trainable_tokens_delta": np.full((15, 8), 1.0, np.float32)}
    save_file(rows, str(adapter / "adapter_model.safetensors"))
    (adapter / "adapter_config.json").write_text(json.dumps({
        "peft_type": "TRAINABLE_TOKENS", "target_modules": ["embed_tokens", "lm_head"], "token_indices": IDS}))
    (adapter / "selfrag_training.json").write_text(json.dumps({
        "base_model": "/runs/judge.gguf", "selfrag_prompt_layout": "chatml-questions", "seconds": 30.0,
        "reflection_token_ids": dict(zip(T.REFLECTION_TOKENS, IDS))}))


def test_trained_lora_keeps_only_the_layers_training_moved(tmp_path):
    tensors = write_lora(tmp_path / "lora")
    kept = trained_lora(tensors)
    assert sorted(kept) == [f"{P}.1.self_attn.q_proj.lora_A.weight", f"{P}.1.self_attn.q_proj.lora_B.weight"]


def test_pack_writes_one_adapter_the_merge_reads(tmp_path):
    tensors = write_lora(tmp_path / "lora")
    write_question_model(tmp_path / "qm")
    out = pack(tmp_path / "lora", tmp_path / "qm", tmp_path / "bundle")
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["layers_to_transform"] == [1]
    assert config["trainable_token_indices"] == {"embed_tokens": IDS, "lm_head": IDS}
    meta = json.loads((out / "selfrag_training.json").read_text())
    assert meta["base_model"] == "qwen2.5-coder-1.5b-instruct"  # the base the bundle merges onto
    assert meta["selfrag_prompt_layout"] == "chatml-questions"
    assert meta["seconds"] == {"judge_lora_s": 50.0, "judge_lora_steps": 10, "question_model_s": 30.0, "total_s": 80.0,
                               "judge_lora_min": 0.8, "question_model_min": 0.5, "total_min": 1.3}
    adapter = load_adapter(out)
    a, b, scaling = adapter.lora["model.layers.1.self_attn.q_proj"]
    assert scaling == 2.0 and list(adapter.lora) == ["model.layers.1.self_attn.q_proj"]
    np.testing.assert_allclose(b, tensors[f"{P}.1.self_attn.q_proj.lora_B.weight"], rtol=1e-3)  # fp16
    ids, rows = adapter.rows["lm_head"]
    assert ids == IDS and float(rows[0, 0]) == 2.0
    assert float(adapter.rows["model.embed_tokens"][1][0, 0]) == 1.0


def test_pack_refuses_rows_that_are_not_the_reflection_tokens(tmp_path):
    write_lora(tmp_path / "lora")
    write_question_model(tmp_path / "qm")
    meta = tmp_path / "qm" / "adapter" / "selfrag_training.json"
    record = json.loads(meta.read_text())
    record["reflection_token_ids"] = {tok: i + 1 for tok, i in record["reflection_token_ids"].items()}
    meta.write_text(json.dumps(record))
    with pytest.raises(SystemExit, match="not the reflection tokens"):
        pack(tmp_path / "lora", tmp_path / "qm", tmp_path / "bundle")


def test_seconds_before_a_resume_come_from_the_trainers_progress_bar():
    log = "Converting 100/339 [00:15<00:20]\r 99/174 [24:20<1:00,  9s/it]\r100/174 [24:35<21:13, 17.21s/it]"
    assert seconds_at_step(log, 100, 174) == 1475.0
    assert seconds_at_step("100/174 [1:02:03<", 100, 174) == 3723.0
    with pytest.raises(SystemExit, match="no step 120"):
        seconds_at_step(log, 120, 174)


def test_training_time_adds_the_time_before_a_resume_only_where_it_is_missing():
    qm = {"seconds": 30.0}
    resumed = {"seconds": 50.0, "seconds_total": 50.0, "steps": 10, "resumed_from": "run/checkpoint-5"}
    assert training_time(resumed, qm, 20.0)["judge_lora_s"] == 70.0
    recorded = {**resumed, "seconds_total": 65.0}  # the checkpoint recorded its seconds
    assert training_time(recorded, qm, 20.0)["judge_lora_s"] == 65.0
