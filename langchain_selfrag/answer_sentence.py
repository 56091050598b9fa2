"""Answers as the passage's own sentence: the sentence of the cited passage that holds the model's
short answer, quoted whole (``SelfRAGConfig.answer_form = "sentence"``).

A small reflection model often reads the right passage but answers with a fragment ("drop", "No
Retrieval") or a span that is only part of the answer. The sentence around that span explains and
can be checked against its source. These functions are pure: the ``select`` node calls them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .restraint.claims import split_sentences

#: A line that stands on its own: a list item, heading, table row, quote, directive or code prompt.
_OWN_LINE = re.compile(r"^\s*(?:[-*+\u2022]\s|\d{1,3}[.)]\s|#|\||>|\.\. |:\w|\$\s)|\s\|\s")
#: Markers that open such a line and are not part of what it says.
_MARKER = re.compile(r"^\s*(?:[-*+\u2022]|\d{1,3}[.)]|#+|>(?!>))\s+")
_WORD = re.compile(r"\w+")
#: Longer units (a table flattened into one line, a paragraph without full stops) are not quoted.
MAX_QUOTE_WORDS = 60


def passage_sentences(text: str) -> list[str]:
    """The sentences of a passage, each an exact piece of it up to white space and list or heading markers.

    A paragraph's wrapped lines are joined before it is split into sentences; in a block with list
    items, headings, table rows, quoted lines or code, every line is a unit of its own, except an
    indented line, which continues the list item above it, and a doctest's output, which stays with
    its ``>>>`` line.
    """
    units: list[str] = []
    for block in re.split(r"\n\s*\n", text or ""):
        lines = [ln.rstrip() for ln in block.splitlines() if ln.strip()]
        if not lines:
            continue
        if any(_OWN_LINE.search(ln) for ln in lines):
            groups: list[str] = []
            for ln in lines:
                continues = ln[:1].isspace() or groups[-1].startswith(">>>") if groups else False
                if continues and not _OWN_LINE.search(ln):
                    groups[-1] += " " + ln.strip()
                else:
                    groups.append(ln.strip())
        else:
            groups = [" ".join(ln.strip() for ln in lines)]
        for group in groups:
            units += split_sentences(_MARKER.sub("", group, count=1))
    return units


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _holds(words: Sequence[str], span: Sequence[str]) -> bool:
    n = len(span)
    return any(list(words[i:i + n]) == list(span) for i in range(len(words) - n + 1))


def sentence_with(answer: str, passage: str, question: str = "") -> str | None:
    """The sentence of ``passage`` (:func:`passage_sentences`) that holds ``answer`` (same words in order,
    case and punctuation aside); None when no sentence holds it, when the answer is already as long
    as that sentence, or when the sentence has over :data:`MAX_QUOTE_WORDS` words. Of several, the one
    sharing most words with ``question``, then the first."""
    span = _words(answer)
    if not span:
        return None
    asked = set(_words(question))
    best, best_shared = None, -1
    for sentence in passage_sentences(passage):
        words = _words(sentence)
        if not len(span) < len(words) <= MAX_QUOTE_WORDS or not _holds(words, span):
            continue
        shared = len(asked & set(words))
        if shared > best_shared:
            best, best_shared = sentence, shared
    return best


def quoted_answer(answer: str, passage: str | None, question: str = "") -> str:
    """The answer as ``answer_form="sentence"`` gives it: the passage sentence that holds it, else the
    answer as generated (no passage, or the answer is not in the passage word for word)."""
    if not passage:
        return answer
    return sentence_with(answer, passage, question) or answer
