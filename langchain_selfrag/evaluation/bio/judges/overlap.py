"""The lexical judge (the default): a claim against the entity's passages, sharing no signal with any model.

A claim is true iff some window of passage sentences holds every number and proper noun of the
claim and most of its other content words (:func:`overlap_support`). Independent of the restraint
scorer, but lexical: a rewording it cannot match counts as false, and a false claim made of true
words (a role swapped between two names of one sentence) as true.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.documents import Document

from ....retrieval import document_title

#: Words that carry no fact of their own (left out of the content words a claim must share).
STOPWORDS = frozenset([
    "a", "an", "the", "and", "or", "but", "nor", "of", "in", "on", "at", "to", "for", "from", "by", "with", "as",
    "into", "onto", "over", "under", "about", "after", "before", "between", "during", "since", "until", "through",
    "than", "then", "also", "both", "either", "neither", "each", "every", "all", "any", "some", "such", "own",
    "same", "other", "is", "are", "was", "were", "be", "been", "being", "am", "has", "have", "had", "having",
    "do", "does", "did", "done", "will", "would", "shall", "should", "can", "could", "may", "might", "must",
    "not", "no", "yes", "this", "that", "these", "those", "there", "here", "it", "its", "it's", "he", "him",
    "his", "she", "her", "hers", "they", "them", "their", "theirs", "we", "us", "our", "you", "your", "i", "me",
    "my", "who", "whom", "whose", "which", "what", "when", "where", "why", "how", "so", "very", "more", "most",
    "many", "much", "one's", "well", "known", "best", "later", "currently", "former"
])
_WORD = re.compile(r"[A-Za-z\u00C0-\u024F]+(?:['\u2019-][A-Za-z\u00C0-\u024F]+)*|\d+(?:[.,]\d+)*")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+(?=[A-Z0-9\"(])")
_UNITS = {w: i for i, w in enumerate(
    [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
        "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"
    ])}
_MONTHS = frozenset({"may"})  # a month that is also a stopword: kept when capitalised
_TENS = {w: 10 * i for i, w in enumerate(
    ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]) if i > 1}


def _fold(word: str) -> str:
    """Lower case without accents, a possessive dropped and one suffix of a longer word cut
    (``-ing``, ``-ed``, ``-s``): ``earned``, ``earning`` and ``earns`` all give ``earn``."""
    text = unicodedata.normalize("NFKD", word.replace("\u2019", "'")).encode("ascii", "ignore").decode().lower()
    text = text.removesuffix("'s")
    if len(text) > 4 and not text.endswith("ss"):
        for suffix in ("ing", "ed", "s"):
            if text.endswith(suffix):
                return text[: -len(suffix)]
    return text


def _number(word: str) -> str | None:
    """A number as digits (``"sixteen"`` -> ``"16"``, ``"thirty-five"`` -> ``"35"``, ``"47th"`` -> ``"47"``)."""
    low = word.lower()
    if low[:1].isdigit():
        return re.sub(r"[.,](?=\d{3}\b)", "", low)
    parts = low.split("-")
    if len(parts) == 1 and low in _UNITS:
        return str(_UNITS[low])
    if parts[0] in _TENS and (len(parts) == 1 or (len(parts) == 2 and parts[1] in _UNITS)):
        return str(_TENS[parts[0]] + (_UNITS[parts[1]] if len(parts) == 2 else 0))
    return None


@dataclass(frozen=True)
class ClaimTerms:
    """What a claim says, as folded words: ``numbers``, ``names`` (capitalised words not at the start,
    not the entity's) and the other ``content`` words (no stopwords, not the entity's name)."""

    numbers: frozenset[str]
    names: frozenset[str]
    content: frozenset[str]


def name_words(entity: str) -> frozenset[str]:
    """The folded words of an entity's name, without a parenthetical (``John Morris (curler)``)."""
    return frozenset(_fold(w) for w in _WORD.findall(re.sub(r"\([^)]*\)", " ", entity)))


