"""Tokenizer metadata of a written GGUF: copied from a source GGUF or built from the Hugging Face tokenizer.

SentencePiece vocabularies become tokenizer model ``llama`` with scores and byte tokens, byte-level
BPE becomes ``gpt2`` with the pre-tokenizer named after the tokenizer's own split rules; the
reflection tokens are CONTROL tokens. :func:`check_tokenizer` then makes llama.cpp (when
installed) tokenize a probe text and compares it with the Hugging Face tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import tokens as T
from . import ExportError

#: ``pre_tokenizer`` regexes of Hugging Face tokenizers -> llama.cpp ``tokenizer.ggml.pre`` names
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: Qwen2's split rule: Llama 3's with single digits
_QWEN2_SPLIT = _LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
_PROBE = (
    "### Instruction:\nWho wrote Hamlet in 1603?  Two  spaces,\ttabs and 3.14 don't matter.\n\n### Response:\n"
    "[Retrieval]<paragraph>Hamlet\nA tragedy (c. 1600) by William Shakespeare.</paragraph>[Relevant]"
    "It was Shakespeare.[Fully supported][Utility:5]"
)


def _field(reader, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def tokenizer_from_gguf(writer, source: Path, hf_tokenizer) -> int:
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
        regex = steps[0].get("pattern", {}).get("Regex")
        if regex == _LLAMA3_SPLIT and spec["model"].get("ignore_merges"):
            return "llama-bpe"
        if regex == _QWEN2_SPLIT:
            return "qwen2"
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


def tokenizer_from_hf(writer, hf_tokenizer) -> int:
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


def check_tokenizer(path: Path, hf_tokenizer) -> None:
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
