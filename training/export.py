"""Export a trained Self-RAG model: a merged Hugging Face directory and a GGUF file.

The GGUF is written with the ``gguf`` package's ``GGUFWriter`` for Llama-architecture models
(Llama, SmolLM2, Mistral-style configs without sliding windows). The reflection tokens are
CONTROL tokens in it, so llama.cpp maps their strings to single ids when it tokenizes with
``special=True`` (as :class:`~langchain_selfrag.lm.llamacpp_lm.LlamaCppReflectionLM` does).
Tokenizer metadata is copied from a source GGUF when the base model came from one (and the added
tokens are appended); otherwise it is built from the Hugging Face byte-level BPE tokenizer.

``python -m training.export --adapter runs/generator/adapter --hf-out out/hf --gguf-out out/model.gguf --verify``
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from langchain_selfrag import tokens as T


class ExportError(RuntimeError):
    """The model cannot be exported as asked."""


OUTTYPES = ("f32", "f16", "q8_0")
_LLAMA_TYPES = {"llama", "mistral"}


def export_merged(adapter_dir: str | os.PathLike, out_dir: str | os.PathLike, *, base_model: str | None = None) -> Path:
    """Base + reflection tokens + adapter, merged and saved as a plain HF directory."""
    from .sft import META_FILE, load_trained

    model, tokenizer, meta = load_trained(adapter_dir, base_model=base_model)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    (out / META_FILE).write_text(json.dumps(meta, indent=1))
    return out


# -- tensors ---------------------------------------------------------------------------------------
def _permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotary layout -> the interleaved layout llama.cpp expects for Q and K."""
    return weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def _tensor_dtype(name: str, array: np.ndarray, outtype: str):
    import gguf

    if array.ndim < 2 or name.endswith("_norm.weight") or outtype == "f32":
        return array.astype(np.float32), None
    if outtype == "f16":
        return array.astype(np.float16), None
    if array.shape[-1] % 32:
        return array.astype(np.float16), None
    qtype = gguf.GGMLQuantizationType.Q8_0
    return gguf.quants.quantize(array.astype(np.float32), qtype), qtype