def claim_terms(claim: str, entity: str) -> ClaimTerms:
    """The numbers, names and content words of ``claim`` about ``entity`` (pure)."""
    own = name_words(entity)
    numbers, names, content = set(), set(), set()
    for i, word in enumerate(_WORD.findall(claim)):
        number = _number(re.sub(r"(?<=\d)(st|nd|rd|th)$", "", word))
        if number is not None:
            numbers.add(number)
            continue
        folded = _fold(word)
        name = word[0].isupper() and i > 0
        if folded in own or (folded in STOPWORDS and not (name and folded in _MONTHS)) or len(folded) < 2:
            continue
        (names if name else content).add(folded)
    return ClaimTerms(frozenset(numbers), frozenset(names), frozenset(content))


def passage_words(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(folded words, numbers) of a piece of passage text."""
    words, numbers = set(), set()
    for word in _WORD.findall(text):
        number = _number(re.sub(r"(?<=\d)(st|nd|rd|th)$", "", word))
        if number is not None:
            numbers.add(number)
        words.add(_fold(word))
    return frozenset(words), frozenset(numbers)


def is_about(entity: str, passage: Document) -> bool:
    """True when the passage's title holds every word of the entity's name (or the title is empty and
    the text holds them): passages retrieved for a name are often about someone else."""
    own = name_words(entity)
    title = document_title(passage)
    words = passage_words(title if title else passage.page_content)[0]
    return bool(own) and own <= words


def windows(passages: Sequence[Document], size: int) -> list[tuple[frozenset[str], frozenset[str]]]:
    """(words, numbers) of every run of ``size`` consecutive sentences of each passage."""
    out = []
    for doc in passages:
        sentences = [s for s in _SENTENCE.split(doc.page_content) if s.strip()] or [doc.page_content]
        for i in range(max(1, len(sentences) - size + 1)):
            out.append(passage_words(" ".join(sentences[i:i + size])))
    return out


def overlap_support(claim: str, entity: str, passages: Sequence[Document], *, window: int = 2,
                    own_passages: bool = True) -> float:
    """How well the best window of passage sentences covers ``claim``, in [0, 1] (pure).

    0 when a number or a name of the claim is missing from every window; otherwise the share of
    the claim's content words found in the best window that holds all its numbers and names (1.0
    for a claim with names or numbers and no other content word). ``own_passages``: only the
    passages about the entity (:func:`is_about`) count. A claim with no term at all scores 0.
    """
    terms = claim_terms(claim, entity)
    if not (terms.numbers or terms.names or terms.content):
        return 0.0
    docs = [d for d in passages if is_about(entity, d)] if own_passages else list(passages)
    best = 0.0
    for words, numbers in windows(docs, window):
        if not (terms.numbers <= numbers and terms.names <= words):
            continue
        share = len(terms.content & words) / len(terms.content) if terms.content else 1.0
        best = max(best, share)
    return best


class OverlapJudge:
    """A claim is true iff :func:`overlap_support` > ``threshold``: no model, no shared signal."""

    def __init__(self, *, threshold: float = 0.5, window: int = 2, own_passages: bool = True) -> None:
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"threshold must lie in [0, 1), not {threshold!r}")
        if window < 1:
            raise ValueError("window must be at least 1")
        self.threshold = float(threshold)
        self.window = window
        self.own_passages = own_passages

    @property
    def name(self) -> str:
        scope = "" if self.own_passages else "-any"
        return f"overlap-w{self.window}-gt{self.threshold:g}{scope}"

    @property
    def description(self) -> str:
        scope = "the passages titled with the entity's name" if self.own_passages else "all the entity's passages"
        return (f"lexical overlap (independent of every model): a claim is true iff some {self.window} consecutive "
                f"sentences of {scope} hold all its numbers and proper nouns and more than {self.threshold:g} of its "
                "other content words; no passages: false")

    def scores(self, entity: str, claims: Sequence[str], passages: Sequence[Document]) -> list[float]:
        """The support of each claim (:func:`overlap_support`)."""
        return [overlap_support(c, entity, passages, window=self.window, own_passages=self.own_passages)
                for c in claims]

    def __call__(self, entity: str, claims: Sequence[str], passages: Sequence[Document]) -> list[bool | None]:
        return [score > self.threshold for score in self.scores(entity, claims, passages)]
