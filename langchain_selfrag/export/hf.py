"""Load a Hugging Face causal LM and give it the 15 reflection tokens (the ``transformers`` extra).

* :func:`load_base` loads any causal LM: a Hugging Face directory or hub id, or a GGUF file
  (de-quantised to a plain fp32 model);
* :func:`add_reflection_tokens` adds the 15 tokens as additional special tokens, resizes the
  embeddings and initialises each new row from the mean of the rows of the token's text pieces;
* :func:`reflection_token_ids` looks their ids up (each must be a single token).

Used by the bundled-model build and by the training recipes (``training.core.adapters`` uses them).
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Any

from .. import tokens as T
from ..errors import SelfRAGError


class ModelSetupError(SelfRAGError, RuntimeError):
    """A causal LM, its tokenizer or a training run could not be set up.

    ``training.core.config.TrainingError`` is this class, so the recipes catch it too.
    """


def load_base(model: str | os.PathLike, *, dtype: Any = None):
    """``(model, tokenizer)`` for a HF directory / hub id, or a ``.gguf`` file (de-quantised fp32).

    A model loaded from GGUF is rebuilt as a plain model from its config and state dict, so that
    ``save_pretrained`` writes ordinary safetensors and no GGUF quantisation config.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = Path(model)
    try:
        if path.suffix == ".gguf":
            if not path.is_file():
                raise ModelSetupError(f"GGUF file not found: {path}")
            kwargs = {"gguf_file": path.name}
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), **kwargs)
            check_whole_words(tokenizer, path.name)
            # the file's metadata is parsed once for the config and handed to the model load, which would
            # parse it again for its own (seconds for a vocabulary of 50k tokens, more for 150k)
            config = AutoConfig.from_pretrained(str(path.parent), **kwargs)
            loaded = AutoModelForCausalLM.from_pretrained(str(path.parent), config=copy.deepcopy(config),
                                                          dtype=torch.float32, **kwargs)
            check_no_tokens_beyond(tokenizer, loaded.get_input_embeddings().weight.shape[0], path.name)
            for key in ("quantization_config", "_name_or_path"):
                if hasattr(config, key):
                    try:
                        delattr(config, key)
                    except AttributeError:
                        pass
            config.dtype = "float32"
            plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
            missing = [m for m in missing if not m.endswith("lm_head.weight")]
            if missing or unexpected:
                raise ModelSetupError(
                    f"rebuilding {path.name} as a plain model failed: missing={missing} unexpected={unexpected}"
                )
            if getattr(plain.config, "tie_word_embeddings", False):
                plain.tie_weights()
            del loaded
            net = plain
            use_gguf_eos(tokenizer, net, path)
        else:
            local = path.exists()
            tokenizer = AutoTokenizer.from_pretrained(str(model), local_files_only=local)
            net = AutoModelForCausalLM.from_pretrained(str(model), dtype=dtype or torch.float32, local_files_only=local)
    except (OSError, ValueError) as exc:
        raise ModelSetupError(f"could not load a causal LM from {model}: {exc}") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return net, tokenizer


# Common words every LM vocabulary of a Latin-script language holds whole, each after a space.
WHOLE_WORDS_PROBE = "the cat sat on the mat and the dog was in the house with the man for a day"
# Word-start markers of SentencePiece (Gemma, Llama 2) and of byte-level BPE (GPT-2, SmolLM2).
WORD_START_MARKERS = ("\u2581", "\u0120")


def split_whole_words(tokenizer, text: str = WHOLE_WORDS_PROBE) -> tuple[list[str], list[str]]:
    """``(split, held)``: the words of ``text`` after its first that the vocabulary holds as one
    word-start token (``held``), and those of them the tokenizer nonetheless splits (``split``)."""
    tokens = set(tokenizer.convert_ids_to_tokens(tokenizer(text, add_special_tokens=False)["input_ids"]))
    vocab = tokenizer.get_vocab()
    held, split = [], []
    for word in dict.fromkeys(text.split()[1:]):
        whole = [m + word for m in WORD_START_MARKERS if m + word in vocab]
        if whole:
            held.append(word)
            if not any(w in tokens for w in whole):
                split.append(word)
    return split, held


def check_whole_words(tokenizer, name: str) -> None:
    """Refuse a tokenizer converted from a GGUF that splits common words its own vocabulary holds whole.

    transformers 5.2 and 5.17 convert Gemma 3's GGUF tokenizer as a Unigram model without the file's
    merges (" the" becomes "▁t" "he"; 5.24 converts it as BPE). A model trained on that reads text
    in pieces llama.cpp never gives it, and nothing else fails: the loss falls as usual.
    """
    split, held = split_whole_words(tokenizer)
    if held and len(split) * 2 > len(held):
        import transformers

        raise ModelSetupError(
            f"transformers {transformers.__version__} converted the tokenizer of {name} so that it splits "
            f"words its vocabulary holds whole ({', '.join(repr(w) for w in split[:4])}); llama.cpp reads "
            "them whole, so a model trained on this would read text unlike it is read at inference. "
            "Use a transformers release that converts this GGUF's tokenizer with its merges "
            "(5.24 does for Gemma 3; 5.2 and 5.17 do not) or give the base as a Hugging Face folder."
        )