# -- tokenizer metadata --------------------------------------------------------------------------
def _field(reader, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def _tokenizer_from_gguf(writer, source: Path, hf_tokenizer) -> int:
    """Copy tokenizer.* metadata from ``source`` and append tokens the HF tokenizer added."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    tokens: list[str] = _field(reader, "tokenizer.ggml.tokens")
    types: list[int] = _field(reader, "tokenizer.ggml.token_type")
    if not tokens:
        raise ExportError(f"{source} has no tokenizer.ggml.tokens")
    vocab = hf_tokenizer.get_vocab()
    extra = sorted((i, t) for t, i in vocab.items() if i >= len(tokens))
    for expected, (i, tok) in enumerate(extra, start=len(tokens)):
        if i != expected:
            raise ExportError(f"added token {tok!r} has id {i}, expected {expected}: vocabularies do not line up")
    for i, tok in enumerate(tokens[: min(len(tokens), 1000)]):
        if vocab.get(tok, i) != i:
            raise ExportError(f"token {tok!r} has id {vocab[tok]} in the HF tokenizer but {i} in {source.name}")
    specials = set(hf_tokenizer.all_special_tokens)
    for _, tok in extra:
        tokens.append(tok)
        types.append(int(gguf.TokenType.CONTROL if tok in specials or tok in T.REFLECTION_TOKENS else gguf.TokenType.USER_DEFINED))
    writer.add_tokenizer_model(_field(reader, "tokenizer.ggml.model"))
    pre = _field(reader, "tokenizer.ggml.pre")
    if pre:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    merges = _field(reader, "tokenizer.ggml.merges")
    if merges:
        writer.add_token_merges(merges)
    for key, add in (
        ("tokenizer.ggml.bos_token_id", writer.add_bos_token_id),
        ("tokenizer.ggml.eos_token_id", writer.add_eos_token_id),
        ("tokenizer.ggml.unknown_token_id", writer.add_unk_token_id),
        ("tokenizer.ggml.padding_token_id", writer.add_pad_token_id),
        ("tokenizer.ggml.add_bos_token", writer.add_add_bos_token),
        ("tokenizer.ggml.add_eos_token", writer.add_add_eos_token),
        ("tokenizer.ggml.add_space_prefix", writer.add_add_space_prefix),
        ("tokenizer.chat_template", writer.add_chat_template),
    ):
        value = _field(reader, key)
        if value is not None:
            add(value)
    return len(tokens)


def _tokenizer_from_hf(writer, hf_tokenizer) -> int:
    """Tokenizer metadata for a byte-level BPE Hugging Face tokenizer (GPT-2 style)."""
    import gguf

    backend = getattr(hf_tokenizer, "backend_tokenizer", None) or getattr(hf_tokenizer, "_tokenizer", None)
    if backend is None:
        raise ExportError("GGUF export needs a fast (tokenizers) tokenizer")
    spec = json.loads(backend.to_str())
    model = spec.get("model", {})
    if model.get("type") != "BPE":
        raise ExportError(f"only byte-level BPE tokenizers can be exported without a source GGUF, not {model.get('type')}")
    vocab = hf_tokenizer.get_vocab()
    n = max(vocab.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(n)]
    for tok, i in vocab.items():
        tokens[i] = tok
    specials = set(hf_tokenizer.all_special_tokens)
    added = {a["content"] for a in spec.get("added_tokens", [])}
    types = []
    for tok in tokens:
        if tok in specials or tok in T.REFLECTION_TOKENS:
            types.append(int(gguf.TokenType.CONTROL))
        elif tok in added:
            types.append(int(gguf.TokenType.USER_DEFINED))
        else:
            types.append(int(gguf.TokenType.NORMAL))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    if not merges:
        # llama.cpp requires the key; a merge of two NUL bytes never applies to real text
        merges = ["\u0100 \u0100"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for attr, add in (
        ("bos_token_id", writer.add_bos_token_id),
        ("eos_token_id", writer.add_eos_token_id),
        ("unk_token_id", writer.add_unk_token_id),
        ("pad_token_id", writer.add_pad_token_id),
    ):
        value = getattr(hf_tokenizer, attr, None)
        if value is not None:
            add(int(value))
    probe = hf_tokenizer("a", add_special_tokens=True)["input_ids"]
    writer.add_add_bos_token(bool(hf_tokenizer.bos_token_id is not None and probe[:1] == [hf_tokenizer.bos_token_id]))
    if getattr(hf_tokenizer, "chat_template", None):
        writer.add_chat_template(hf_tokenizer.chat_template)
    return n


def export_gguf(
    model_dir: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    source_gguf: str | os.PathLike | None = None,
    outtype: str = "q8_0",
    name: str | None = None,
) -> Path:
    """Write the HF Llama-architecture model in ``model_dir`` as a GGUF file.

    ``source_gguf``: the GGUF the base model came from; its tokenizer metadata is copied (it is
    also read from ``selfrag_training.json`` when the base model was a ``.gguf`` path). ``outtype``:
    ``f32``, ``f16`` or ``q8_0`` for the 2-D weights (norms stay f32).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if outtype not in OUTTYPES:
        raise ExportError(f"outtype must be one of {OUTTYPES}, not {outtype!r}")
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise ExportError(f"{model_dir} is not a Hugging Face model directory (no config.json)")
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") not in _LLAMA_TYPES:
        raise ExportError(f"GGUF export supports Llama-architecture models, not {config.get('model_type')!r}")
    if source_gguf is None:
        meta = model_dir / "selfrag_training.json"
        if meta.is_file():
            base = json.loads(meta.read_text()).get("base_model", "")
            if str(base).endswith(".gguf") and Path(base).is_file():
                source_gguf = base
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return write_gguf(model, tokenizer, out_path, source_gguf=source_gguf, outtype=outtype, name=name or model_dir.name)


def write_gguf(model, tokenizer, out_path, *, source_gguf=None, outtype: str = "q8_0", name: str = "selfrag") -> Path:
    """Write an in-memory Llama-architecture model and its tokenizer as GGUF (see :func:`export_gguf`)."""
    import gguf
    import torch

    if outtype not in OUTTYPES:
        raise ExportError(f"outtype must be one of {OUTTYPES}, not {outtype!r}")
    config = model.config
    if getattr(config, "model_type", None) not in _LLAMA_TYPES:
        raise ExportError(f"GGUF export supports Llama-architecture models, not {getattr(config, 'model_type', None)!r}")
    state = {k: v.detach().to(torch.float32).cpu().numpy() for k, v in model.state_dict().items()}
    tied = bool(getattr(config, "tie_word_embeddings", False))
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    arch = gguf.MODEL_ARCH.LLAMA
    tmp = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(str(tmp), gguf.MODEL_ARCH_NAMES[arch])
    n_head = config.num_attention_heads
    n_kv = getattr(config, "num_key_value_heads", None) or n_head
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_head
    writer.add_name(name)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    rope = getattr(config, "rope_parameters", None) or {}
    theta = rope.get("rope_theta") if isinstance(rope, dict) else None
    if isinstance(rope, dict) and rope.get("rope_type", "default") not in ("default", None):
        raise ExportError(f"rope scaling {rope.get('rope_type')!r} is not supported by this exporter")
    writer.add_rope_freq_base(float(theta or getattr(config, "rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
    writer.add_file_type(int(file_type[outtype]))
    n_vocab = _tokenizer_from_gguf(writer, Path(source_gguf), tokenizer) if source_gguf else _tokenizer_from_hf(writer, tokenizer)
    writer.add_vocab_size(n_vocab)
    embed = state["model.embed_tokens.weight"]
    if embed.shape[0] != n_vocab:
        if embed.shape[0] < n_vocab:
            raise ExportError(f"embedding has {embed.shape[0]} rows but the vocabulary {n_vocab} tokens")
        state["model.embed_tokens.weight"] = embed[:n_vocab]
        if "lm_head.weight" in state:
            state["lm_head.weight"] = state["lm_head.weight"][:n_vocab]
    names = gguf.TensorNameMap(arch, config.num_hidden_layers)
    for hf_name, array in state.items():
        if hf_name.endswith("rotary_emb.inv_freq") or (hf_name == "lm_head.weight" and tied):
            continue
        new_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if new_name is None:
            raise ExportError(f"no GGUF name for tensor {hf_name}")
        if hf_name.endswith("q_proj.weight"):
            array = _permute(array, n_head)
        elif hf_name.endswith("k_proj.weight"):
            array = _permute(array, n_kv)
        data, qtype = _tensor_dtype(new_name, array, outtype)
        writer.add_tensor(new_name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)
    return out


def pack_adapter(adapter_dir: str | os.PathLike, out_dir: str | os.PathLike, *, base_name: str | None = None) -> Path:
    """Copy a trained adapter into a small shippable folder: fp16 LoRA + token rows, config, metadata.

    The reflection-token rows stay fp32 (they are few and start far from any trained row).
    ``base_name`` replaces the machine-specific base-model path in the metadata.
    """
    import torch
    from safetensors.torch import load_file, save_file

    src, out = Path(adapter_dir), Path(out_dir)
    if not (src / "adapter_model.safetensors").is_file():
        raise ExportError(f"{src} has no adapter_model.safetensors")
    out.mkdir(parents=True, exist_ok=True)
    weights = load_file(str(src / "adapter_model.safetensors"))
    packed = {k: (v if "trainable_tokens" in k else v.to(torch.float16)).contiguous() for k, v in weights.items()}
    save_file(packed, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text((src / "adapter_config.json").read_text())
    meta = json.loads((src / "selfrag_training.json").read_text())
    if base_name:
        meta["base_model"] = base_name
    (out / "selfrag_training.json").write_text(json.dumps(meta, indent=1))
    return out


def compare_backends(hf_dir: str | os.PathLike, gguf_path: str | os.PathLike, prompts: Sequence[str]) -> dict[str, float]:
    """Largest absolute difference of reflection-group probabilities, transformers vs llama.cpp.

    Compares the Retrieve group at each prompt's next position and the IsRel group after
    evidence appended to each prompt, both as normalised scores and raw probabilities.
    """
    from langchain_selfrag import scoring
    from langchain_selfrag.lm import load_reflection_lm
    from langchain_selfrag.prompts import with_evidence

    hf = load_reflection_lm(hf_dir, backend="transformers", device="cpu")
    cpp = load_reflection_lm(gguf_path, backend="llamacpp", n_ctx=2048, n_threads=1)
    if not cpp.has_reflection_vocab:
        raise ExportError("llama.cpp does not see the reflection tokens as single tokens in the exported GGUF")
    for p in prompts:
        if hf.tokenize(p, add_bos=True) != cpp.tokenize(p, add_bos=True):
            raise ExportError(f"tokenizations differ between backends for prompt {p[:60]!r}")
    retrieve = list(T.GROUPS[T.Kind.RETRIEVE])
    isrel = list(T.GROUPS[T.Kind.ISREL])
    ev_prompts = [with_evidence(p, "Evidence", "Some evidence text for the comparison.") for p in prompts]
    diffs = {"retrieve_prob": 0.0, "isrel_prob": 0.0, "retrieve_score": 0.0, "isrel_score": 0.0}
    for a, b in zip(hf.candidate_probs(prompts, retrieve), cpp.candidate_probs(prompts, retrieve)):
        diffs["retrieve_prob"] = max(diffs["retrieve_prob"], max(abs(a[k] - b[k]) for k in retrieve))
        diffs["retrieve_score"] = max(diffs["retrieve_score"], abs(scoring.retrieve_probability(a) - scoring.retrieve_probability(b)))
    for a, b in zip(hf.candidate_probs(ev_prompts, isrel), cpp.candidate_probs(ev_prompts, isrel)):
        diffs["isrel_prob"] = max(diffs["isrel_prob"], max(abs(a[k] - b[k]) for k in isrel))
        diffs["isrel_score"] = max(diffs["isrel_score"], abs(scoring.isrel_score(a) - scoring.isrel_score(b)))
    if hasattr(cpp, "close"):
        cpp.close()
    return {k: float(v) if math.isfinite(v) else float("nan") for k, v in diffs.items()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.export", description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--adapter", help="training output adapter/ directory (merged with its base first)")
    src.add_argument("--model-dir", help="an already merged HF model directory")
    ap.add_argument("--base-model", help="override the base model recorded at training time")
    ap.add_argument("--hf-out", help="where to write the merged HF directory (needed with --adapter)")
    ap.add_argument("--gguf-out", help="where to write the GGUF file")
    ap.add_argument("--source-gguf", help="GGUF whose tokenizer metadata to copy (default: the base, if a GGUF)")
    ap.add_argument("--outtype", default="q8_0", choices=OUTTYPES)
    ap.add_argument("--verify", action="store_true", help="compare reflection probabilities of both backends")
    args = ap.parse_args(argv)
    try:
        if args.adapter:
            if not args.hf_out:
                ap.error("--adapter needs --hf-out")
            model_dir = export_merged(args.adapter, args.hf_out, base_model=args.base_model)
            print(f"merged model: {model_dir}")
        else:
            model_dir = Path(args.model_dir)
        if args.gguf_out:
            path = export_gguf(model_dir, args.gguf_out, source_gguf=args.source_gguf, outtype=args.outtype)
            print(f"GGUF: {path} ({path.stat().st_size / 1e6:.1f} MB)")
            if args.verify:
                from langchain_selfrag.prompts import format_prompt

                prompts = [format_prompt(q) for q in ("Who wrote Hamlet?", "Write a short poem about rain.", "What is the capital of Poland?")]
                print(json.dumps(compare_backends(model_dir, path, prompts), indent=1))
    except ExportError as exc:
        ap.exit(2, f"error: {exc}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
