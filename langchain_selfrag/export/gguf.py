"""Write a Hugging Face Llama-architecture model as a GGUF file with the reflection tokens as control tokens.

Written with the ``gguf`` package (llama.cpp's ``gguf-py``) and following llama.cpp's
``convert_hf_to_gguf.py`` for what it writes: Q/K permutation, RoPE scaling (``linear`` and
``yarn`` metadata, the ``rope_freqs`` tensor for ``llama3``), SentencePiece vocabularies as
tokenizer model ``llama`` with scores and byte tokens, byte-level BPE as ``gpt2`` with the
pre-tokenizer named after the tokenizer's own split rules.
We keep our own writer because the converter is not installable as a package and cannot mark our
added tokens as control tokens or copy tokenizer metadata from a source GGUF.

The reflection tokens are CONTROL tokens, so llama.cpp maps their strings to single ids when it
tokenizes with ``special=True`` (as :class:`~langchain_selfrag.lm.llamacpp.LlamaCppReflectionLM`
does). Tokenizer metadata is copied from a source GGUF when the base model came from one (the
added tokens are appended); otherwise it is built from the Hugging Face tokenizer. When
``llama_cpp`` is installed the written vocabulary is checked: llama.cpp must tokenize a probe text
exactly like the Hugging Face tokenizer.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from . import ExportError
from .gguf_tokenizer import check_tokenizer, tokenizer_from_gguf, tokenizer_from_hf
from .quantize import LLAMA_QUANT_TYPES, quantize_gguf

#: Written by gguf-py directly.
WRITTEN_TYPES = ("f32", "f16", "q8_0")
#: Every ``outtype``: written by gguf-py, or quantised by llama.cpp afterwards (:mod:`.quantize`).
OUTTYPES = WRITTEN_TYPES + LLAMA_QUANT_TYPES
_LLAMA_TYPES = {"llama", "mistral"}


# -- tensors ---------------------------------------------------------------------------------------
def permute_qk(weights: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotary layout -> the interleaved layout llama.cpp's Llama conversion gives Q and K (rows reordered)."""
    return weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def encode_tensor(name: str, array: np.ndarray, outtype: str):
    """``(data, raw_dtype)`` to write ``array`` in ``outtype``: norms and 1-D tensors stay f32; a 2-D
    tensor whose rows are no multiple of 32 is written f16 (raw_dtype None: ``data``'s own dtype)."""
    import gguf

    if array.ndim < 2 or name.endswith("_norm.weight") or outtype == "f32":
        return array.astype(np.float32), None
    if outtype == "f16":
        return array.astype(np.float16), None
    if array.shape[-1] % 32:
        return array.astype(np.float16), None
    qtype = gguf.GGMLQuantizationType.Q8_0
    return gguf.quants.quantize(array.astype(np.float32), qtype), qtype


def file_type(outtype: str) -> int:
    """``general.file_type`` of a file gguf-py writes in ``outtype`` (one of :data:`WRITTEN_TYPES`)."""
    import gguf

    return int({"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[outtype])


@contextlib.contextmanager
def gguf_writer(out: Path, arch: str, check: Callable[[Path], None] | None = None) -> Iterator[Any]:
    """A ``GGUFWriter`` on a partial file beside ``out``: the block adds metadata and tensors, then the
    file is written, ``check``-ed and moved onto ``out``. On any error nothing is left behind (the
    partial name holds the process id, so two processes building the same file do not collide)."""
    import gguf

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.partial")
    writer = gguf.GGUFWriter(str(tmp), arch)
    try:
        yield writer
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        if check is not None:
            check(tmp)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, out)


def quantized_via_f32(out: Path, outtype: str, write_f32: Callable[[Path], Path]) -> Path:
    """A file in one of :data:`LLAMA_QUANT_TYPES`: written in f32 by ``write_f32``, then quantised by llama.cpp."""
    full = out.with_name(out.name + ".f32")
    try:
        write_f32(full)
        return quantize_gguf(full, out, outtype)
    finally:
        full.unlink(missing_ok=True)


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
        return quantized_via_f32(Path(out_path), outtype, lambda full: write_gguf(
            model, tokenizer, full, source_gguf=source_gguf, outtype="f32", name=name))
    config = model.config
    if getattr(config, "model_type", None) not in _LLAMA_TYPES:
        raise ExportError(f"GGUF export supports Llama-architecture models, not {getattr(config, 'model_type', None)!r}")
    if getattr(config, "sliding_window", None):
        raise ExportError("sliding-window attention cannot be written for llama.cpp's Llama architecture")
    state = {k: v.detach().to(torch.float32).cpu().numpy() for k, v in model.state_dict().items()}
    tied = bool(getattr(config, "tie_word_embeddings", False))
    out = Path(out_path)
    arch = gguf.MODEL_ARCH.LLAMA
    with gguf_writer(out, gguf.MODEL_ARCH_NAMES[arch], check=lambda path: check_tokenizer(path, tokenizer)) as writer:
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
        writer.add_file_type(file_type(outtype))
        n_vocab = tokenizer_from_gguf(writer, Path(source_gguf), tokenizer) if source_gguf else tokenizer_from_hf(writer, tokenizer)
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
                array = permute_qk(array, n_head)
            elif hf_name.endswith("k_proj.weight"):
                array = permute_qk(array, n_kv)
            data, qtype = encode_tensor(new_name, array, outtype)
            writer.add_tensor(new_name, data, raw_dtype=qtype)
    return out
