"""Export: merged HF directory, GGUF with reflection control tokens, backend agreement, the bundle."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
pytest.importorskip("llama_cpp")
pytest.importorskip("peft")

from tiny_models import (  # noqa: E402
    build_tiny_gemma3_model,
    build_tiny_llama3_model,
    build_tiny_qwen2_model,
    build_tiny_spm_model,
    plain_tiny_model,
    write_sft_records,
)

from langchain_selfrag import bundled  # noqa: E402
from langchain_selfrag import tokens as T  # noqa: E402
from langchain_selfrag.export.quantize import LLAMA_QUANT_TYPES, quantize_gguf  # noqa: E402
from langchain_selfrag.lm import load_reflection_lm  # noqa: E402
from langchain_selfrag.prompts import build_instruction, format_prompt, with_evidence  # noqa: E402
from training.core.adapters import load_trained  # noqa: E402
from training.core.config import SFTRunConfig  # noqa: E402
from training.core.export import compare_backends, export_merged, pack_adapter  # noqa: E402
from training.export import ExportError, export_gguf  # noqa: E402
from training.export import main as export_main  # noqa: E402
from training.trainers.sft import train_sft  # noqa: E402

PROMPTS = [format_prompt(build_instruction(q)) for q in ("Who wrote Hamlet?", "Write a short poem about rain.")]
#: f32 GGUF vs transformers fp32 on the tiny models: measured worst case 3e-5 (llama.cpp's own
#: kernels and summation order); Q8_0 weights: measured worst case 1.5e-2 on the deliberately
#: peaked tiny model.
F32_TOL = 1e-3
Q8_TOL = 5e-2
#: 4-bit weights quantised by llama.cpp on the same tiny model: measured worst case 0.048 (IQ4_NL)
#: and 0.091 (Q4_0); Q8_0 gave 0.006 on this model.
Q4_TOL = 0.15
#: f32 GGUF vs transformers, every vocabulary entry at the next position (Llama-3 RoPE and
#: SentencePiece tiny models): measured worst case 2.3e-4; dropping the RoPE scaling gives 1.3e-2.
NEXT_TOKEN_TOL = 1e-3
#: The same on the tiny Gemma 3 model: measured 2.2e-3 with an 8-token sliding window and 1.1e-3
#: without one (ggml's GELU is tabulated in f16); a file written with the wrong window gives 0.97.
GEMMA3_NEXT_TOKEN_TOL = 1e-2
#: Prompts that exercise the pre-tokenizer: digit runs, contractions, double spaces, evidence.
TOKENIZER_PROMPTS = PROMPTS + [
    format_prompt("What happened in 1914? It's 12345 km  away."),
    with_evidence(PROMPTS[0], "Hamlet", "A tragedy (c. 1600) by William Shakespeare."),
]


def control_tokens(path) -> dict[str, int]:
    reader = gguf.GGUFReader(str(path))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    return {t: types[i] for i, t in enumerate(tokens) if t in T.REFLECTION_TOKENS}


def next_token_gap(hf_dir, gguf_path, prompts) -> float:
    """Largest |p_transformers - p_llama.cpp| over the whole vocabulary at each prompt's next position."""
    hf = load_reflection_lm(hf_dir, device="cpu")
    cpp = load_reflection_lm(gguf_path, n_threads=1, n_ctx=1024)
    try:
        ids = [hf.tokenize(p, add_bos=True) for p in prompts]
        assert ids == [cpp.tokenize(p, add_bos=True) for p in prompts]
        vocab = list(range(cpp.n_vocab))
        pairs = zip(hf._first_position_probs(ids, vocab), cpp._first_position_probs(ids, vocab))
        return max(abs(a[i] - b[i]) for a, b in pairs for i in vocab)
    finally:
        cpp.close()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A plain tiny base (tied embeddings) trained for 2 steps: (base dir, adapter dir)."""
    root = tmp_path_factory.mktemp("export")
    base = plain_tiny_model(root / "base", seed=1)
    data = write_sft_records(root / "train.jsonl")
    res = train_sft(SFTRunConfig(str(base), str(data), str(root / "run"), max_steps=2, batch_size=4, save_steps=100,
                                 token_learning_rate=5e-2, threads=1))
    return base, res.adapter_dir


def test_gguf_round_trip_of_the_tiny_reflection_model(tiny_model_dir, tmp_path):
    path = export_gguf(tiny_model_dir, tmp_path / "tiny.gguf", outtype="f32")
    assert set(control_tokens(path).values()) == {int(gguf.TokenType.CONTROL)} and len(control_tokens(path)) == 15
    cpp = load_reflection_lm(path, n_threads=1, n_ctx=1024)
    hf = load_reflection_lm(tiny_model_dir, device="cpu")
    assert cpp.has_reflection_vocab and cpp.reflection_ids == hf.reflection_ids
    prompt = with_evidence(PROMPTS[0], "Hamlet", "A tragedy by [Retrieval] Shakespeare.")
    assert cpp.tokenize(prompt, add_bos=True) == hf.tokenize(prompt, add_bos=True)
    diffs = compare_backends(tiny_model_dir, path, PROMPTS)
    assert max(diffs.values()) < F32_TOL, diffs
    # greedy generation agrees token for token
    a = cpp.generate([PROMPTS[0]], max_new_tokens=8)[0]
    b = hf.generate([PROMPTS[0]], max_new_tokens=8)[0]
    assert a.token_ids == b.token_ids


def test_q8_gguf_is_smaller_and_close(tiny_model_dir, tmp_path):
    f32 = export_gguf(tiny_model_dir, tmp_path / "f32.gguf", outtype="f32")
    q8 = export_gguf(tiny_model_dir, tmp_path / "q8.gguf", outtype="q8_0")
    assert q8.stat().st_size < 0.5 * f32.stat().st_size
    diffs = compare_backends(tiny_model_dir, q8, PROMPTS)
    assert max(diffs.values()) < Q8_TOL, diffs


@pytest.mark.parametrize("outtype", LLAMA_QUANT_TYPES)
def test_llama_quantised_gguf_keeps_the_control_tokens(tiny_model_dir, tmp_path, outtype):
    q8 = export_gguf(tiny_model_dir, tmp_path / "q8.gguf", outtype="q8_0")
    q4 = export_gguf(tiny_model_dir, tmp_path / f"{outtype}.gguf", outtype=outtype)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([q8.name, q4.name])  # no f32 or partial file left
    assert q4.stat().st_size < q8.stat().st_size
    reader = gguf.GGUFReader(str(q4))
    kinds = {gguf.GGMLQuantizationType(t.tensor_type).name for t in reader.tensors}
    assert outtype.upper() in kinds, kinds
    assert set(control_tokens(q4).values()) == {int(gguf.TokenType.CONTROL)} and len(control_tokens(q4)) == 15
    diffs = compare_backends(tiny_model_dir, q4, PROMPTS)
    assert max(diffs.values()) < Q4_TOL, diffs


def test_quantize_gguf_errors(tmp_path):
    with pytest.raises(ExportError, match="no GGUF"):
        quantize_gguf(tmp_path / "missing.gguf", tmp_path / "out.gguf", "q4_0")
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf")
    with pytest.raises(ExportError, match="could not quantise"):
        quantize_gguf(tmp_path / "junk.gguf", tmp_path / "out.gguf", "q4_0")
    assert not (tmp_path / "out.gguf").exists() and not (tmp_path / "out.gguf.partial").exists()


def test_trained_adapter_exports_and_round_trips(trained, tmp_path):
    _, adapter = trained
    merged = export_merged(adapter, tmp_path / "hf")
    assert (merged / "config.json").is_file() and (merged / "selfrag_training.json").is_file()
    assert "quantization_config" not in json.loads((merged / "config.json").read_text())
    hf = load_reflection_lm(merged, device="cpu")
    assert hf.has_reflection_vocab
    path = export_gguf(merged, tmp_path / "m.gguf", outtype="f32")
    assert len(control_tokens(path)) == 15
    assert max(compare_backends(merged, path, PROMPTS).values()) < F32_TOL


def test_export_cli_and_errors(trained, tmp_path, capsys):
    _, adapter = trained
    assert export_main(["--adapter", str(adapter), "--hf-out", str(tmp_path / "hf"), "--gguf-out", str(tmp_path / "x.gguf"),
                        "--outtype", "f32", "--verify"]) == 0
    out = capsys.readouterr().out
    assert "GGUF:" in out and "isrel_score" in out
    with pytest.raises(ExportError, match="config.json"):
        export_gguf(tmp_path, tmp_path / "y.gguf")
    with pytest.raises(ExportError, match="outtype"):
        export_gguf(tmp_path / "hf", tmp_path / "y.gguf", outtype="q2")


def test_bundle_merge_matches_peft_and_builds_a_gguf(trained, tmp_path, monkeypatch):
    base, adapter = trained
    folder = pack_adapter(adapter, tmp_path / "bundle", base_name="tiny-base")
    meta = json.loads((folder / "selfrag_training.json").read_text())
    assert meta["base_model"] == "tiny-base"
    reference, _, _ = load_trained(adapter)
    model, _ = bundled.build_model(folder, base)
    ref_state = reference.state_dict()
    for name, value in model.state_dict().items():
        assert torch.allclose(value, ref_state[name], atol=2e-3), name  # LoRA shipped in fp16
    base_gguf = export_gguf(base, tmp_path / "base.gguf", outtype="f32")  # the bundle's base is a GGUF
    out = bundled.build_gguf(tmp_path / "cache" / "b.gguf", folder=folder, base=base_gguf, outtype="f32", progress=False)
    lm = load_reflection_lm(out, n_threads=1)
    assert lm.has_reflection_vocab
    assert gguf.GGUFReader(str(out)).fields["general.name"].contents() == "b"  # not the bundled model's name


@pytest.mark.parametrize("rope_type", ["llama3", "linear"])
def test_scaled_rope_llama3_style_model_exports_and_matches(rope_type, tmp_path):
    src = build_tiny_llama3_model(tmp_path / "hf", rope_type=rope_type)
    path = export_gguf(src, tmp_path / "m.gguf", outtype="f32")
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["tokenizer.ggml.pre"].contents() == "llama-bpe"
    assert ("rope_freqs.weight" in [t.name for t in reader.tensors]) == (rope_type == "llama3")
    assert len(control_tokens(path)) == 15
    assert load_reflection_lm(path, n_threads=1).has_reflection_vocab
    assert max(compare_backends(src, path, TOKENIZER_PROMPTS).values()) < F32_TOL
    assert next_token_gap(src, path, TOKENIZER_PROMPTS) < NEXT_TOKEN_TOL
    # the scaling matters: the same weights with plain RoPE disagree with the exported file
    plain = build_tiny_llama3_model(tmp_path / "plain", rope_type="default")
    assert next_token_gap(plain, path, TOKENIZER_PROMPTS) > 5 * NEXT_TOKEN_TOL


def test_sentencepiece_model_exports_and_matches(tmp_path):
    pytest.importorskip("sentencepiece")
    src = build_tiny_spm_model(tmp_path / "hf")
    path = export_gguf(src, tmp_path / "spm.gguf", outtype="f32")
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["tokenizer.ggml.model"].contents() == "llama"
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    assert types.count(int(gguf.TokenType.BYTE)) == 256
    assert set(control_tokens(path).values()) == {int(gguf.TokenType.CONTROL)} and len(control_tokens(path)) == 15
    lm = load_reflection_lm(path, n_threads=1)
    assert lm.has_reflection_vocab and lm.reflection_ids == load_reflection_lm(src, device="cpu").reflection_ids
    assert max(compare_backends(src, path, TOKENIZER_PROMPTS).values()) < F32_TOL
    assert next_token_gap(src, path, TOKENIZER_PROMPTS) < NEXT_TOKEN_TOL


def test_wrong_tokenizer_metadata_is_refused(tmp_path, monkeypatch):
    from langchain_selfrag.export import gguf_tokenizer

    src = build_tiny_llama3_model(tmp_path / "hf")
    monkeypatch.setattr(gguf_tokenizer, "bpe_pre_tokenizer", lambda spec: "gpt-2")
    with pytest.raises(ExportError, match="tokenizes differently"):
        export_gguf(src, tmp_path / "bad.gguf", outtype="f32")
    assert not list(tmp_path.glob("bad.gguf*"))
    monkeypatch.undo()
    with pytest.raises(ExportError, match="pre-tokenizer"):
        gguf_tokenizer.bpe_pre_tokenizer({"pre_tokenizer": {"type": "Whitespace"}, "model": {"type": "BPE"}})


def test_gemma3_model_exports_and_matches(tmp_path):
    """Gemma 3: ``1 + w`` norms, sliding-window and global layers, tied embeddings, no Q/K permutation."""
    src = build_tiny_gemma3_model(tmp_path / "hf")
    path = export_gguf(src, tmp_path / "g.gguf", outtype="f32")
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["general.architecture"].contents() == "gemma3"
    assert reader.fields["gemma3.attention.sliding_window"].contents() == 8
    tensors = {t.name: t for t in reader.tensors}
    assert "output.weight" not in tensors  # tied: llama.cpp reuses token_embd
    from safetensors.numpy import load_file

    weights = load_file(str(src / "model.safetensors"))
    stored = tensors["blk.0.attn_q_norm.weight"].data
    assert abs(stored - (weights["model.layers.0.self_attn.q_norm.weight"] + 1)).max() < 1e-6
    assert set(control_tokens(path).values()) == {int(gguf.TokenType.CONTROL)} and len(control_tokens(path)) == 15
    assert max(compare_backends(src, path, TOKENIZER_PROMPTS).values()) < F32_TOL
    assert next_token_gap(src, path, TOKENIZER_PROMPTS) < GEMMA3_NEXT_TOKEN_TOL
    # the window matters: the same weights read with a window longer than every prompt disagree
    wide = build_tiny_gemma3_model(tmp_path / "wide", sliding_window=4096)
    assert next_token_gap(wide, path, TOKENIZER_PROMPTS) > 10 * GEMMA3_NEXT_TOKEN_TOL


@pytest.mark.parametrize("setting, message", [
    ({"query_pre_attn_scalar": 64}, "query_pre_attn_scalar"),
    ({"layer_types": ["full_attention"] + ["sliding_attention"] * 5}, "layer_types"),
    ({"final_logit_softcapping": 30.0}, "final_logit_softcapping"),
    ({"hidden_activation": "relu"}, "hidden_activation"),
])
def test_gemma3_settings_llama_cpp_fixes_otherwise_are_refused(setting, message, tmp_path):
    src = build_tiny_gemma3_model(tmp_path / "hf", **setting)
    with pytest.raises(ExportError, match=message):
        export_gguf(src, tmp_path / "bad.gguf", outtype="f32")
    assert not list(tmp_path.glob("bad.gguf*"))


def test_unsupported_architectures_are_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ExportError, match="gemma3_text, llama, mistral, qwen2 models, not 'gpt2'"):
        export_gguf(tmp_path, tmp_path / "x.gguf")


def test_qwen2_model_exports_and_matches(tmp_path):
    """Qwen2: biases on Q, K and V, no Q/K permutation, an untied output matrix, Qwen2's pre-tokenizer."""
    src = build_tiny_qwen2_model(tmp_path / "hf")
    path = export_gguf(src, tmp_path / "q.gguf", outtype="f32")
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["general.architecture"].contents() == "qwen2"
    assert reader.fields["tokenizer.ggml.pre"].contents() == "qwen2"
    names = {t.name for t in reader.tensors}
    assert {"output.weight", "blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias"} <= names
    assert set(control_tokens(path).values()) == {int(gguf.TokenType.CONTROL)} and len(control_tokens(path)) == 15
    assert max(compare_backends(src, path, TOKENIZER_PROMPTS).values()) < F32_TOL
    assert next_token_gap(src, path, TOKENIZER_PROMPTS) < NEXT_TOKEN_TOL


