"""Tiny random models for tests: a Llama with the 15 reflection tokens as special tokens, and a
random LoRA + token-row adapter on any base."""

from __future__ import annotations

import json
import os
from pathlib import Path

from langchain_selfrag import tokens as T


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


def invented_sentences(n: int = 400, seed: int = 0) -> list[str]:
    """``n`` made-up English sentences with digits and punctuation, to train tiny tokenizers on."""
    import random

    rng = random.Random(seed)
    subjects = ["the river", "a small cat", "our teacher", "the old library", "every student", "the quiet city", "my neighbour"]
    verbs = ["reads", "follows", "remembers", "paints", "visits", "describes", "finds", "answers", "wrote"]
    objects = ["a long letter", "the morning news", "three questions", "the wooden bridge", "an ancient map", "the evening sky"]
    tails = ["before noon.", "in 1914.", "without a word!", "near the harbour?", "with great care.", "after 2023 years.",
             "because it rained.", "and it's 12345 km away.", "at 3.14 o'clock."]
    lines = [f"{rng.choice(subjects).capitalize()} {rng.choice(verbs)} {rng.choice(objects)} {rng.choice(tails)}" for _ in range(n)]
    return lines + ["### Instruction:", "### Response:", "## Input:", "Who wrote Hamlet?", "Write a short poem about rain.",
                    "Evidence: some evidence text for the comparison."]


def _save_tiny_llama(tokenizer, out: Path, *, seed: int, layers: int, hidden: int, **config) -> Path:
    """Random tiny Llama for ``tokenizer`` (peaked output layer), saved with it into ``out``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False, **config,
    ))
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _tiny_bpe_tokenizer(seed: int, *, reflection_tokens: bool = True, qwen2: bool = False):
    """A byte-level BPE tokenizer with Llama-3's split rules (or Qwen2's: single digits, merges
    always applied), trained here on invented sentences."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from langchain_selfrag.export.gguf_tokenizer import _LLAMA3_SPLIT, _QWEN2_SPLIT

    backend = Tokenizer(models.BPE(ignore_merges=not qwen2))
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_QWEN2_SPLIT if qwen2 else _LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    lines = invented_sentences(seed=seed)
    prompts = [f"### Instruction:\n{line}\n\n### Response:\n" for line in lines[:100]]  # "\n\n" merges
    backend.train_from_iterator(lines + prompts, trainer=trainer)
    if not qwen2:  # Qwen2 adds no BOS token (its GGUFs say add_bos_token = false)
        bos = backend.token_to_id("<|begin_of_text|>")
        backend.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    if reflection_tokens:
        tokenizer.add_special_tokens({"additional_special_tokens": list(T.REFLECTION_TOKENS)})
    tokenizer.add_special_tokens({"pad_token": "<pad>"})
    return tokenizer


