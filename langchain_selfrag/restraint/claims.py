"""Claim splitting: an answer into atomic claims ("LLMs can learn self-restraint through iterative self-reflection",
section 3.1 and Table 4's P_splitter).

:func:`split_sentences` and :func:`parse_claims` are pure. :class:`SentenceSplitter` needs no model
(one claim per sentence); :class:`LLMClaimSplitter` asks any LangChain chat model or LLM to break
each sentence into claims and falls back to the sentence itself when the output holds none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from .prompts import splitter_prompt

#: Words whose trailing period does not end a sentence.
ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "no", "mt", "gen", "col",
    "lt", "sgt", "capt", "inc", "ltd", "co", "fig", "approx", "ca", "jan", "feb", "mar", "apr", "jun", "jul",
    "aug", "sep", "sept", "oct", "nov", "dec", "u.s", "u.k"
})

# A sentence end: . ! or ? (then closing quotes / brackets and citation markers such as " [2]").
_END = re.compile(r"[.!?]+[\"')\]]*(?:\s*\[\d+\])*")
_START = re.compile(r"\s+(?=[\"'(\[]?[A-Z0-9])")
_CITATION = re.compile(r"\s*\[\d+\]")
_BULLET = re.compile(r"^\s*(?:[-*+\u2022\u2023\u25e6>]+|\(?\d{1,3}[.):]|\(?[a-zA-Z][.)]|claim\s*\d+\s*[.):])\s+", re.IGNORECASE)
_HEADER = re.compile(r"^\s*(?:#+\s*)?(?:\*\*)?\s*claims?\s*(?:\*\*)?\s*:\s*(?:\*\*)?", re.IGNORECASE)
_NEXT_BLOCK = re.compile(r"^\s*(?:\*\*)?\s*(?:entity|sentence|probability)\s*(?:\*\*)?\s*:", re.IGNORECASE)
_WHO = re.compile(
    r"^\s*(?:who\s+(?:is|was|are|were)|tell\s+me\s+about|write\s+(?:a\s+)?(?:short\s+)?biography\s+of"
    r"|tell\s+me\s+a\s+bio\s+of|what\s+do\s+you\s+know\s+about)"
    r"\s+(?P<entity>.+?)\s*[?.!]*\s*$",
    re.IGNORECASE,
)
# How long the answer should be, after the entity: "... of up to 4 sentences", "in 100 words or less".
_LENGTH = re.compile(
    r"[\s,]+(?:(?:of|in|using)\s+)?(?:(?:up\s+to|at\s+most|about|around|under|no\s+more\s+than|fewer\s+than|less\s+than)\s+)?"
    r"(?:\d+|one|two|three|four|five|six|a\s+few|a\s+single|a\s+short)\s+(?:sentences?|words?|paragraphs?|lines?)"
    r"(?:\s+or\s+(?:less|fewer))?$|[\s,]+(?:briefly|in\s+brief|please)$",
    re.IGNORECASE,
)


def _ends_sentence(text: str, dot: int) -> bool:
    """False when the period at ``dot`` closes an abbreviation, an initial or a decimal number."""
    if text[dot] != ".":
        return True
    word = re.search(r"([A-Za-z.]+)$", text[max(0, dot - 40):dot])  # a word before it: no need to look further
    if word is None:
        return True
    token = word.group(1).lower().strip(".")
    return not (token in ABBREVIATIONS or (len(token) == 1 and word.group(1)[-1].isalpha()))


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, each an exact substring (trailing citation markers stay with theirs).

    Lines are split first; inside a line a sentence ends at ``.``, ``!`` or ``?`` (plus closing
    quotes or brackets and ``[n]`` markers) followed by white space and an upper-case letter, a digit
    or an opening quote. Periods of abbreviations (``Dr.``) and initials (``J. R. R.``) do not end one.
    """
    out: list[str] = []
    for line in (text or "").splitlines():
        start = 0
        for end in _END.finditer(line):
            gap = _START.match(line, end.end())
            if gap is None or not _ends_sentence(line, end.start()):
                continue
            piece = line[start:end.end()].strip()
            if piece:
                out.append(piece)
            start = gap.end()
        rest = line[start:].strip()
        if rest:
            out.append(rest)
    return out


def strip_citations(text: str) -> str:
    """``text`` without ``[n]`` citation markers."""
    return " ".join(_CITATION.sub("", text).split())


