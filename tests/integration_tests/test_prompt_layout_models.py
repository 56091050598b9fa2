"""A model's prompt layout is part of the model: trained into it, recorded in the adapter, the GGUF and the
transformers folder, and read back by llama.cpp, transformers and a llama.cpp server, with no flag.

A tiny Qwen2 base is trained for two steps in ChatML. Every backend given a Self-RAG (paper-layout) prompt
must score what a twin of the same weights without a record scores for that prompt laid out in ChatML;
a model without a record reads the paper's prompt byte for byte.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
pytest.importorskip("llama_cpp")
pytest.importorskip("peft")

from loopback import free_port, running  # noqa: E402
from tiny_models import build_tiny_qwen2_model, write_sft_records  # noqa: E402

from langchain_selfrag import bundled  # noqa: E402
from langchain_selfrag import tokens as T  # noqa: E402
from langchain_selfrag.lm import load_reflection_lm  # noqa: E402
from langchain_selfrag.prompt_layouts import CHATML, CONFIG_KEY, GGUF_KEY, PAPER_LAYOUT, layout_named  # noqa: E402
from langchain_selfrag.prompts import build_instruction, format_prompt, with_evidence  # noqa: E402
from training.core.config import SFTRunConfig  # noqa: E402
from training.core.export import export_merged  # noqa: E402
from training.core.records import encode_record, laid_out_records, load_records  # noqa: E402
from training.export import export_gguf  # noqa: E402
from training.trainers.sft import train_sft  # noqa: E402

ASKED = format_prompt(build_instruction("Q4?"))
EVIDENCE = with_evidence(ASKED, "T4", "Text 4")
PROMPTS = [ASKED, EVIDENCE, EVIDENCE + T.RELEVANT + "A4"]
GROUPS = [T.GROUPS[T.Kind.RETRIEVE], T.GROUPS[T.Kind.ISREL], T.GROUPS[T.Kind.ISSUP]]
#: f32 GGUF against transformers fp32 on the tiny models (test_export: measured worst 2.3e-4 a token)
F32_TOL = 1e-3
#: the same model, the same prompt, two calls: float noise only
SAME_TOL = 1e-6


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """(base GGUF, adapter, merged GGUF, merged transformers folder) of a tiny Qwen2 trained in ChatML."""
    root = tmp_path_factory.mktemp("layout")
    base = build_tiny_qwen2_model(root / "base", reflection_tokens=False)
    base_gguf = export_gguf(base, root / "base.gguf", outtype="f32")
    data = write_sft_records(root / "train.jsonl")
    res = train_sft(SFTRunConfig(str(base_gguf), str(data), str(root / "run"), max_steps=2, batch_size=4, save_steps=100,
                                 learning_rate=5e-2, token_learning_rate=5e-2, threads=1, prompt_layout=CHATML))
    merged = bundled.build_gguf(root / "merged.gguf", folder=res.adapter_dir, base=base_gguf, outtype="f32", progress=False)
    hf_dir = export_merged(res.adapter_dir, root / "merged-hf")
    return base_gguf, res.adapter_dir, merged, hf_dir


def paper_twin(hf_dir: Path, out: Path) -> Path:
    """The same weights with no record of a layout."""
    shutil.copytree(hf_dir, out)
    config = json.loads((out / "config.json").read_text())
    config.pop(CONFIG_KEY)
    (out / "config.json").write_text(json.dumps(config))
    (out / "selfrag_training.json").unlink()
    return out


def scores(lm, prompts) -> list[dict[str, float]]:
    """Each group's probabilities at each prompt's end, normalised within the group (as scoring reads them)."""
    out = []
    for prompt, group in zip(prompts, GROUPS):
        probs = lm.candidate_probs([prompt], group)[0]
        out.append({k: v / sum(probs.values()) for k, v in probs.items()})
    return out


def gap(a: list[dict[str, float]], b: list[dict[str, float]]) -> float:
    return max(abs(x[k] - y[k]) for x, y in zip(a, b) for k in x)


def test_training_in_chatml_lays_each_record_out_and_records_the_layout(chat_model, tmp_path):
    _, adapter, merged, hf_dir = chat_model
    assert json.loads((adapter / "selfrag_training.json").read_text())[CONFIG_KEY] == CHATML
    assert json.loads((hf_dir / "config.json").read_text())[CONFIG_KEY] == CHATML
    assert gguf.GGUFReader(str(merged)).fields[GGUF_KEY].contents() == CHATML
    rows = laid_out_records(load_records(write_sft_records(tmp_path / "d.jsonl", n=3)), CHATML)
    # a record without retrieval stays one; one with a passage becomes the decision and the answer
    assert [r["output"] for r in rows] == ["[No Retrieval]Line 0.[Utility:5]", T.RETRIEVAL,
                                           "[Relevant]A1[Fully supported][Utility:5]", T.RETRIEVAL,
                                           "[Relevant]A2[Fully supported][Utility:5]"]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(hf_dir))
    decision, answer = (encode_record(tokenizer, r) for r in rows[1:3])
    assert decision["input_ids"][-1] != tokenizer.eos_token_id  # the turn goes on after [Retrieval]
    assert answer["input_ids"][-1] == tokenizer.eos_token_id
    assert tokenizer.decode(answer["input_ids"]).startswith("<|im_start|>system\n")


def test_every_local_backend_reads_the_layout_from_the_model(chat_model, tmp_path):
    _, _, merged, hf_dir = chat_model
    chat = layout_named(CHATML)
    twin = load_reflection_lm(paper_twin(hf_dir, tmp_path / "twin"), device="cpu")
    hf = load_reflection_lm(hf_dir, device="cpu")
    cpp = load_reflection_lm(merged, n_threads=1, n_ctx=1024)
    try:
        assert twin.prompt_layout is PAPER_LAYOUT
        assert hf.prompt_layout.name == cpp.prompt_layout.name == CHATML
        assert cpp._encode_prompts(PROMPTS) == [cpp.tokenize(chat.render(p), add_bos=True) for p in PROMPTS]
        expected = scores(twin, [chat.render(p) for p in PROMPTS])
        assert gap(scores(hf, PROMPTS), expected) < SAME_TOL
        assert gap(scores(cpp, PROMPTS), expected) < F32_TOL
        # and the layout matters: the twin given the paper's prompts scores otherwise (measured 0.035)
        assert gap(scores(twin, PROMPTS), expected) > 10 * F32_TOL
        (a,), (b,) = (lm.generate([EVIDENCE], max_new_tokens=6, first_candidates=GROUPS[1]) for lm in (hf, cpp))
        assert a.token_ids == b.token_ids
    finally:
        cpp.close()


def test_a_loaded_model_objects_config_carries_the_layout(chat_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from langchain_selfrag.lm.transformers_lm import TransformersReflectionLM

    _, _, _, hf_dir = chat_model
    model = AutoModelForCausalLM.from_pretrained(str(hf_dir))
    lm = TransformersReflectionLM(model, tokenizer=AutoTokenizer.from_pretrained(str(hf_dir)), device="cpu")
    assert lm.prompt_layout.name == CHATML


def test_a_llama_cpp_server_reads_the_served_files_record(chat_model, tmp_path):
    _, _, merged, _ = chat_model
    for mod in ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings"):
        pytest.importorskip(mod)
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(merged), "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", "1024", "--n_threads", "1", "--n_threads_batch", "1"]
    with running(cmd, f"{url}/models", tmp_path / "server.log", name="llama_cpp.server"):
        remote = load_reflection_lm(url)
        local = load_reflection_lm(merged, n_threads=1, n_ctx=1024)
        try:
            assert remote.prompt_layout.name == CHATML
            assert gap(scores(remote, PROMPTS), scores(local, PROMPTS)) < 0.02  # test_lm_remote's PROB_TOL
        finally:
            remote.close()
            local.close()


def test_a_reflection_head_fitted_in_chatml_records_it_in_the_gguf(chat_model, tmp_path):
    from training.reflection_head import train_head

    base_gguf = chat_model[0]
    data = write_sft_records(tmp_path / "train.jsonl", n=12)
    meta = train_head(str(base_gguf), str(data), str(tmp_path / "head"), max_length=160, threads=1, l2_grid=(1e-3,),
                      prompt_layout=CHATML, bf16="false", input_row="\n")
    assert meta[CONFIG_KEY] == CHATML and meta["examples"] == 12 + 8  # 8 records with a passage became two examples
    from safetensors.numpy import load_file

    rows = next(v for k, v in load_file(str(tmp_path / "head" / "adapter" / "adapter_model.safetensors")).items()
                if "embed_tokens" in k)
    newline = gguf.GGUFReader(str(base_gguf))
    embed = next(t for t in newline.tensors if t.name == "token_embd.weight")
    from transformers import AutoTokenizer

    nl = AutoTokenizer.from_pretrained(str(tmp_path / "head" / "adapter"))("\n", add_special_tokens=False)["input_ids"]
    assert len(nl) == 1 and (rows[:15] == embed.data[nl[0]]).all()  # every reflection token reads as a line break
    out = bundled.build_gguf(tmp_path / "head.gguf", folder=tmp_path / "head" / "adapter", base=base_gguf,
                             outtype="f32", progress=False)
    lm = load_reflection_lm(out, n_threads=1, n_ctx=1024)
    try:
        assert lm.prompt_layout.name == CHATML
    finally:
        lm.close()
