"""Pure text helpers: answer normalisation, containment, sentence splitting and passage chunking."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SENT_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREV = re.compile(r"(?:\b[A-Z][a-z]{0,3}|\b[A-Z]|\be\.g|\bi\.e|\bvs|\bc|\bca|\bNo|\bSt|\bMt|\bDr|\bMr|\bMrs)\.$")


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def contains_answer(text: str, answers: Iterable[str]) -> bool:
    """True if any normalised answer occurs in the normalised text (the paper's "match")."""
    norm = f" {normalize_answer(text)} "
    for answer in answers:
        a = normalize_answer(answer)
        if a and f" {a} " in norm:
            return True
    return False


def token_overlap(answer: str, text: str) -> float:
    """Fraction of the answer's normalised tokens that occur in ``text``."""
    tokens = normalize_answer(answer).split()
    if not tokens:
        return 0.0
    have = set(normalize_answer(text).split())
    return sum(t in have for t in tokens) / len(tokens)


def split_sentences(text: str) -> list[str]:
    """Split text into sentences with a small rule-based splitter (no model download needed).

    Splits after ``.``, ``!`` or ``?`` followed by white space and an upper-case letter, digit or
    opening quote, except after common abbreviations and initials.
    """
    text = " ".join(text.split())
    if not text:
        return []
    out: list[str] = []
    start = 0
    for match in _SENT_END.finditer(text):
        candidate = text[start : match.start()].rstrip()
        if _ABBREV.search(candidate):
            continue
        out.append(text[start : match.end()].strip())
        start = match.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return [s for s in out if s]


def chunk_sentences(sentences: Sequence[str], max_chars: int) -> list[tuple[int, int]]:
    """Greedy groups of consecutive sentences of at most ``max_chars`` (a longer sentence stands alone).

    Returns ``(first, last_exclusive)`` sentence index ranges covering every sentence once.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be positive")
    ranges: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, sent in enumerate(sentences):
        extra = len(sent) + (1 if i > start else 0)
        if i > start and size + extra > max_chars:
            ranges.append((start, i))
            start, size = i, len(sent)
        else:
            size += extra
    if sentences:
        ranges.append((start, len(sentences)))
    return ranges


def truncate_words(text: str, max_words: int) -> str:
    """The first ``max_words`` words of ``text`` (unchanged when shorter)."""
    words = text.split()
    return text if len(words) <= max_words else " ".join(words[:max_words])
