"""Pure text helpers: answer containment, sentence splitting and passage chunking."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from langchain_text_splitters import RecursiveCharacterTextSplitter

from langchain_selfrag.evaluation.qa.metrics import normalize_answer

# A boundary is ``.``, ``!`` or ``?`` (plus closing quotes/brackets) and white space before an upper-case letter,
# digit or opening quote, unless the dot ends an initial or a short abbreviation (``Dr.``, ``No.``, ``e.g.``, ``vs.``).
_BOUNDARY = (
    r"(?<=[.!?])(?<!\b[A-Zc]\.)(?<!\b(?:[A-Z][a-z]|vs|ca)\.)(?<!\b(?:[A-Z][a-z]{2}|e\.g|i\.e)\.)(?<!\b[A-Z][a-z]{3}\.)"
    r"[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])"
)
# chunk_size=1 keeps every sentence a chunk of its own (nothing is merged).
_SENTENCES = RecursiveCharacterTextSplitter(
    separators=[_BOUNDARY], is_separator_regex=True, keep_separator="end", chunk_size=1, chunk_overlap=0
)


def contains_answer(text: str, answers: Iterable[str]) -> bool:
    """True if any normalised answer occurs as whole words in the normalised text."""
    # Not evaluation.qa.metrics.match: that is plain substring containment ("Paris" in "Parisian").
    norm = f" {normalize_answer(text)} "
    for answer in answers:
        a = normalize_answer(answer)
        if a and f" {a} " in norm:
            return True
    return False


def token_overlap(answer: str, text: str) -> float:
    """Fraction of the answer's normalised tokens that occur in ``text``."""
    # Recall only: evaluation.qa.metrics.token_f1 also counts precision and repeated tokens.
    tokens = normalize_answer(answer).split()
    if not tokens:
        return 0.0
    have = set(normalize_answer(text).split())
    return sum(t in have for t in tokens) / len(tokens)


def split_sentences(text: str) -> list[str]:
    """Split text into sentences with a rule-based splitter (no model download needed)."""
    return [s.strip() for s in _SENTENCES.split_text(" ".join(text.split()))]


def chunk_sentences(sentences: Sequence[str], max_chars: int) -> list[tuple[int, int]]:
    """Greedy groups of consecutive sentences of at most ``max_chars`` (a longer sentence stands alone).

    Returns ``(first, last_exclusive)`` sentence index ranges covering every sentence once.
    """
    # Own loop: text splitters return chunk texts, and load_squad needs sentence ranges to place answer spans.
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
    # Own two lines: text splitters cut by characters or tokens, not by a word count.
    words = text.split()
    return text if len(words) <= max_words else " ".join(words[:max_words])