def tokens_beyond(tokenizer, rows: int) -> list[str]:
    """The tokens of ``tokenizer`` whose id is ``rows`` or more: tokens a model with ``rows``
    embedding rows (a GGUF's vocabulary) does not have."""
    return [tok for i, tok in sorted((i, tok) for tok, i in tokenizer.get_vocab().items() if i >= rows)]


def check_no_tokens_beyond(tokenizer, rows: int, name: str) -> None:
    """Refuse a tokenizer converted from a GGUF that holds tokens the GGUF's vocabulary lacks.

    transformers 5.2 to 5.5 add five code-infilling tokens (``▁<PRE>``...) to SmolLM2's GGUF tokenizer,
    and 5.2 adds ``<|im_start|>`` and ``<|im_end|>`` to a qwen2 GGUF's that lacks them: the reflection
    tokens would then get ids past tokens llama.cpp never sees, and the trained adapter would not line
    up with the GGUF when it is merged.
    """
    extra = tokens_beyond(tokenizer, rows)
    if extra:
        import transformers

        raise ModelSetupError(
            f"transformers {transformers.__version__} converted the tokenizer of {name} with "
            f"{len(extra)} token(s) its vocabulary of {rows} lacks ({', '.join(repr(t) for t in extra[:4])}); "
            "the reflection tokens would not line up with the GGUF. Use a transformers release that "
            "converts this GGUF's tokenizer as it is (5.6 and later do for SmolLM2) or give the base as a "
            "Hugging Face folder."
        )


def gguf_eos_token_id(path: str | os.PathLike) -> int | None:
    """``tokenizer.ggml.eos_token_id`` of a GGUF file: the token llama.cpp ends a generation on."""
    path = Path(path).resolve()
    stat = path.stat()
    return _gguf_eos_token_id(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _gguf_eos_token_id(path: str, size: int, mtime_ns: int) -> int | None:
    """Read once per file version: gguf's reader parses every metadata field (a vocabulary of 49k tokens
    takes about 4 s of CPU) to give this one."""
    import gguf

    field = gguf.GGUFReader(path).fields.get("tokenizer.ggml.eos_token_id")
    return None if field is None else int(field.contents())


def use_gguf_eos(tokenizer, model, path: str | os.PathLike) -> None:
    """Make the tokenizer's (and model's) end-of-sequence token the GGUF's own.

    Training appends ``tokenizer.eos_token_id`` to every example, so it must be the token llama.cpp
    stops on. Some transformers releases (5.17 for SmolLM2's GGUF) convert the GGUF tokenizer with
    eos = bos (``<|im_start|>``): a model trained on that never learns to stop.
    """
    eos = gguf_eos_token_id(path)
    if eos is None or tokenizer.eos_token_id == eos:
        return
    had_eos_as_pad = tokenizer.pad_token is None or tokenizer.pad_token_id == tokenizer.eos_token_id
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos)
    if had_eos_as_pad:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.eos_token_id = eos
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.eos_token_id = eos


def reflection_token_ids(tokenizer) -> dict[str, int]:
    """Id of each reflection token; raises if one is not a single token."""
    ids = {}
    for tok in T.REFLECTION_TOKENS:
        seq = tokenizer(tok, add_special_tokens=False)["input_ids"]
        if len(seq) != 1:
            raise ModelSetupError(f"{tok!r} is not a single token (ids {seq}); call add_reflection_tokens first")
        ids[tok] = seq[0]
    return ids


def add_reflection_tokens(model, tokenizer) -> dict[str, int]:
    """Add the 15 reflection tokens as additional special tokens and resize the embeddings.

    Tokens already present are kept. New embedding (and untied output) rows start from the mean of
    the rows of the pieces the token text split into before, a better start than random rows.
    Returns the id of every reflection token.
    """
    import torch

    pieces = {tok: tokenizer(tok, add_special_tokens=False)["input_ids"] for tok in T.REFLECTION_TOKENS}
    existing = set(tokenizer.get_vocab())
    new = [tok for tok in T.REFLECTION_TOKENS if tok not in existing]
    if new:
        specials = {"additional_special_tokens": new}
        if _accepts_replace(tokenizer):  # keep the tokenizer's own extra special tokens
            tokenizer.add_special_tokens(specials, replace_extra_special_tokens=False)
        else:
            tokenizer.add_special_tokens(specials)
    ids = reflection_token_ids(tokenizer)
    old_rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > old_rows:
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        out = model.get_output_embeddings()
        tied = out is None or out.weight.data_ptr() == emb.data_ptr()
        for tok in new:
            src = [i for i in pieces[tok] if i < old_rows]
            if not src:
                continue
            emb[ids[tok]] = emb[src].mean(0)
            if not tied:
                out.weight[ids[tok]] = out.weight[src].mean(0)
    return ids


def _accepts_replace(tokenizer) -> bool:
    import inspect

    try:
        return "replace_extra_special_tokens" in inspect.signature(tokenizer.add_special_tokens).parameters
    except (TypeError, ValueError):
        return False
