"""The 15 Self-RAG reflection tokens: groups, stripping, parsing and neutralisation.

Everything here is pure string/list processing so it can be used on output from any backend.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

# Exact strings, in the order the released checkpoints add them as special tokens.
NO_RETRIEVAL = "[No Retrieval]"
RETRIEVAL = "[Retrieval]"
CONTINUE = "[Continue to Use Evidence]"
IRRELEVANT = "[Irrelevant]"
RELEVANT = "[Relevant]"
PARAGRAPH_START = "<paragraph>"
PARAGRAPH_END = "</paragraph>"
UTILITY = tuple(f"[Utility:{i}]" for i in range(1, 6))
FULLY_SUPPORTED = "[Fully supported]"
PARTIALLY_SUPPORTED = "[Partially supported]"
NO_SUPPORT = "[No support / Contradictory]"

#: The 15 reflection tokens in checkpoint order (ids 32000..32014 in the Llama-2 releases).
REFLECTION_TOKENS: tuple[str, ...] = (
    NO_RETRIEVAL,
    RETRIEVAL,
    CONTINUE,
    IRRELEVANT,
    RELEVANT,
    PARAGRAPH_START,
    PARAGRAPH_END,
    *UTILITY,
    FULLY_SUPPORTED,
    PARTIALLY_SUPPORTED,
    NO_SUPPORT,
)


class Kind(str, Enum):
    """Groups of reflection tokens; each group is one decision read at one position."""

    RETRIEVE = "retrieve"
    ISREL = "isrel"
    ISSUP = "issup"
    ISUSE = "isuse"
    EVIDENCE = "evidence"


GROUPS: dict[Kind, tuple[str, ...]] = {
    Kind.RETRIEVE: (NO_RETRIEVAL, RETRIEVAL, CONTINUE),
    Kind.ISREL: (IRRELEVANT, RELEVANT),
    Kind.ISSUP: (FULLY_SUPPORTED, PARTIALLY_SUPPORTED, NO_SUPPORT),
    Kind.ISUSE: UTILITY,
    Kind.EVIDENCE: (PARAGRAPH_START, PARAGRAPH_END),
}

KIND_OF: dict[str, Kind] = {tok: kind for kind, toks in GROUPS.items() for tok in toks}

#: Groups whose probabilities are critique scores (everything but the evidence delimiters).
CRITIQUE_KINDS = (Kind.RETRIEVE, Kind.ISREL, Kind.ISSUP, Kind.ISUSE)

_ANY_TOKEN = re.compile("|".join(re.escape(t) for t in sorted(REFLECTION_TOKENS, key=len, reverse=True)))
_ZWSP = "\u200b"


def strip_reflection_tokens(text: str) -> str:
    """Remove every reflection token and any evidence paragraph, for display."""
    text = re.sub(re.escape(PARAGRAPH_START) + r".*?" + re.escape(PARAGRAPH_END), "", text, flags=re.S)
    text = _ANY_TOKEN.sub("", text)
    text = text.replace("</s>", "")
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def neutralise(text: str) -> str:
    """Make reflection-token strings inside untrusted text tokenize as plain text.

    A zero-width space goes after the first character of each occurrence, so the visible text is
    unchanged but no tokenizer can match it to a special token id. Apply to user input and
    retrieved passages before they are put into a prompt.
    """
    return _ANY_TOKEN.sub(lambda m: m.group(0)[0] + _ZWSP + m.group(0)[1:], text)


def find_reflection_tokens(text: str) -> list[tuple[int, str]]:
    """(character offset, token) for every reflection token in ``text``."""
    return [(m.start(), m.group(0)) for m in _ANY_TOKEN.finditer(text)]


@dataclass
class Segment:
    """One output segment with the reflection tokens that frame it."""

    text: str = ""
    retrieve: str | None = None
    paragraph: str | None = None
    isrel: str | None = None
    issup: str | None = None
    isuse: str | None = None
    tokens: list[str] = field(default_factory=list)


def parse_generation(text: str) -> list[Segment]:
    """Split a Self-RAG generation into segments.

    A new segment starts at every Retrieve token (``[Retrieval]``, ``[No Retrieval]``,
    ``[Continue to Use Evidence]``). Evidence between ``<paragraph>`` and ``</paragraph>`` goes to
    ``paragraph``; critique tokens are attached to the segment they follow. Malformed input (an
    unclosed paragraph, stray tokens) never raises: unclosed evidence runs to the end of the text.
    """
    segments: list[Segment] = []
    current = Segment()
    pos = 0
    text = text.replace("</s>", "")
    while pos <= len(text):
        match = _ANY_TOKEN.search(text, pos)
        end = match.start() if match else len(text)
        current.text += text[pos:end]
        if not match:
            break
        token = match.group(0)
        pos = match.end()
        kind = KIND_OF[token]
        if kind is Kind.RETRIEVE:
            if current.text.strip() or current.tokens:
                segments.append(current)
            current = Segment(retrieve=token, tokens=[token])
            continue
        current.tokens.append(token)
        if token == PARAGRAPH_START:
            close = text.find(PARAGRAPH_END, pos)
            stop = close if close >= 0 else len(text)
            current.paragraph = text[pos:stop]
            if close >= 0:
                current.tokens.append(PARAGRAPH_END)
            pos = stop + (len(PARAGRAPH_END) if close >= 0 else 0)
        elif kind is Kind.ISREL:
            current.isrel = token
        elif kind is Kind.ISSUP:
            current.issup = token
        elif kind is Kind.ISUSE:
            current.isuse = token
    if current.text.strip() or current.tokens:
        segments.append(current)
    for seg in segments:
        seg.text = seg.text.strip()
    return segments


def parse_token_ids(
    ids: Sequence[int],
    id_to_token: Mapping[int, str],
    decode: Callable[[list[int]], str],
) -> list[Segment]:
    """Parse generated token ids, recognising reflection tokens by id, never by decoded text.

    ``id_to_token`` maps the ids of the reflection tokens to their strings; ``decode`` turns runs
    of ordinary ids into text. Reflection-token strings that appear inside decoded ordinary text
    are neutralised first, so they cannot be mistaken for real reflection tokens.
    """
    pieces: list[str] = []
    run: list[int] = []
    for tid in ids:
        if tid in id_to_token:
            if run:
                pieces.append(neutralise(decode(run)))
                run = []
            pieces.append(id_to_token[tid])
        else:
            run.append(tid)
    if run:
        pieces.append(neutralise(decode(run)))
    return parse_generation("".join(pieces))


def answer_text(segments: Iterable[Segment]) -> str:
    """The user-visible answer of parsed segments (reflection tokens and evidence removed)."""
    return " ".join(s.text.replace(_ZWSP, "") for s in segments if s.text).strip()
