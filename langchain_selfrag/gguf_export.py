"""Write a Hugging Face Llama-architecture model as a GGUF file with the reflection tokens as control tokens.

Written with the ``gguf`` package (llama.cpp's ``gguf-py``) and following llama.cpp's
``convert_hf_to_gguf.py`` for what it writes: Q/K permutation, RoPE scaling (``linear`` and
``yarn`` metadata, the ``rope_freqs`` tensor for ``llama3``), SentencePiece vocabularies as
tokenizer model ``llama`` with scores and byte tokens, byte-level BPE as ``gpt2`` with the
pre-tokenizer named after the tokenizer's own split rules.
We keep our own writer because the converter is not installable as a package and cannot mark our
added tokens as control tokens or copy tokenizer metadata from a source GGUF.

The reflection tokens are CONTROL tokens, so llama.cpp maps their strings to single ids when it
tokenizes with ``special=True`` (as :class:`~langchain_selfrag.lm.llamacpp_lm.LlamaCppReflectionLM`
does). Tokenizer metadata is copied from a source GGUF when the base model came from one (the
added tokens are appended); otherwise it is built from the Hugging Face tokenizer. When
``llama_cpp`` is installed the written vocabulary is checked: llama.cpp must tokenize a probe text
exactly like the Hugging Face tokenizer.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from . import tokens as T
from .errors import SelfRAGError


class ExportError(SelfRAGError, RuntimeError):
    """The model cannot be exported as asked."""


#: Written by gguf-py directly.
WRITTEN_TYPES = ("f32", "f16", "q8_0")
#: Written as f32 first, then quantised by llama.cpp (``llama_model_quantize``): 4-bit types whose
#: weights llama.cpp's CPU backend repacks for its fast AVX2/NEON kernels (prompts read about 1.25x
#: faster than Q8_0 and 2x faster than Q4_1 on an AVX-512 CPU, single tokens about 1.5x faster).
#: As llama.cpp does for these file types, the (tied) output/embedding matrix and ``attn_v`` keep
#: more bits: Q6_K, or Q8_0 where a row is not a multiple of 256.
LLAMA_QUANT_TYPES = ("iq4_nl", "q4_0")
OUTTYPES = WRITTEN_TYPES + LLAMA_QUANT_TYPES
_LLAMA_TYPES = {"llama", "mistral"}
#: ``pre_tokenizer`` regexes of Hugging Face tokenizers -> llama.cpp ``tokenizer.ggml.pre`` names
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_PROBE = (
    "### Instruction:\nWho wrote Hamlet in 1603?  Two  spaces,\ttabs and 3.14 don't matter.\n\n### Response:\n"
    "[Retrieval]<paragraph>Hamlet\nA tragedy (c. 1600) by William Shakespeare.</paragraph>[Relevant]"
    "It was Shakespeare.[Fully supported][Utility:5]"
)


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


# -- RoPE ------------------------------------------------------------------------------------------
def rope_parameters(config) -> dict[str, Any]:
    """RoPE settings of a HF config as one dict (``rope_parameters`` of transformers 5, else ``rope_scaling``)."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and isinstance(params.get("full_attention"), dict):
        params = params["full_attention"]
    out = dict(params) if isinstance(params, dict) else {}
    scaling = getattr(config, "rope_scaling", None)
    if isinstance(scaling, dict):
        out = {**scaling, **out}
    if "rope_type" not in out and "type" in out:
        out["rope_type"] = out["type"]
    out.setdefault("rope_theta", getattr(config, "rope_theta", None) or 10000.0)
    out["rope_type"] = out.get("rope_type") or "default"
    return out


def llama3_rope_factors(rope: dict[str, Any], head_dim: int) -> np.ndarray:
    """Per-frequency divisors of Llama-3.1 RoPE scaling (the ``rope_freqs`` tensor of llama.cpp)."""
    freqs = 1.0 / (float(rope["rope_theta"]) ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    factor = float(rope.get("factor", 8.0))
    low, high = float(rope.get("low_freq_factor", 1.0)), float(rope.get("high_freq_factor", 4.0))
    old_ctx = float(rope.get("original_max_position_embeddings", 8192))
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            factors.append(1.0)
        elif wavelen > old_ctx / low:
            factors.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, dtype=np.float32)


