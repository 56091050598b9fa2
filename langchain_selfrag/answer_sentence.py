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

#: A line that is a unit of its own and takes no continuation: a heading or a table row.
_CLOSED_LINE = re.compile(r"^(?:#|\||=+$|-+$)|\s\|\s")
#: A line that opens a unit which the plain lines after it continue: a bullet, a quote, a directive,
#: a doctest or shell prompt (its output follows).
_OPEN_LINE = re.compile(r"^(?:[-*+\u2022]\s|>|\.\. |:\w|\$\s)")
#: A numbered item ("3. ", "3) "); it opens a unit only in a block that starts as a list, so that a
#: hard-wrapped line starting "250. Most of it" stays in its sentence.
_NUMBERED = re.compile(r"^\d{1,3}[.)]\s")
#: Markers that open such a line and are not part of what it says.
_MARKER = re.compile(r"^(?:[-*+\u2022]|\d{1,3}[.)]|#+|>(?!>))\s+")
_WORD = re.compile(r"\w+")
#: Longer units (a table flattened into one line, a paragraph without full stops) are not quoted.
MAX_QUOTE_WORDS = 60
#: A sentence that does not hold the answer word for word is quoted for it when it holds at least this share
#: of the answer's words (:func:`_share_held`; chosen on the trust suite's validation docs questions).
MIN_SHARE_HELD = 0.6
#: Words that say nothing on their own: an answer made only of them is not looked for in the passage.
_EMPTY_WORDS = frozenset({"a", "an", "the", "of", "in", "on", "at", "to", "for", "and", "or", "is", "are", "was",
                          "were", "be", "it", "its", "this", "that", "yes", "no", "not", "none", "true", "false"})


def _units(block: str) -> list[str]:
    """The units of one block (text between blank lines): headings and table rows alone, a list item or
    a prompt with the plain lines after it, and each run of plain lines as one paragraph."""
    lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
    is_list = bool(lines) and bool(_OPEN_LINE.match(lines[0]) or _NUMBERED.match(lines[0]))
    units: list[list[str]] = []
    open_unit = False  # the last unit takes the plain lines that follow
    for line in lines:
        if _CLOSED_LINE.search(line):
            units.append([line])
            open_unit = False
        elif _OPEN_LINE.match(line) or (is_list and _NUMBERED.match(line)):
            units.append([line])
            open_unit = True
        elif open_unit:
            units[-1].append(line)
        else:
            units.append([line])
            open_unit = True
    return [" ".join(unit) for unit in units]


def passage_sentences(text: str) -> list[str]:
    """The sentences of a passage, each an exact piece of it up to white space and list or heading markers.

    A block's plain lines are joined (a wrapped paragraph, a list item's continuation, a doctest's
    output after its ``>>>`` line); headings and table rows are units of their own (:func:`_units`).
    """
    units: list[str] = []
    for block in re.split(r"\n\s*\n", text or ""):
        for unit in _units(block):
            units += split_sentences(_MARKER.sub("", unit, count=1))
    return units


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _holds(words: Sequence[str], span: Sequence[str]) -> bool:
    n = len(span)
    return any(list(words[i:i + n]) == list(span) for i in range(len(words) - n + 1))


def _stem(word: str) -> str:
    """The word with a plural or verb ending cut ("setting" and "sets" to "sett" and "set"): enough for an
    answer's words and its passage's to meet when the model changed a form."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _share_held(said: set[str], words: Sequence[str]) -> float:
    """The share of ``said`` (the answer's words that say something, :data:`_EMPTY_WORDS` aside, each
    :func:`_stem`-ed) that the sentence holds, in any order; 0 when there are fewer than two of them."""
    if len(said) < 2:
        return 0.0
    return len(said & {_stem(w) for w in words}) / len(said)


def sentence_with(answer: str, passage: str, question: str = "") -> str | None:
    """The sentence of ``passage`` (:func:`passage_sentences`) that holds ``answer``: its words in order,
    case and punctuation aside; failing that, the sentence holding the largest share, at least
    :data:`MIN_SHARE_HELD`, of the answer's words that say something (:func:`_share_held`: the model
    changed a word's form or left one out). None when no sentence holds it, when the answer is already as
    long as the sentence that holds it word for word, when the sentence has over :data:`MAX_QUOTE_WORDS`
    words, or when the answer is only words that say nothing alone ("no", "the", "true"). Of several, the
    one sharing most words with ``question``, then the first."""
    span = _words(answer)
    if not span or set(span) <= _EMPTY_WORDS:
        return None
    asked = set(_words(question))
    said = {_stem(w) for w in span if w not in _EMPTY_WORDS}
    best, best_key = None, (0, 0.0, -1)  # (2 held and longer / 1 held and as long / 0 a share held, share, asked)
    for sentence in passage_sentences(passage):
        words = _words(sentence)
        if len(words) > MAX_QUOTE_WORDS:
            continue
        shared = len(asked & set(words))
        if _holds(words, span):
            key = (2 if len(span) < len(words) else 1, 1.0, shared)
        else:
            key = (0, _share_held(said, words), shared)
        if key > best_key:
            best, best_key = sentence, key
    tier, share, _ = best_key
    return best if tier == 2 or (tier == 0 and share >= MIN_SHARE_HELD) else None


def quoted_answer(answer: str, passage: str | None, question: str = "") -> str:
    """The answer as ``answer_form="sentence"`` gives it: the passage sentence that holds it, else the
    answer as generated (no passage, or the answer is not in the passage word for word)."""
    if not passage:
        return answer
    return sentence_with(answer, passage, question) or answer