def build_tiny_llama3_model(out_dir: str | os.PathLike, *, seed: int = 0, rope_type: str = "llama3") -> Path:
    """A tiny random Llama-3.1-style model: Llama-3 pre-tokenizer, trained byte-level BPE, scaled RoPE.

    ``rope_type="llama3"`` uses a small ``original_max_position_embeddings`` (32) so the scaling
    changes most frequencies of a 16-dim head at prompt lengths; ``"linear"`` divides positions by
    4; ``"default"`` gives the same weights without scaling.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _tiny_bpe_tokenizer(seed)
    ropes = {
        "default": {"rope_type": "default", "rope_theta": 10000.0},
        "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
        "llama3": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
    }
    rope = ropes[rope_type]
    return _save_tiny_llama(tokenizer, out, seed=seed, layers=2, hidden=64, max_position_embeddings=4096,
                            rope_parameters=rope)


def build_tiny_qwen2_model(out_dir: str | os.PathLike, *, seed: int = 0, reflection_tokens: bool = True) -> Path:
    """A tiny random Qwen2 model: Qwen2's pre-tokenizer, random (so they matter) biases on Q, K and V,
    an untied output matrix (peaked) and Qwen2.5's RoPE base."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _tiny_bpe_tokenizer(seed, reflection_tokens=reflection_tokens, qwen2=True)
    tokenizer.add_special_tokens({"unk_token": "<|endoftext|>"})  # AutoTokenizer loads it as Qwen2's, which has one
    # Qwen2's chat tokens, as every Qwen2 vocabulary has them (transformers 5.2 adds them to a qwen2 GGUF's)
    tokenizer.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    ))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("proj.bias"):
                param.normal_(0.0, 0.5)
        model.lm_head.weight.mul_(40.0)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_tiny_gemma3_model(out_dir: str | os.PathLike, *, seed: int = 0, reflection_tokens: bool = True,
                            sliding_window: int = 8, **config) -> Path:
    """A tiny random Gemma 3 text model (tied embeddings, six layers: five sliding-window, one global).

    The sliding window (8 tokens) is shorter than the test prompts, so both kinds of attention
    matter. Every RMSNorm weight is random (Gemma stores ``w`` and multiplies by ``1 + w``) and the
    final one large, so the next-token distribution is peaked. ``config`` overrides the config.
    """
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _tiny_bpe_tokenizer(seed, reflection_tokens=reflection_tokens)
    torch.manual_seed(seed)
    settings = dict(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
        sliding_window=sliding_window, max_position_embeddings=4096, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
    )
    model = Gemma3ForCausalLM(Gemma3TextConfig(**{**settings, **config}))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.normal_(0.0, 0.3)
        model.model.norm.weight.add_(30.0)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_tiny_spm_model(out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """A tiny random Llama-2-style model: a SentencePiece BPE tokenizer with byte fallback (trained here).

    The tokenizer is a ``LlamaTokenizer`` with ``legacy=True`` (a ``▁`` after every special token,
    as in the published Self-RAG checkpoints and as llama.cpp's SentencePiece tokenizer does).
    """
    import io

    import sentencepiece as spm
    from transformers import LlamaTokenizer

    out = Path(out_dir)
    (out / "spm").mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(invented_sentences(seed=seed)), model_writer=buf, vocab_size=600, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, split_digits=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        num_threads=1, minloglevel=2,
    )
    (out / "spm" / "tokenizer.model").write_bytes(buf.getvalue())
    tokenizer = LlamaTokenizer.from_pretrained(str(out / "spm"), legacy=True, add_bos_token=True)
    tokenizer.add_special_tokens({"additional_special_tokens": list(T.REFLECTION_TOKENS)})
    tokenizer.add_special_tokens({"pad_token": "<pad>"})
    _save_tiny_llama(tokenizer, out, seed=seed, layers=2, hidden=64, max_position_embeddings=4096)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config["legacy"] = True  # transformers 5 does not save it; without it the tokenizer reloads as legacy=False
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return out


def plain_tiny_model(out_dir, seed: int = 0, layers: int = 1):
    """A tiny random Llama + byte-level tokenizer WITHOUT the reflection tokens (a plain base)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(["<unk>", "<s>", "</s>", *sorted(alphabet)])}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def write_sft_records(path, n=12):
    """Write ``n`` Self-RAG SFT records (a third without retrieval) as JSONL to ``path``."""
    rows = []
    for i in range(n):
        if i % 3 == 0:
            rows.append({"instruction": f"Write line {i}", "input": "", "output": f"[No Retrieval]Line {i}.[Utility:5]"})
        else:
            rows.append({"instruction": f"Q{i}?", "input": "", "output": f"[Retrieval]<paragraph>T{i}\nText {i}</paragraph>"
                         f"[Relevant]A{i}[Fully supported][Utility:5]"})
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def random_adapter(base_dir, out_dir, *, seed: int = 1):
    """A LoRA + token-row adapter with random weights on ``base_dir`` (the training recipe's config)
    and SFT metadata, saved in ``out_dir`` (a stand-in for the bundled one): ``(peft model, token ids)``."""
    import torch
    from peft import get_peft_model

    from training.core.adapters import lora_config, prepare_model
    from training.core.config import META_FILE, SFTRunConfig

    model, _, ids = prepare_model(str(base_dir))
    peft_model = get_peft_model(model, lora_config(model, sorted(ids.values()), SFTRunConfig("", "", "")))
    torch.manual_seed(seed)
    with torch.no_grad():
        for _, p in peft_model.named_parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.3)
    peft_model.save_pretrained(str(out_dir), save_embedding_layers=False)
    (Path(out_dir) / META_FILE).write_text(json.dumps({"base_model": str(base_dir), "reflection_token_ids": ids}))
    return peft_model, ids