def test_qwen2_adapter_merges_onto_its_gguf_as_peft_does(tmp_path):
    """The numpy merge onto a Qwen2 GGUF whose vocabulary lacks the reflection tokens (as the published
    Qwen GGUFs do): the 15 tokens are appended to the embedding and the untied output matrix, and the
    merged file gives PEFT's merged model's next-token probabilities."""
    base = build_tiny_qwen2_model(tmp_path / "base", reflection_tokens=False)
    base_gguf = export_gguf(base, tmp_path / "base.gguf", outtype="f32")
    data = write_sft_records(tmp_path / "train.jsonl")
    res = train_sft(SFTRunConfig(str(base_gguf), str(data), str(tmp_path / "run"), max_steps=2, batch_size=4,
                                 save_steps=100, learning_rate=5e-2, token_learning_rate=5e-2, threads=1))
    config = json.loads((res.adapter_dir / "adapter_config.json").read_text())
    assert set(config["trainable_token_indices"]) == {"embed_tokens", "lm_head"}  # untied: both sides trained
    out = bundled.build_gguf(tmp_path / "merged.gguf", folder=res.adapter_dir, base=base_gguf, outtype="f32",
                             progress=False)
    assert len(control_tokens(out)) == 15
    merged, tokenizer, _ = load_trained(res.adapter_dir)
    hf_dir = tmp_path / "merged-hf"
    merged.save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    assert next_token_gap(hf_dir, out, TOKENIZER_PROMPTS) < NEXT_TOKEN_TOL
    # the trained rows matter: the base with mean-initialised token rows is further off
    assert next_token_gap(hf_dir, base_gguf, PROMPTS) > 10 * NEXT_TOKEN_TOL


