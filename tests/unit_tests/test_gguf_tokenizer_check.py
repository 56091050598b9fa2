"""A tokenizer converted from a GGUF must read common words whole when its vocabulary holds them whole,
and hold no token the GGUF's vocabulary lacks."""

from __future__ import annotations

import pytest

from langchain_selfrag.export.hf import (
    WHOLE_WORDS_PROBE,
    ModelSetupError,
    check_no_tokens_beyond,
    check_whole_words,
    split_whole_words,
    tokens_beyond,
)

MARK = "\u2581"  # SentencePiece's word start, as in Gemma 3's vocabulary


class PieceTokenizer:
    """Splits each word after the first into ``MARK`` + its first letter and the rest, or, with
    ``whole``, keeps it whole where the vocabulary holds ``MARK`` + the word (``vocab_words``: those)."""

    def __init__(self, *, whole: bool, vocab_words=None):
        first, *rest = WHOLE_WORDS_PROBE.split()
        words = rest if vocab_words is None else vocab_words
        pieces = {first} | {MARK + w[0] for w in rest} | {w[1:] for w in rest if w[1:]} | {MARK + w for w in words}
        self.vocab = {p: i for i, p in enumerate(sorted(pieces))}
        self.whole = whole
        self.inverse = {i: p for p, i in self.vocab.items()}

    def get_vocab(self):
        return dict(self.vocab)

    def __call__(self, text, add_special_tokens=True):
        first, *rest = text.split()
        out = [first]
        for word in rest:
            out += [MARK + word] if self.whole and MARK + word in self.vocab else [MARK + word[0], word[1:]]
        return {"input_ids": [self.vocab[p] for p in out if p]}

    def convert_ids_to_tokens(self, ids):
        return [self.inverse[i] for i in ids]


def test_a_tokenizer_that_reads_words_whole_passes():
    tok = PieceTokenizer(whole=True)
    split, held = split_whole_words(tok)
    assert split == [] and "the" in held
    check_whole_words(tok, "base.gguf")


def test_a_tokenizer_that_splits_words_its_vocabulary_holds_is_refused():
    pytest.importorskip("transformers")
    tok = PieceTokenizer(whole=False)
    split, held = split_whole_words(tok)
    assert split == [w for w in held if len(w) > 1] and "the" in split
    with pytest.raises(ModelSetupError, match=r"converted the tokenizer of base\.gguf so that it splits words .*'cat'"):
        check_whole_words(tok, "base.gguf")


def test_words_the_vocabulary_lacks_are_not_counted():
    tok = PieceTokenizer(whole=False, vocab_words=[])  # a vocabulary of pieces only: splitting is its own rule
    assert split_whole_words(tok) == ([], ["a"])  # "▁a" is both the piece and the word
    check_whole_words(tok, "base.gguf")


def test_tokens_past_the_gguf_vocabulary_are_refused():
    pytest.importorskip("transformers")
    tok = PieceTokenizer(whole=True)
    rows = len(tok.get_vocab())
    check_no_tokens_beyond(tok, rows, "base.gguf")
    tok.vocab.update({"<|im_start|>": rows, "<|im_end|>": rows + 1})  # as transformers 5.2 adds to a qwen2 GGUF's
    assert tokens_beyond(tok, rows) == ["<|im_start|>", "<|im_end|>"]
    with pytest.raises(ModelSetupError, match=r"base\.gguf with 2 token\(s\) its vocabulary of \d+ lacks \('<\|im_start\|>'"):
        check_no_tokens_beyond(tok, rows, "base.gguf")