def _clean_line(line: str) -> str:
    line = _BULLET.sub("", line)
    line = line.replace("**", "").replace("__", "").strip().strip("`").strip()
    return " ".join(line.split())


def parse_claims(output: str) -> list[str]:
    """Claims from a splitter's output: bullets, numbered items or plain lines; junk -> [].

    A ``Claims:`` header is skipped (text after it on the same line counts); a line that starts a
    new ``Entity:`` / ``Sentence:`` / ``Claim:`` block ends the list (a model continuing its
    pattern); lines without a letter are dropped, as are repeats.
    """
    if not isinstance(output, str):
        return []
    claims: list[str] = []
    for raw in output.splitlines():
        line = _HEADER.sub("", raw, count=1)
        if _NEXT_BLOCK.match(line):
            if claims:
                break
            continue
        line = _clean_line(line)
        if any(ch.isalpha() for ch in line) and line not in claims:
            claims.append(line)
    return claims


def guess_entity(question: str) -> str:
    """The entity a question asks about (``Who is X?`` -> ``X``; a length request after it, as in
    ``Write a biography of X of up to 4 sentences.``, is no part of it), else the question itself."""
    found = _WHO.match(question or "")
    if not found:
        return (question or "").strip()
    entity = found.group("entity").strip()
    while (trimmed := _LENGTH.sub("", entity).strip()) and trimmed != entity:
        entity = trimmed
    return entity


@runtime_checkable
class ClaimSplitter(Protocol):
    """Breaks an answer into atomic claims."""

    def split(self, text: str, *, entity: str | None = None) -> list[str]:
        """The claims of ``text`` (``entity``: who or what it is about, if known)."""
        ...


class SentenceSplitter:
    """One claim per sentence, citation markers removed; needs no model.

    The default splitter of the ``restrain`` node: the kept answer is then the original text of
    its kept sentences.
    """

    keeps_sentences = True

    def split(self, text: str, *, entity: str | None = None) -> list[str]:
        return [c for c in (strip_citations(s) for s in split_sentences(text)) if c]


def model_texts(model: Any, prompts: Sequence[str]) -> list[str]:
    """Text outputs of ``model`` for ``prompts``: a LangChain chat model or LLM (any Runnable,
    through ``batch``), or a plain ``str -> str`` callable. A message's ``content`` is taken; a
    non-string output becomes ``""`` (a parse failure downstream, never a crash)."""
    if not prompts:
        return []
    if hasattr(model, "batch"):
        outputs = model.batch(list(prompts))
    elif hasattr(model, "invoke"):
        outputs = [model.invoke(p) for p in prompts]
    elif callable(model):
        outputs = [model(p) for p in prompts]
    else:
        raise TypeError(f"expected a LangChain chat model, LLM or callable, not {type(model).__name__}")
    return [_as_text(out) for out in outputs]


def _as_text(output: Any) -> str:
    content = getattr(output, "content", output)
    if isinstance(content, list):  # content blocks of a chat message
        content = "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content
                          if isinstance(b, (str, dict)))
    return content if isinstance(content, str) else ""


class LLMClaimSplitter:
    """P_splitter through a LangChain chat model or LLM, one prompt per sentence (one ``batch`` call).

    A sentence whose output yields no claim (:func:`parse_claims` returns []) stays one claim;
    ``fallbacks`` counts those sentences. ``example``: put the paper's A.1.1 demonstration before
    each prompt (helps small models). Pass ``entity`` to :meth:`split`; without it the prompt names
    "the subject of the text". ``prompt(entity, sentence, example=...)`` replaces the template.
    """

    keeps_sentences = False

    def __init__(self, model: Any, *, example: bool = False,
                 prompt: Callable[..., str] | None = None) -> None:
        self.model = model
        self.example = example
        self.prompt = prompt or splitter_prompt
        self.fallbacks = 0

    def split(self, text: str, *, entity: str | None = None) -> list[str]:
        sentences = SentenceSplitter().split(text)
        if not sentences:
            return []
        name = entity or "the subject of the text"
        outputs = model_texts(self.model, [self.prompt(name, s, example=self.example) for s in sentences])
        claims: list[str] = []
        for sentence, output in zip(sentences, outputs):
            found = parse_claims(output)
            if not found:
                self.fallbacks += 1
                found = [sentence]
            claims.extend(c for c in found if c not in claims)
        return claims
