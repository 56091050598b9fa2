"""Base model and LoRA adapters: the base with the reflection tokens, the LoRA config with trainable
reflection-token rows, continuing an earlier adapter, rebuilding a trained model, and two fixes of
TRL's handling of a continued PEFT adapter (the ``ref`` copy of the token rows, the head's bias)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from langchain_selfrag.export.hf import add_reflection_tokens, load_base

from .config import META_FILE, SFTRunConfig, TrainingError


def resolve_base(base_model: str) -> str:
    """A base known by name (``qwen2.5-coder-0.5b-instruct``, ``smollm2-135m-instruct``, …:
    :data:`langchain_selfrag.bundled.bases.BASES`) as its checked GGUF path; anything else as given."""
    from langchain_selfrag.bundled import BundleError
    from langchain_selfrag.bundled.bases import base_gguf_path, is_base_name

    if not is_base_name(base_model):
        return base_model
    try:
        return str(base_gguf_path(base_model))
    except BundleError as exc:
        raise TrainingError(str(exc)) from exc


def prepare_model(base_model: str, *, add_tokens: bool = True):
    """Load the base (a path, hub id or known base name) and add the reflection tokens:
    ``(model, tokenizer, token ids)``."""
    model, tokenizer = load_base(resolve_base(base_model))
    ids = add_reflection_tokens(model, tokenizer) if add_tokens else {}
    return model, tokenizer, ids


def lora_config(model, token_ids: Sequence[int], cfg: SFTRunConfig):
    """LoRA on the attention/MLP projections + trainable rows for the reflection tokens (none when
    ``token_ids`` is empty: a chat model trained in its own vocabulary, such as a relevance judge)."""
    from peft import LoraConfig

    trainable: dict[str, list[int]] | None = None
    if token_ids:
        trainable = {_module_name(model, model.get_input_embeddings()): list(token_ids)}
        out = model.get_output_embeddings()
        if out is not None and out.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
            trainable[_module_name(model, out)] = list(token_ids)
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    targets = [t for t in cfg.target_modules if t in names]
    if not targets:
        raise TrainingError(f"none of the LoRA target modules {cfg.target_modules} exist in the model")
    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        trainable_token_indices=trainable,
        task_type="CAUSAL_LM",
    )


def module_path(model, module) -> str:
    """The dotted path of ``module`` inside ``model`` (``model.embed_tokens``, ``lm_head``)."""
    for name, mod in model.named_modules():
        if mod is module:
            return name
    raise TrainingError("embedding module not found in the model")


def _module_name(model, module) -> str:
    return module_path(model, module).rsplit(".", 1)[-1]


def load_trained(adapter_dir: str | os.PathLike, *, base_model: str | None = None, merge: bool = True):
    """Rebuild a trained model: base + reflection tokens (those it was trained with) + adapter (merged by default)."""
    from peft import PeftModel

    adapter = Path(adapter_dir)
    meta_path = adapter / META_FILE
    if not meta_path.is_file():
        raise TrainingError(f"{adapter} is not a training output (no {META_FILE})")
    meta = json.loads(meta_path.read_text())
    base = base_model or meta["base_model"]
    expected = {k: int(v) for k, v in meta["reflection_token_ids"].items()}
    model, tokenizer, ids = prepare_model(base, add_tokens=bool(expected))  # a judge adds none
    if ids != expected:
        raise TrainingError("reflection-token ids of the rebuilt base differ from training; wrong base model?")
    peft_model = PeftModel.from_pretrained(model, str(adapter))
    model = peft_model.merge_and_unload() if merge else peft_model
    return model, tokenizer, meta



def prepare_policy(cfg: SFTRunConfig):
    """``(model, tokenizer, token ids, peft_config)``: a fresh LoRA config, or the init adapter loaded trainable."""
    model, tokenizer, ids = prepare_model(cfg.base_model)
    if not cfg.init_adapter:
        return model, tokenizer, ids, lora_config(model, sorted(ids.values()), cfg)
    from peft import PeftModel

    meta_path = Path(cfg.init_adapter) / META_FILE
    if meta_path.is_file():
        expected = {k: int(v) for k, v in json.loads(meta_path.read_text()).get("reflection_token_ids", {}).items()}
        if expected and expected != ids:
            raise TrainingError(
                f"reflection-token ids of {cfg.base_model} differ from those {cfg.init_adapter} was trained with")
    model = PeftModel.from_pretrained(model, str(cfg.init_adapter), is_trainable=True)
    return model, tokenizer, ids, None


def sync_ref_adapter(model) -> int:
    """Copy the trainable reflection-token rows of the ``default`` adapter into TRL's ``ref`` adapter.

    Continuing a PEFT adapter, TRL's DPO and RLOO trainers add a frozen ``ref`` copy of it, but copy
    only parameters named ``*.default.*``; the token rows end in ``.default`` and keep their initial
    values, so the reference would differ from the starting policy. Returns the tensors copied.
    """
    import torch

    if "ref" not in getattr(model, "peft_config", {}):
        return 0
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    copied = 0
    with torch.no_grad():
        for name, value in {**params, **buffers}.items():
            if not name.endswith(".default"):
                continue
            twin = name[: -len("default")] + "ref"
            target = params.get(twin, buffers.get(twin))
            if target is not None and target.shape == value.shape:
                target.copy_(value)
                copied += 1
    return copied


def expose_head_bias(model) -> bool:
    """Let TRL's fused LM head read ``bias`` through PEFT's trainable-token wrapper of the head.

    TRL's DPO and RLOO trainers compute log-probabilities from ``lm_head.weight`` and
    ``lm_head.bias`` directly. With reflection-token rows on the head (tied embeddings, or
    ``trainable_token_indices`` on it) the head is a ``TrainableTokensWrapper`` that forwards
    ``weight`` (the merged rows, differentiable) but not ``bias``. Returns True when patched.
    """
    head = model.get_output_embeddings()
    if head is None or "bias" in vars(head):
        return False
    try:
        head.bias  # noqa: B018 - a plain layer, or a wrapper that already forwards it
        return False
    except AttributeError:
        base = getattr(getattr(head, "token_adapter", None), "base_layer", None)
        object.__setattr__(head, "bias", getattr(base, "bias", None))
        return True
