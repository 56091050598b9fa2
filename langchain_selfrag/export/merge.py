"""Merge a PEFT LoRA adapter and its trained token rows onto a GGUF with numpy and ``gguf`` (no torch).

What PEFT's ``merge_and_unload`` does to a model loaded from the GGUF, done on the GGUF itself:

1. every tensor of the base file is de-quantised (``gguf.quants.dequantize``: Q4_1, Q8_0, K-quants, ...);
2. each LoRA pair adds ``scaling * B @ A`` to its weight, ``scaling = lora_alpha / r`` (``/ sqrt(r)``
   with rsLoRA; ``alpha_pattern`` honoured), the HF module name mapped to the GGUF tensor name by
   ``gguf.TensorNameMap``. llama.cpp's Llama conversion stores Q and K with their rows permuted for
   its RoPE layout (:func:`~.layouts.permute_qk`; Gemma 3's is not permuted): the update gets the same permutation;
3. the new tokens (``tokens``: text -> id) are appended to the vocabulary as CONTROL tokens, and
   their rows of the embedding (and of an untied output matrix) are the adapter's trained rows
   (``trainable_token_indices``, saved as ``token_adapter.trainable_tokens_delta``: the rows
   themselves, as PEFT's ``index_copy`` merge uses them);
4. the result is quantised again (``q8_0``, ``f16`` or ``f32`` by gguf-py; ``iq4_nl`` / ``q4_0``
   through llama.cpp, :mod:`.quantize`) and written with the base file's metadata; or, with ``keep``,
   every tensor the adapter leaves alone is copied as it is (its own quantisation, bytes unchanged)
   and only those it changes are written in ``q8_0``.

A PEFT trainable-tokens adapter (``peft_type`` ``TRAINABLE_TOKENS``: token rows only, the same
``token_indices`` for each of its ``target_modules``) merges as step 3 alone.

Adapter tensors of any other kind (DoRA, LoRA on embeddings, LoRA biases, ``modules_to_save``) are
refused with an :class:`~langchain_selfrag.export.ExportError` rather than dropped.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..layout_record import folder_record
from ..prompt_layouts import GGUF_KEY, layout_named
from . import ExportError
from .gguf import OUTTYPES, WRITTEN_TYPES, encode_tensor, file_type, gguf_writer, quantized_via_f32
from .layouts import LlamaLayout, permute_qk

__all__ = ["LoraAdapter", "load_adapter", "merge_gguf", "read_safetensors"]

#: GGUF architectures whose llama.cpp conversion permutes the Q and K rows (``LlamaModel.permute``):
#: the writer's :class:`~.layouts.LlamaLayout` does it too.
PERMUTED_QK_ARCHS = frozenset({LlamaLayout.arch_name})
_PREFIX = "base_model.model."
_LORA = re.compile(r"^(?P<module>.+)\.lora_(?P<part>A|B)\.weight$")
#: token rows: LoRA's ``trainable_token_indices`` (``.token_adapter.``) or a trainable-tokens adapter's own
_ROWS = re.compile(r"^(?P<module>.+?)(?:\.token_adapter)?\.trainable_tokens_delta$")
#: ``outtype`` that keeps the base's own tensors as they are and writes only the changed ones (q8_0).
KEEP = "keep"
_SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16}


# -- the adapter -----------------------------------------------------------------------------------
def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as a float32 numpy array (bf16 widened exactly)."""
    raw = Path(path).read_bytes()
    if len(raw) < 8:
        raise ExportError(f"{path} is not a safetensors file")
    (size,) = struct.unpack("<Q", raw[:8])
    try:
        header = json.loads(raw[8 : 8 + size])
    except ValueError as exc:
        raise ExportError(f"{path} is not a safetensors file: {exc}") from exc
    body = memoryview(raw)[8 + size :]
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        dtype = _SAFETENSORS_DTYPES.get(spec["dtype"])
        if dtype is None:
            raise ExportError(f"{path}: tensor {name} has dtype {spec['dtype']}, not a float type")
        start, end = spec["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=np.dtype(dtype).newbyteorder("<")).reshape(spec["shape"])
        if spec["dtype"] == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        out[name] = array.astype(np.float32)
    return out


@dataclass
class LoraAdapter:
    """A PEFT LoRA adapter as arrays: LoRA pairs and trained token rows by HF module name."""

    #: module -> (A (r, in), B (out, r), scaling)
    lora: dict[str, tuple[np.ndarray, np.ndarray, float]] = field(default_factory=dict)
    #: module -> (token ids, their rows)
    rows: dict[str, tuple[list[int], np.ndarray]] = field(default_factory=dict)


def _pattern_value(patterns: Mapping[str, float], module: str, default: float) -> float:
    """PEFT's ``rank_pattern`` / ``alpha_pattern`` lookup: a key matching the module name's end wins."""
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


def _token_indices(config: Mapping, modules: list[str]) -> dict[str, list[int]]:
    """``trainable_token_indices`` per module (a plain list means the input embedding); a trainable-tokens
    adapter's ``token_indices`` for every module."""
    if config.get("peft_type") == "TRAINABLE_TOKENS":
        return {module: [int(i) for i in config.get("token_indices") or ()] for module in modules}
    spec = config.get("trainable_token_indices")
    if not spec:
        return {}
    if isinstance(spec, list):
        embeds = [m for m in modules if m.endswith("embed_tokens")]
        if len(embeds) != 1:
            raise ExportError(f"trainable_token_indices is a list but the adapter's token rows are for {modules}")
        return {embeds[0]: [int(i) for i in spec]}
    out = {}
    for module in modules:
        keys = [k for k in spec if module == k or module.endswith("." + k)]
        if len(keys) != 1:
            raise ExportError(f"no single trainable_token_indices entry for {module} (entries: {sorted(spec)})")
        out[module] = [int(i) for i in spec[keys[0]]]
    return out


def load_adapter(folder: str | os.PathLike) -> LoraAdapter:
    """Read ``adapter_config.json`` and ``adapter_model.safetensors`` of a PEFT LoRA adapter folder."""
    folder = Path(folder)
    try:
        config = json.loads((folder / "adapter_config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ExportError(f"cannot read the adapter config in {folder}: {exc}") from exc
    if config.get("peft_type") not in ("LORA", "TRAINABLE_TOKENS"):
        raise ExportError(f"only LoRA and trainable-tokens adapters can be merged, not {config.get('peft_type')!r}")
    for key, what in (("use_dora", "DoRA"), ("modules_to_save", "modules_to_save"),
                      ("target_parameters", "target_parameters")):
        if config.get(key):
            raise ExportError(f"the adapter in {folder} uses {what}, which this merge does not support")
    if config.get("bias", "none") != "none" or config.get("lora_bias"):
        raise ExportError(f"the adapter in {folder} trains biases, which this merge does not support")
    tensors = read_safetensors(folder / "adapter_model.safetensors")
    pairs: dict[str, dict[str, np.ndarray]] = {}
    deltas: dict[str, np.ndarray] = {}
    for name, array in tensors.items():
        key = name.removeprefix(_PREFIX)
        if m := _LORA.match(key):
            pairs.setdefault(m["module"], {})[m["part"]] = array
        elif m := _ROWS.match(key):
            deltas[m["module"]] = array
        else:
            raise ExportError(f"adapter tensor {name} is of a kind this merge does not support")
    adapter = LoraAdapter()
    if pairs and config.get("peft_type") != "LORA":
        raise ExportError(f"the adapter in {folder} has LoRA tensors but is a {config['peft_type']} adapter")
    alpha = float(config.get("lora_alpha", 1.0))
    alphas = config.get("alpha_pattern") or {}
    for module, parts in pairs.items():
        if set(parts) != {"A", "B"}:
            raise ExportError(f"adapter module {module} has lora_{''.join(parts)} only")
        r = parts["A"].shape[0]  # the rank, rank_pattern included
        a = _pattern_value(alphas, module, alpha)
        scaling = a / math.sqrt(r) if config.get("use_rslora") else a / r
        adapter.lora[module] = (parts["A"], parts["B"], scaling)
    for module, ids in _token_indices(config, sorted(deltas)).items():
        if len(ids) != deltas[module].shape[0]:
            raise ExportError(f"{module}: {len(ids)} trainable token ids but {deltas[module].shape[0]} rows")
        adapter.rows[module] = (ids, deltas[module])
    return adapter


# -- the GGUF --------------------------------------------------------------------------------------
def _contents(reader, key: str):
    field_ = reader.fields.get(key)
    return None if field_ is None else field_.contents()


class _Plan:
    """Where each adapter part goes in the base GGUF: tensor names, permutations, vocabulary rows."""

    def __init__(self, reader, adapter: LoraAdapter, tokens: Mapping[str, int]) -> None:
        import gguf

        self.arch = str(_contents(reader, "general.architecture"))
        arch_id = next((k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == self.arch), None)
        if arch_id is None:
            raise ExportError(f"the gguf package does not know the architecture {self.arch!r}")
        blocks = int(_contents(reader, f"{self.arch}.block_count"))
        n_head = int(_contents(reader, f"{self.arch}.attention.head_count"))
        n_kv = int(_contents(reader, f"{self.arch}.attention.head_count_kv") or n_head)
        names = gguf.TensorNameMap(arch_id, blocks)
        existing = {t.name for t in reader.tensors}
        permute = self.arch in PERMUTED_QK_ARCHS
        heads = {gguf.MODEL_TENSOR.ATTN_Q: n_head, gguf.MODEL_TENSOR.ATTN_K: n_kv}

        def gguf_name(module: str) -> tuple[str, int | None]:
            found = names.get_type_and_name(module + ".weight", try_suffixes=(".weight",))
            if found is None or found[1] not in existing:
                raise ExportError(f"adapter module {module} has no tensor in the base GGUF ({self.arch})")
            kind, name = found
            return name, heads.get(kind) if permute else None

        self.lora: dict[str, list[tuple[np.ndarray, np.ndarray, float, int | None]]] = {}
        for module, (a, b, scaling) in adapter.lora.items():
            name, n = gguf_name(module)
            # B @ A is (out, in), the layout of every GGUF matrix (the converters transpose
            # fan-in-fan-out Conv1D weights), so fan_in_fan_out needs no transposition here.
            self.lora.setdefault(name, []).append((a, b, scaling, n))
        self.rows: dict[str, tuple[list[int], np.ndarray]] = {}
        for module, (ids, rows) in adapter.rows.items():
            self.rows[gguf_name(module)[0]] = (ids, rows)
        self.vocab = list(_contents(reader, "tokenizer.ggml.tokens"))
        self.new_tokens = self._new_tokens(tokens)
        #: the embedding and an untied output matrix: one row per token, so they grow with the vocabulary
        self.vocab_tensors = [t.name for t in reader.tensors if t.name.split(".")[0] in ("token_embd", "output")
                              and len(t.shape) == 2 and int(t.shape[1]) == len(self.vocab)]
        for name in self.vocab_tensors:
            trained = set(self.rows.get(name, ([], None))[0])
            missing = [tok for tok, i in self.new_tokens if i not in trained]
            if missing:
                raise ExportError(f"the adapter has no trained {name} row for the new tokens {missing}")

    def _new_tokens(self, tokens: Mapping[str, int]) -> list[tuple[str, int]]:
        """The tokens to append, in id order; tokens the base already has must keep their ids."""
        index = {t: i for i, t in enumerate(self.vocab)}
        new = sorted((i, t) for t, i in tokens.items() if t not in index)
        for tok, i in tokens.items():
            if tok in index and index[tok] != i:
                raise ExportError(f"token {tok!r} has id {i} in the adapter but {index[tok]} in the base GGUF")
        for expected, (i, tok) in enumerate(new, start=len(self.vocab)):
            if i != expected:
                raise ExportError(f"new token {tok!r} has id {i}, expected {expected}: vocabularies do not line up")
        return [(t, i) for i, t in new]

    def changes(self, name: str) -> bool:
        """The adapter changes the tensor ``name`` (a LoRA pair, trained rows, or a grown vocabulary)."""
        return name in self.lora or name in self.rows or (name in self.vocab_tensors and bool(self.new_tokens))

    def merged(self, name: str, weights: np.ndarray) -> np.ndarray:
        """The base tensor ``name`` (de-quantised) with the adapter applied."""
        for a, b, scaling, n_head in self.lora.get(name, []):
            delta = (b @ a) * np.float32(scaling)
            if delta.shape != weights.shape:
                raise ExportError(f"{name}: LoRA update {delta.shape} does not fit the weight {weights.shape}")
            weights = weights + (permute_qk(delta, n_head) if n_head else delta)
        if name in self.vocab_tensors and self.new_tokens:
            weights = np.concatenate([weights, np.zeros((len(self.new_tokens), weights.shape[1]), np.float32)])
        if name in self.rows:
            ids, rows = self.rows[name]
            if max(ids) >= weights.shape[0]:
                raise ExportError(f"{name}: trained token id {max(ids)} is beyond its {weights.shape[0]} rows")
            weights = weights.copy()
            weights[ids] = rows
        return weights


def _copy_metadata(reader, writer, plan: _Plan, name: str, outtype: str, layout: str | None = None) -> None:
    """The base file's key-value pairs, with the new name, file type, the grown vocabulary and ``layout``
    (the prompt layout's name; None keeps the base's record)."""
    import gguf

    n_new = len(plan.new_tokens)
    grown = {
        "tokenizer.ggml.tokens": lambda v: v + [t for t, _ in plan.new_tokens],
        "tokenizer.ggml.token_type": lambda v: v + [int(gguf.TokenType.CONTROL)] * n_new,
        "tokenizer.ggml.scores": lambda v: v + [-1000.0] * n_new,
    }
    replaced = {"general.name": name, f"{plan.arch}.vocab_size": len(plan.vocab) + n_new}
    if outtype != KEEP:
        replaced["general.file_type"] = file_type(outtype)
    for key, fld in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or (key == GGUF_KEY and layout is not None):
            continue
        value = fld.contents()
        if key in grown:
            value = grown[key](list(value))
        value = replaced.get(key, value)
        vtype = gguf.GGUFValueType(fld.types[0])
        sub = gguf.GGUFValueType(fld.types[-1]) if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, vtype, sub_type=sub)
    if "general.name" not in reader.fields:
        writer.add_name(name)
    if layout is not None:
        writer.add_string(GGUF_KEY, layout_named(layout).name)


def merge_gguf(base: str | os.PathLike, adapter: str | os.PathLike, out: str | os.PathLike, *,
               tokens: Mapping[str, int], outtype: str = "q8_0", name: str = "selfrag",
               progress: bool = False, prompt_layout: str | None = None) -> Path:
    """Write ``base`` (a GGUF) with the PEFT adapter folder ``adapter`` merged in, atomically, to ``out``.

    ``prompt_layout``: the layout recorded in the file (``selfrag.prompt_layout``); by default the one the
    adapter folder records (``selfrag_training.json``), else the base's own record, if any.

    ``tokens``: the tokens the adapter was trained with (text -> id), e.g. the reflection tokens of
    ``selfrag_training.json``; those the base lacks are appended as CONTROL tokens.
    """
    import gguf
    from tqdm import tqdm

    if outtype not in OUTTYPES + (KEEP,):
        raise ExportError(f"outtype must be one of {OUTTYPES + (KEEP,)}, not {outtype!r}")
    out = Path(out)
    if outtype not in WRITTEN_TYPES + (KEEP,):
        return quantized_via_f32(out, outtype, lambda full: merge_gguf(
            base, adapter, full, tokens=tokens, outtype="f32", name=name, progress=progress,
            prompt_layout=prompt_layout))
    base = Path(base)
    if not base.is_file():
        raise ExportError(f"no GGUF file at {base}")
    reader = gguf.GGUFReader(str(base))
    plan = _Plan(reader, load_adapter(adapter), tokens)
    layout = folder_record(adapter) if prompt_layout is None else prompt_layout
    if outtype == "f32":
        return _merge_streamed(reader, plan, out, name, layout, progress)
    with gguf_writer(out, plan.arch) as writer:
        _copy_metadata(reader, writer, plan, name, outtype, layout)
        for tensor in tqdm(reader.tensors, desc="merging", unit="tensor", disable=not progress, file=sys.stderr):
            if outtype == KEEP and not plan.changes(tensor.name):
                writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape, raw_dtype=tensor.tensor_type)
                continue
            weights = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
            data, qtype = encode_tensor(tensor.name, plan.merged(tensor.name, weights), "q8_0" if outtype == KEEP else outtype)
            writer.add_tensor(tensor.name, data, raw_dtype=qtype)
    return out


def _merged_shape(tensor: Any, plan: _Plan) -> tuple[int, ...]:
    """The shape of ``tensor`` merged (numpy order): the base's, one row more per new token for the vocabulary's."""
    shape = [int(n) for n in reversed(tensor.shape.tolist())]
    if tensor.name in plan.vocab_tensors and plan.new_tokens:
        shape[0] += len(plan.new_tokens)
    return tuple(shape)


def _merge_streamed(reader: Any, plan: _Plan, out: Path, name: str, layout: str | None, progress: bool) -> Path:
    """The merge in f32 (the largest file: 6 GB for a 1.5B model) written one tensor at a time: the tensor
    infos first, from the shapes the merge gives, then each tensor merged and written, none held after."""
    import gguf
    from tqdm import tqdm

    shapes = [(tensor, _merged_shape(tensor, plan)) for tensor in reader.tensors]
    with gguf_writer(out, plan.arch, streamed=True) as writer:
        _copy_metadata(reader, writer, plan, name, "f32", layout)
        for tensor, shape in shapes:
            writer.add_tensor_info(tensor.name, shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for tensor, shape in tqdm(shapes, desc="merging", unit="tensor", disable=not progress, file=sys.stderr):
            weights = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
            data, _ = encode_tensor(tensor.name, plan.merged(tensor.name, weights), "f32")
            if data.shape != shape:
                raise ExportError(f"{tensor.name}: merged to {data.shape}, not the {shape} its header says")
            writer.write_tensor_data(data)
            del weights, data
    return out
