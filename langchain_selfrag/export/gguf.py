"""Write a Hugging Face model (Llama, Mistral, Qwen2, Gemma 3) as a GGUF file with the reflection tokens as control tokens.

Written with the ``gguf`` package (llama.cpp's ``gguf-py``) and following llama.cpp's
``convert_hf_to_gguf.py`` for what it writes: the architecture's hyperparameters and tensor layout
(:mod:`.layouts`: Llama's Q/K permutation and RoPE scaling, Qwen2's biases, Gemma 3's ``1 + w`` norms
and sliding window), SentencePiece vocabularies as tokenizer model ``llama`` with scores and byte tokens,
byte-level BPE as ``gpt2`` with the pre-tokenizer named after the tokenizer's own split rules.
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
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from ..prompt_layouts import CONFIG_KEY, GGUF_KEY, layout_named
from . import ExportError
from .gguf_tokenizer import check_tokenizer, tokenizer_from_gguf, tokenizer_from_hf
from .layouts import check_model_type, layout_for
from .quantize import LLAMA_QUANT_TYPES, quantize_gguf

#: Written by gguf-py directly.
WRITTEN_TYPES = ("f32", "f16", "q8_0")
#: Every ``outtype``: written by gguf-py, or quantised by llama.cpp afterwards (:mod:`.quantize`).
OUTTYPES = WRITTEN_TYPES + LLAMA_QUANT_TYPES


# -- tensors ---------------------------------------------------------------------------------------
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
def gguf_writer(out: Path, arch: str, check: Callable[[Path], None] | None = None, *,
                streamed: bool = False) -> Iterator[Any]:
    """A ``GGUFWriter`` on a partial file beside ``out``: the block adds metadata and tensors, then the
    file is written, ``check``-ed and moved onto ``out``. On any error nothing is left behind (the
    partial name holds the process id, so two processes building the same file do not collide).
    ``streamed``: the block writes the file itself (tensor infos, header, then each tensor's data), so
    that no more than one tensor is held at a time."""
    import gguf

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.partial")
    writer = gguf.GGUFWriter(str(tmp), arch)
    try:
        yield writer
        if not streamed:
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


# -- writing ---------------------------------------------------------------------------------------
def export_gguf(
    model_dir: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    source_gguf: str | os.PathLike | None = None,
    outtype: str = "q8_0",
    name: str | None = None,
) -> Path:
    """Write the HF model in ``model_dir`` (Llama, Mistral, Qwen2 or Gemma 3 text) as a GGUF file.

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
    check_model_type(config.get("model_type"))
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
    """Write an in-memory model and its tokenizer as GGUF (see :func:`export_gguf`); the prompt layout its config
    records (``selfrag_prompt_layout``) becomes the file's ``selfrag.prompt_layout``."""
    import gguf
    import torch

    if outtype not in OUTTYPES:
        raise ExportError(f"outtype must be one of {OUTTYPES}, not {outtype!r}")
    if outtype in LLAMA_QUANT_TYPES:
        return quantized_via_f32(Path(out_path), outtype, lambda full: write_gguf(
            model, tokenizer, full, source_gguf=source_gguf, outtype="f32", name=name))
    config = model.config
    layout = layout_for(config)
    state = {k: v.detach().to(torch.float32).cpu().numpy() for k, v in model.state_dict().items()}
    tied = bool(getattr(config, "tie_word_embeddings", False))
    out = Path(out_path)
    arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == layout.arch_name)
    with gguf_writer(out, layout.arch_name, check=lambda path: check_tokenizer(path, tokenizer)) as writer:
        writer.add_name(name)
        prompt_layout = getattr(config, CONFIG_KEY, None)
        if prompt_layout is not None:
            writer.add_string(GGUF_KEY, layout_named(prompt_layout).name)
        extra = layout.write_hparams(writer)
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
        for extra_name, array in extra.items():
            writer.add_tensor(extra_name, array)
        names = gguf.TensorNameMap(arch, config.num_hidden_layers)
        for hf_name, array in state.items():
            if hf_name.endswith("rotary_emb.inv_freq") or (hf_name == "lm_head.weight" and tied):
                continue
            new_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
            if new_name is None:
                raise ExportError(f"no GGUF name for tensor {hf_name}")
            data, qtype = encode_tensor(new_name, layout.tensor(hf_name, array), outtype)
            writer.add_tensor(new_name, data, raw_dtype=qtype)
    return out