def test_reflection_head_adapter_merges_and_leaves_the_base_as_it_was(tmp_path):
    """A reflection head (``training.reflection_head``: output rows fitted on the frozen base) is a PEFT
    trainable-tokens adapter: the numpy merge and PEFT give the same model, and every weight of the base
    but the fitted rows is the base's."""
    from training.reflection_head import train_head

    base = build_tiny_qwen2_model(tmp_path / "base", reflection_tokens=False)
    base_gguf = export_gguf(base, tmp_path / "base.gguf", outtype="f32")
    data = write_sft_records(tmp_path / "train.jsonl", n=24)
    meta = train_head(str(base_gguf), str(data), str(tmp_path / "head"), max_length=128, threads=1,
                      l2_grid=(1e-3,))
    adapter = tmp_path / "head" / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["peft_type"] == "TRAINABLE_TOKENS" and len(config["token_indices"]) == 16  # 15 tokens + eos
    assert meta["positions"] > meta["examples"] and meta["heldout"][0]["groups"]
    out = bundled.build_gguf(tmp_path / "merged.gguf", folder=adapter, base=base_gguf, outtype="f32", progress=False)
    assert len(control_tokens(out)) == 15
    merged, tokenizer, _ = load_trained(adapter)
    hf_dir = tmp_path / "merged-hf"
    merged.save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    assert next_token_gap(hf_dir, out, TOKENIZER_PROMPTS) < NEXT_TOKEN_TOL
    before = {t.name: t.data for t in gguf.GGUFReader(str(base_gguf)).tensors}
    after = {t.name: t.data for t in gguf.GGUFReader(str(out)).tensors}
    fitted = config["token_indices"]
    for name, data in before.items():
        if name in ("token_embd.weight", "output.weight"):
            kept = [i for i in range(data.shape[0]) if i not in fitted]
            assert (after[name][kept] == data[kept]).all(), name
            assert after[name].shape[0] == data.shape[0] + 15
        else:
            assert (after[name] == data).all(), name