def _write_rope(writer, rope: dict[str, Any], head_dim: int):
    """RoPE metadata as ``convert_hf_to_gguf.py`` writes it; returns the ``rope_freqs`` array or None."""
    import gguf

    writer.add_rope_freq_base(float(rope["rope_theta"]))
    kind = str(rope["rope_type"]).lower()
    if kind == "default":
        return None
    if kind == "llama3":
        return llama3_rope_factors(rope, head_dim)
    if kind == "linear" and rope.get("factor") is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))
        return None
    if kind == "yarn" and rope.get("factor") is not None and rope.get("original_max_position_embeddings"):
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(float(rope["factor"]))
        writer.add_rope_scaling_orig_ctx_len(int(rope["original_max_position_embeddings"]))
        for key, add in (
            ("extrapolation_factor", writer.add_rope_scaling_yarn_ext_factor),
            ("attention_factor", writer.add_rope_scaling_yarn_attn_factor),
            ("beta_fast", writer.add_rope_scaling_yarn_beta_fast),
            ("beta_slow", writer.add_rope_scaling_yarn_beta_slow),
        ):
            if rope.get(key) is not None:
                add(float(rope[key]))
        return None
    raise ExportError(f"RoPE scaling {rope['rope_type']!r} with {rope} cannot be written for llama.cpp's Llama architecture")


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
    scores: list[float] | None = _field(reader, "tokenizer.ggml.scores")
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
        if scores is not None:
            scores.append(-1000.0)
    writer.add_tokenizer_model(_field(reader, "tokenizer.ggml.model"))
    pre = _field(reader, "tokenizer.ggml.pre")
    if pre:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if scores is not None:
        writer.add_token_scores(scores)
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


def _backend_spec(hf_tokenizer) -> dict[str, Any]:
    backend = getattr(hf_tokenizer, "backend_tokenizer", None) or getattr(hf_tokenizer, "_tokenizer", None)
    if backend is None:
        raise ExportError("GGUF export needs a fast (tokenizers) tokenizer")
    return json.loads(backend.to_str())


def _pieces(spec: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not spec:
        return []
    return list(spec.get("pretokenizers") or spec.get("normalizers") or []) if spec.get("type") == "Sequence" else [spec]


def bpe_pre_tokenizer(spec: dict[str, Any]) -> str:
    """llama.cpp pre-tokenizer name for a byte-level BPE tokenizer, read from its split rules."""
    steps = _pieces(spec.get("pre_tokenizer"))
    kinds = [s.get("type") for s in steps]
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") and steps[1].get("use_regex", True):
        return "smollm"
    if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
        if steps[0].get("pattern", {}).get("Regex") == _LLAMA3_SPLIT and spec["model"].get("ignore_merges"):
            return "llama-bpe"
    raise ExportError(
        f"no llama.cpp pre-tokenizer is known for the pre-tokenizer {spec.get('pre_tokenizer')}; "
        "export from a base GGUF (source_gguf) to copy its tokenizer metadata"
    )


def _token_types(tokens: list[str], hf_tokenizer, spec: dict[str, Any], byte_tokens: bool) -> list[int]:
    import gguf

    specials = set(hf_tokenizer.all_special_tokens)
    added = {a["content"] for a in spec.get("added_tokens", [])}
    unk = getattr(hf_tokenizer, "unk_token", None)
    known = set(hf_tokenizer.get_vocab())
    types = []
    for tok in tokens:
        if tok in specials and tok == unk and byte_tokens:
            types.append(int(gguf.TokenType.UNKNOWN))
        elif tok in specials or tok in T.REFLECTION_TOKENS:
            types.append(int(gguf.TokenType.CONTROL))
        elif tok in added:
            types.append(int(gguf.TokenType.USER_DEFINED))
        elif tok not in known:  # a hole in the id range, filled with [PAD<i>]
            types.append(int(gguf.TokenType.UNUSED))
        elif byte_tokens and len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">"):
            types.append(int(gguf.TokenType.BYTE))
        else:
            types.append(int(gguf.TokenType.NORMAL))
    return types


def _space_prefix(spec: dict[str, Any]) -> bool:
    """Whether a SentencePiece-style tokenizer prefixes ``▁`` to each text piece (llama.cpp's only mode)."""
    for step in _pieces(spec.get("pre_tokenizer")):
        if step.get("type") == "Metaspace":
            scheme = step.get("prepend_scheme", "always" if step.get("add_prefix_space", True) else "never")
            if scheme == "first":
                raise ExportError(
                    "the tokenizer prefixes a space only to the first piece (Metaspace prepend_scheme 'first', "
                    "transformers legacy=False) but llama.cpp prefixes one after every special token; "
                    "load the tokenizer with legacy=True"
                )
            return scheme == "always"
    return any(n.get("type") == "Prepend" and n.get("prepend") == "\u2581" for n in _pieces(spec.get("normalizer")))


