"""Typed state of the Self-RAG graph: what goes in, what comes out, and the working state between.

Candidates, beams and trace entries are plain dicts (JSON-friendly), so the graph also runs under
a LangGraph checkpointer or server.
"""

from __future__ import annotations

from typing import Any, TypedDict

from langchain_core.documents import Document
from langgraph.managed import RemainingSteps


class InputState(TypedDict, total=False):
    """Input of the graph. ``passages`` given: used instead of the retriever."""

    question: str
    instruction: str | None
    options: list[str] | dict[str, str] | None
    passages: list[Document] | None


class OutputState(TypedDict):
    """The chain output contract (see ``SelfRAGChain``).

    ``claims`` (``{"text", "p", "kept"}``), ``expected_utility`` and ``restraint`` (rho, lambda,
    evidence source, note) come from the ``restrain`` node when ``rho`` is set; otherwise ``[]``,
    None and None.
    """

    answer: str
    abstained: bool
    abstain_reason: str | None
    confidence: float | None
    retrieved: bool
    retrieve_probability: float | None
    passages: list[Document]
    citations: list[Document]
    trace: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    expected_utility: float | None
    restraint: dict[str, Any] | None


class Candidate(TypedDict, total=False):
    """One generated segment candidate with its critique scores (``trace`` holds their public view).

    ``raw`` is the generated text without the Retrieve-group token that ended the segment; that
    token is ``marker`` ([Retrieval], [No Retrieval], [Continue to Use Evidence] or None).
    ``continued``: generated after [Continue to Use Evidence], so ``passage`` is the beam's current
    evidence and ``first_probs`` / ``isrel_token`` are those of the segment that retrieved it.
    ``isrel_token``: the IsRel token the model generated (None if none). ``decoding_guard``: the
    guard was asked for this prompt; ``guarded``: positions where it changed the token choice.
    """

    id: int
    beam: int
    depth: int
    passage: int | None
    prompt: str
    raw: str
    text: str
    n_tokens: int
    cum_logprob: float
    first_probs: dict[str, float]
    issup_probs: dict[str, float] | None
    isuse_probs: dict[str, float] | None
    reflections: list[dict[str, Any]]
    stop_reason: str
    marker: str | None
    continued: bool
    isrel_token: str | None
    decoding_guard: bool
    guarded: int
    round: int
    truncated: bool
    passage_tokens: int | None
    passage_tokens_total: int | None
    isrel: float | None
    issup: float | None
    isuse: float | None
    seq_prob: float
    score: float
    dropped: bool
    selected: bool


class Beam(TypedDict, total=False):
    """A partial answer in long-form beam search (short form uses a single beam of depth one).

    ``last_marker``: the Retrieve-group token that ended the last segment (re-appended to the next
    continuation prompt); ``current_passage``: the evidence passage last used, which a
    [Continue to Use Evidence] segment keeps using.
    """

    id: int
    prefix: str
    segments: list[Candidate]
    score_sum: float
    done: bool
    need_retrieval: bool
    evidence: list[int]
    last_stop: str | None
    last_marker: str | None
    current_passage: int | None


class SelfRAGState(InputState, OutputState, total=False):
    """The working state: the input, the output, and the search in between."""

    prompt: str
    given_passages: list[Document] | None
    beams: list[Beam]
    candidates: list[Candidate]
    depth: int
    retrieval_attempted: bool
    pending_abstain: str | None
    round: int
    rounds: list[dict[str, Any]]
    remaining_steps: RemainingSteps
