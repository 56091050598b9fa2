"""A teacher chat model as critic labeller, with tolerant parsing of its answers.

Any LangChain chat model works (``ChatOpenAI`` against vLLM or a hosted API, ``ChatAnthropic``,
a fake model in tests). The teacher sees the aspect instruction and the case and is asked to
start its answer with one token; :func:`parse_label` accepts the token and the usual ways a chat
model paraphrases it. :func:`load_chat_model` makes the teacher from a ``module:Class`` name.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence

from langchain_selfrag import tokens as T

from .labels import INSTRUCTIONS, LABELS, Case, case_input

_SYSTEM = (
    "You are a careful annotator of retrieval-augmented answers. Follow the task definition exactly. "
    "Start your reply with exactly one of the allowed labels, including the square brackets, then give a "
    "one-sentence explanation."
)

# Loose spellings a chat model uses instead of the exact token, per aspect. Checked in order.
_ALIASES: dict[str, list[tuple[re.Pattern[str], str]]] = {
    "retrieve": [
        (re.compile(r"\bno[ _-]?retriev", re.I), T.NO_RETRIEVAL),
        (re.compile(r"^\W*no\b", re.I), T.NO_RETRIEVAL),
        (re.compile(r"\bretriev", re.I), T.RETRIEVAL),
        (re.compile(r"^\W*yes\b", re.I), T.RETRIEVAL),
    ],
    "retrieve_evidence": [
        (re.compile(r"\bcontinue", re.I), T.CONTINUE),
        (re.compile(r"\bno[ _-]?retriev", re.I), T.NO_RETRIEVAL),
        (re.compile(r"\bretriev", re.I), T.RETRIEVAL),
    ],
    "isrel": [
        (re.compile(r"\b(irrelevant|not relevant)\b", re.I), T.IRRELEVANT),
        (re.compile(r"\brelevant\b", re.I), T.RELEVANT),
    ],
    "issup": [
        (re.compile(r"\b(no support|not supported|unsupported|contradict\w*)\b", re.I), T.NO_SUPPORT),
        (re.compile(r"\bpartial(ly)?\b", re.I), T.PARTIALLY_SUPPORTED),
        (re.compile(r"\bfull(y)?\b", re.I), T.FULLY_SUPPORTED),
    ],
    "isuse": [(re.compile(r"(?:utility|score|rating)?\s*[:=]?\s*\[?\b([1-5])\b", re.I), "")],
}


def parse_label(aspect: str, reply: str) -> str | None:
    """The label a teacher reply gives for ``aspect``, or None when it gives none.

    The exact token that occurs first wins; otherwise the first loose spelling found in the first
    line (for example ``Relevant``, ``Yes``, ``Utility: 4``, ``Partially supported``).
    """
    if aspect not in LABELS:
        raise ValueError(f"unknown aspect {aspect!r}")
    allowed = LABELS[aspect]
    exact = [(reply.find(tok), tok) for tok in allowed if tok in reply]
    if exact:
        return min(exact)[1]
    first = next((line for line in reply.strip().splitlines() if line.strip()), "")
    for pattern, label in _ALIASES[aspect]:
        match = pattern.search(first)
        if match:
            return T.UTILITY[int(match.group(1)) - 1] if aspect == "isuse" else label
    return None


def teacher_messages(case: Case) -> list[tuple[str, str]]:
    """System + user messages for one case."""
    allowed = ", ".join(LABELS[case.aspect])
    user = f"{INSTRUCTIONS[case.aspect]}\nAllowed labels: {allowed}\n\n{case_input(case)}\n\nLabel:"
    return [("system", _SYSTEM), ("user", user)]


class TeacherLabeller:
    """Label cases with a LangChain chat model (batched with ``.batch``, ``max_concurrency`` parallel)."""

    def __init__(self, chat_model, *, max_concurrency: int = 4, retries: int = 1) -> None:
        self.chat_model = chat_model
        self.max_concurrency = max_concurrency
        self.retries = retries
        self.unparsed: list[tuple[Case, str]] = []

    def label(self, cases: Sequence[Case]) -> list[str | None]:
        labels: list[str | None] = [None] * len(cases)
        todo = list(range(len(cases)))
        for _attempt in range(self.retries + 1):
            if not todo:
                break
            replies = self.chat_model.batch(
                [teacher_messages(cases[i]) for i in todo],
                config={"max_concurrency": self.max_concurrency},
                return_exceptions=True,
            )
            still = []
            for i, reply in zip(todo, replies):
                text = reply if isinstance(reply, str) else getattr(reply, "content", "")
                if isinstance(reply, Exception) or not isinstance(text, str):
                    still.append(i)
                    continue
                labels[i] = parse_label(cases[i].aspect, text)
                if labels[i] is None:
                    self.unparsed.append((cases[i], text))
                    still.append(i)
            todo = still
        return labels


def load_chat_model(spec: str, kwargs: dict):
    """Instantiate ``module:Class`` with ``kwargs`` (any LangChain chat model class)."""
    module_name, _, cls_name = spec.partition(":")
    if not module_name or not cls_name:
        raise ValueError(f"--teacher must look like module:Class, got {spec!r}")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {spec}: {exc}") from exc
    return cls(**kwargs)
