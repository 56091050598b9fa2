"""What the GGUF writer does differently per architecture: hyperparameters, tensor layout, limits.

Each layout follows llama.cpp's ``convert_hf_to_gguf.py`` for its architecture:

* :class:`LlamaLayout` (``llama``, ``mistral``): Q and K rows permuted for llama.cpp's RoPE
  (:func:`permute_qk`), RoPE scaling written as metadata or as the ``rope_freqs`` tensor;
* :class:`Qwen2Layout` (``qwen2``, e.g. Qwen2.5-Coder-0.5B): Q/K/V biases, no Q/K permutation, an
  untied output matrix;
* :class:`Gemma3Layout` (``gemma3_text``, e.g. Gemma 3 270M): every RMSNorm weight stored as
  ``1 + w`` (llama.cpp's Gemma norms multiply by the weight itself), global and sliding-window
  attention. llama.cpp fixes some of Gemma 3's settings rather than reading them from the file
  (every 6th layer global, sliding-window RoPE base 10000, attention scaled by ``head_dim``), so a
  configuration that differs is refused instead of written into a file that computes something else.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import ExportError

__all__ = ["Gemma3Layout", "LlamaLayout", "Qwen2Layout", "check_model_type", "layout_for", "permute_qk", "rope_parameters", "supported_model_types"]


def permute_qk(weights: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotary layout -> the interleaved layout llama.cpp's Llama conversion gives Q and K (rows reordered)."""
    return weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def rope_parameters(config, layer_type: str = "full_attention") -> dict[str, Any]:
    """RoPE settings of a HF config as one dict: transformers 5's ``rope_parameters`` (per layer type
    where the model has several), else transformers 4's ``rope_scaling`` and ``rope_theta`` (for
    Gemma 3's sliding-window layers ``rope_local_base_freq``)."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and any(isinstance(v, dict) for v in params.values()):
        params = params.get(layer_type)
    out = dict(params) if isinstance(params, dict) else {}
    if layer_type == "full_attention":
        scaling = getattr(config, "rope_scaling", None)
        out = {**scaling, **out} if isinstance(scaling, dict) else out
        theta = getattr(config, "rope_theta", None)
    else:
        theta = getattr(config, "rope_local_base_freq", None)
    if "rope_type" not in out and "type" in out:
        out["rope_type"] = out["type"]
    out.setdefault("rope_theta", theta or 10000.0)
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


class _Layout:
    """Shared by every layout: the hyperparameters all llama.cpp decoder architectures read."""

    arch_name = ""
    model_types: frozenset[str] = frozenset()

    def __init__(self, config) -> None:
        self.config = config
        self.n_head = config.num_attention_heads
        self.n_kv = getattr(config, "num_key_value_heads", None) or self.n_head
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.n_head
        self.check()

    def check(self) -> None:
        """Raise :class:`ExportError` when llama.cpp cannot compute what ``config`` describes."""

    def write_hparams(self, writer) -> dict[str, np.ndarray]:
        """Write the hyperparameters; return extra tensors (GGUF name -> array) the file needs."""
        config = self.config
        writer.add_context_length(config.max_position_embeddings)
        writer.add_embedding_length(config.hidden_size)
        writer.add_block_count(config.num_hidden_layers)
        writer.add_feed_forward_length(config.intermediate_size)
        writer.add_head_count(self.n_head)
        writer.add_head_count_kv(self.n_kv)
        writer.add_key_length(self.head_dim)
        writer.add_value_length(self.head_dim)
        writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
        return {}

    def tensor(self, hf_name: str, array: np.ndarray) -> np.ndarray:
        """The HF tensor ``hf_name`` as llama.cpp stores it."""
        return array


class LlamaLayout(_Layout):
    """Llama and Mistral: permuted Q/K, RoPE scaling (``linear``, ``yarn``, ``llama3``)."""

    arch_name = "llama"
    model_types = frozenset({"llama", "mistral"})

    def check(self) -> None:
        if getattr(self.config, "sliding_window", None):
            raise ExportError("sliding-window attention cannot be written for llama.cpp's Llama architecture")

    def write_hparams(self, writer) -> dict[str, np.ndarray]:
        import gguf

        extra = super().write_hparams(writer)
        writer.add_rope_dimension_count(self.head_dim)
        rope = rope_parameters(self.config)
        writer.add_rope_freq_base(float(rope["rope_theta"]))
        kind = str(rope["rope_type"]).lower()
        if kind == "llama3":
            extra[gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight"] = llama3_rope_factors(rope, self.head_dim)
        elif kind == "linear" and rope.get("factor") is not None:
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(float(rope["factor"]))
        elif kind == "yarn" and rope.get("factor") is not None and rope.get("original_max_position_embeddings"):
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
        elif kind != "default":
            raise ExportError(f"RoPE scaling {rope['rope_type']!r} with {rope} cannot be written for llama.cpp's Llama architecture")
        return extra

    def tensor(self, hf_name: str, array: np.ndarray) -> np.ndarray:
        if hf_name.endswith("q_proj.weight"):
            return permute_qk(array, self.n_head)
        if hf_name.endswith("k_proj.weight"):
            return permute_qk(array, self.n_kv)
        return array


#: llama.cpp's Gemma 3: every 6th layer attends globally, the others through the sliding window.
GEMMA3_GLOBAL_EVERY = 6
#: llama.cpp's Gemma 3: the RoPE base of the sliding-window layers (not read from the file).
GEMMA3_SLIDING_ROPE_BASE = 10000.0
_GEMMA3_ACTIVATIONS = {"gelu_pytorch_tanh", "gelu_new", "gelu_fast"}


class Gemma3Layout(_Layout):
    """Gemma 3 text models: ``1 + w`` norms, sliding-window attention, no Q/K permutation."""

    arch_name = "gemma3"
    model_types = frozenset({"gemma3_text"})

    def check(self) -> None:
        config = self.config
        refusals = []
        for key in ("final_logit_softcapping", "attn_logit_softcapping"):
            if getattr(config, key, None) is not None:
                refusals.append(f"{key}={getattr(config, key)} (llama.cpp's Gemma 3 applies none)")
        scalar = getattr(config, "query_pre_attn_scalar", self.head_dim)
        if scalar != self.head_dim:
            refusals.append(f"query_pre_attn_scalar={scalar}, not head_dim={self.head_dim} (llama.cpp scales by head_dim)")
        expected = ["full_attention" if (i + 1) % GEMMA3_GLOBAL_EVERY == 0 else "sliding_attention"
                    for i in range(config.num_hidden_layers)]
        layer_types = list(getattr(config, "layer_types", None) or expected)
        if layer_types != expected:
            refusals.append(f"layer_types {layer_types} (llama.cpp makes every {GEMMA3_GLOBAL_EVERY}th layer global)")
        local = rope_parameters(config, "sliding_attention")
        if local["rope_type"] != "default" or float(local["rope_theta"]) != GEMMA3_SLIDING_ROPE_BASE:
            refusals.append(f"sliding-window RoPE {local} (llama.cpp uses plain RoPE, base {GEMMA3_SLIDING_ROPE_BASE:g})")
        activation = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None)
        if activation not in _GEMMA3_ACTIVATIONS:
            refusals.append(f"hidden_activation={activation!r} (llama.cpp uses tanh-approximated GELU)")
        if getattr(config, "use_bidirectional_attention", False):
            refusals.append("bidirectional attention")
        if refusals:
            raise ExportError("llama.cpp's Gemma 3 cannot compute this model: " + "; ".join(refusals))

    def write_hparams(self, writer) -> dict[str, np.ndarray]:
        import gguf

        extra = super().write_hparams(writer)
        rope = rope_parameters(self.config)
        writer.add_rope_freq_base(float(rope["rope_theta"]))
        if rope["rope_type"] == "linear" and rope.get("factor") is not None:
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(float(rope["factor"]))
        elif rope["rope_type"] != "default":
            raise ExportError(f"RoPE scaling {rope} cannot be written for llama.cpp's Gemma 3")
        writer.add_sliding_window(int(self.config.sliding_window))
        return extra

    def tensor(self, hf_name: str, array: np.ndarray) -> np.ndarray:
        return array + np.float32(1.0) if hf_name.endswith("norm.weight") else array


class Qwen2Layout(_Layout):
    """Qwen2 and Qwen2.5: biases on Q, K and V (written as they are), no Q/K permutation, an untied
    output matrix unless the config ties it (llama.cpp's ``Qwen2Model``)."""

    arch_name = "qwen2"
    model_types = frozenset({"qwen2"})

    def check(self) -> None:
        if getattr(self.config, "use_sliding_window", False):
            raise ExportError("sliding-window attention cannot be written for llama.cpp's Qwen2 architecture")

    def write_hparams(self, writer) -> dict[str, np.ndarray]:
        import gguf

        extra = super().write_hparams(writer)
        rope = rope_parameters(self.config)
        writer.add_rope_freq_base(float(rope["rope_theta"]))
        if rope["rope_type"] == "yarn" and rope.get("factor") is not None and rope.get("original_max_position_embeddings"):
            writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            writer.add_rope_scaling_factor(float(rope["factor"]))
            writer.add_rope_scaling_orig_ctx_len(int(rope["original_max_position_embeddings"]))
        elif rope["rope_type"] != "default":
            raise ExportError(f"RoPE scaling {rope} cannot be written for llama.cpp's Qwen2")
        return extra


_LAYOUTS = (LlamaLayout, Gemma3Layout, Qwen2Layout)


def supported_model_types() -> list[str]:
    """Every ``model_type`` the GGUF writer supports."""
    return sorted(t for layout in _LAYOUTS for t in layout.model_types)


def check_model_type(model_type: str | None) -> None:
    """:class:`ExportError` naming the supported model types when ``model_type`` is not one."""
    if model_type not in supported_model_types():
        raise ExportError(f"GGUF export supports {', '.join(supported_model_types())} models, not {model_type!r}")


def layout_for(config) -> _Layout:
    """The layout for a HF config, checked; :class:`ExportError` when it is not supported."""
    check_model_type(getattr(config, "model_type", None))
    return next(layout for layout in _LAYOUTS if config.model_type in layout.model_types)(config)

