"""Export a trained adapter: merged with its base as a Hugging Face directory, packed small for
shipping, and the two backends compared on the exported model.

The GGUF itself is written by :mod:`langchain_selfrag.export.gguf` (Llama, SmolLM2, Mistral-style
configs without sliding windows, Gemma 3 text models; reflection tokens as CONTROL tokens), the
same writer the bundled-model build uses. Every recipe exports through ``python -m training.export``.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path

from langchain_selfrag import tokens as T
from langchain_selfrag.export import ExportError
from langchain_selfrag.prompt_layouts import CONFIG_KEY

from .adapters import load_trained
from .config import META_FILE

_LAYER = re.compile(r"\.layers\.(\d+)\.")


def export_merged(adapter_dir: str | os.PathLike, out_dir: str | os.PathLike, *, base_model: str | None = None) -> Path:
    """Base + reflection tokens + adapter, merged and saved as a plain HF directory."""
    model, tokenizer, meta = load_trained(adapter_dir, base_model=base_model)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if meta.get(CONFIG_KEY):  # the layout trained in goes into config.json, where every backend reads it
        setattr(model.config, CONFIG_KEY, meta[CONFIG_KEY])
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    (out / META_FILE).write_text(json.dumps(meta, indent=1))
    return out


def untrained_layers(weights: dict) -> set[int]:
    """Decoder layers whose every LoRA ``B`` is still zero (frozen by ``--train-from-layer``)."""
    layers: dict[int, bool] = {}
    for name, value in weights.items():
        found = _LAYER.search(name)
        if found and ".lora_B." in name:
            layer = int(found.group(1))
            layers[layer] = layers.get(layer, True) and not bool(value.any())
    return {layer for layer, zero in layers.items() if zero}


def pack_adapter(adapter_dir: str | os.PathLike, out_dir: str | os.PathLike, *, base_name: str | None = None) -> Path:
    """Copy a trained adapter into a small shippable folder: fp16 LoRA + token rows, config, metadata.

    The reflection-token rows stay fp32 (they are few and start far from any trained row). Layers
    whose LoRA was never trained are left out (the config's ``layers_to_transform`` names the rest).
    ``base_name`` replaces the machine-specific base-model path in the metadata.
    """
    import torch
    from safetensors.torch import load_file, save_file

    src, out = Path(adapter_dir), Path(out_dir)
    if not (src / "adapter_model.safetensors").is_file():
        raise ExportError(f"{src} has no adapter_model.safetensors")
    out.mkdir(parents=True, exist_ok=True)
    weights = load_file(str(src / "adapter_model.safetensors"))
    config = json.loads((src / "adapter_config.json").read_text())
    idle = untrained_layers(weights)
    if idle:
        weights = {k: v for k, v in weights.items() if not ((m := _LAYER.search(k)) and int(m.group(1)) in idle)}
        config["layers_to_transform"] = sorted({int(m.group(1)) for k in weights if (m := _LAYER.search(k))})
        config["layers_pattern"] = "layers"
    packed = {k: (v if "trainable_tokens" in k else v.to(torch.float16)).contiguous() for k, v in weights.items()}
    save_file(packed, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2))
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