def _tokenizer_from_hf(writer, hf_tokenizer) -> int:
    """Tokenizer metadata from the HF tokenizer: byte-level BPE (``gpt2``) or SentencePiece BPE (``llama``)."""
    spec = _backend_spec(hf_tokenizer)
    model = spec.get("model", {})
    if model.get("type") != "BPE":
        raise ExportError(f"only BPE tokenizers (byte-level or SentencePiece) can be exported without a source GGUF, not {model.get('type')}")
    vocab = hf_tokenizer.get_vocab()
    n = max(vocab.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(n)]
    for tok, i in vocab.items():
        tokens[i] = tok
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    spm = bool(model.get("byte_fallback"))
    writer.add_tokenizer_model("llama" if spm else "gpt2")
    writer.add_tokenizer_pre("default" if spm else bpe_pre_tokenizer(spec))
    writer.add_token_list(tokens)
    writer.add_token_types(_token_types(tokens, hf_tokenizer, spec, byte_tokens=spm))
    if spm:
        # llama.cpp merges the adjacent pair whose joined piece scores highest; a SentencePiece BPE
        # vocabulary converted by transformers lists its merges in that order.
        rank: dict[str, int] = {}
        for r, merge in enumerate(merges):
            rank.setdefault(merge.replace(" ", ""), r)
        writer.add_token_scores([-float(rank[t]) if t in rank else (0.0 if len(t) == 1 else -1e6) for t in tokens])
        writer.add_add_space_prefix(_space_prefix(spec))
    else:
        # llama.cpp requires the key; a merge of two NUL bytes never applies to real text
        writer.add_token_merges(merges or ["\u0100 \u0100"])
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
    writer.add_add_eos_token(bool(hf_tokenizer.eos_token_id is not None and probe[-1:] == [hf_tokenizer.eos_token_id]))
    if getattr(hf_tokenizer, "chat_template", None):
        writer.add_chat_template(hf_tokenizer.chat_template)
    return n


def _check_tokenizer(path: Path, hf_tokenizer) -> None:
    """llama.cpp (when installed) must tokenize a probe text like the HF tokenizer does."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return
    llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        got = llm.tokenize(_PROBE.encode("utf-8"), add_bos=False, special=True)
    finally:
        llm.close()
    want = list(hf_tokenizer(_PROBE, add_special_tokens=False)["input_ids"])
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        raise ExportError(
            f"llama.cpp tokenizes differently from the Hugging Face tokenizer (first difference at token {first}: "
            f"{got[first:first + 5]} vs {want[first:first + 5]})"
        )


# -- writing ---------------------------------------------------------------------------------------
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
    ``f32``, ``f16`` or ``q8_0`` for the 2-D weights (norms stay f32), or one of
    :data:`LLAMA_QUANT_TYPES`, quantised by llama.cpp (needs ``llama-cpp-python``).
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
    if outtype in LLAMA_QUANT_TYPES:
        out = Path(out_path)
        full = out.with_name(out.name + ".f32")
        try:
            write_gguf(model, tokenizer, full, source_gguf=source_gguf, outtype="f32", name=name)
            return quantize_gguf(full, out, outtype)
        finally:
            full.unlink(missing_ok=True)
    config = model.config
    if getattr(config, "model_type", None) not in _LLAMA_TYPES:
        raise ExportError(f"GGUF export supports Llama-architecture models, not {getattr(config, 'model_type', None)!r}")
    if getattr(config, "sliding_window", None):
        raise ExportError("sliding-window attention cannot be written for llama.cpp's Llama architecture")
    state = {k: v.detach().to(torch.float32).cpu().numpy() for k, v in model.state_dict().items()}
    tied = bool(getattr(config, "tie_word_embeddings", False))
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    arch = gguf.MODEL_ARCH.LLAMA
    tmp = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(str(tmp), gguf.MODEL_ARCH_NAMES[arch])
    try:
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
        rope_freqs = _write_rope(writer, rope_parameters(config), head_dim)
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
        if rope_freqs is not None:
            writer.add_tensor(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", rope_freqs)
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
        _check_tokenizer(tmp, tokenizer)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, out)
    return out


def quantize_gguf(source: str | os.PathLike, out_path: str | os.PathLike, outtype: str, *, threads: int | None = None) -> Path:
    """Quantise the GGUF ``source`` to ``outtype`` (e.g. ``iq4_nl``) with llama.cpp, atomically into ``out_path``.

    Metadata (vocabulary, control tokens) is copied unchanged. A source that is already quantised
    is re-quantised (dequantised first), which adds error: quantise from f32 or f16 where possible.
    """
    import ctypes

    try:
        import llama_cpp
    except ImportError as exc:
        raise ExportError(f"writing {outtype} needs llama.cpp: pip install llama-cpp-python") from exc
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{outtype.upper()}", None)
    if ftype is None:
        raise ExportError(f"this llama.cpp cannot write {outtype!r}")
    source, out = Path(source), Path(out_path)
    if not source.is_file():
        raise ExportError(f"no GGUF file at {source}")
    out.parent.mkdir(parents=True, exist_ok=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = threads or os.cpu_count() or 1
    tmp = out.with_name(out.name + ".partial")
    with _quiet_stderr():  # llama.cpp logs every tensor
        status = llama_cpp.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params))
    if status != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise ExportError(f"llama.cpp could not quantise {source} to {outtype} (status {status})")
    os.replace(tmp, out)
    return out


class _quiet_stderr:
    """Silence file descriptor 2 (C code writes there directly) inside a ``with`` block."""

    def __enter__(self) -> None:
        self._saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
