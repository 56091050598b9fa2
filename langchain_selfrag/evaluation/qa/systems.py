"""The systems compared by ``selfrag eval``, all answering through one reflection LM.

* ``no_retrieval``: Self-RAG with retrieval switched off (``mode="never"``).
* ``plain_rag``: always retrieve, prompt with the top-1 passage, greedy generation, no critique.
* ``selfrag_adaptive`` / ``selfrag_always``: Self-RAG with the paper's defaults.
* ``ablation_no_issup`` / ``ablation_top1`` / ``ablation_hard_constraints``: the paper's
  inference ablations (Table 3a) on top of adaptive Self-RAG: ``w_sup=0``, ``k=1``, and dropping
  candidates judged ``[No support / Contradictory]``.

Each system turns an :class:`~langchain_selfrag.evaluation.qa.data.Example` plus its candidate
passages into a JSON-ready prediction record (see :func:`prediction_record`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.documents import Document

from ... import tokens as T
from ...passage_budget import EvidenceFitter
from ...prompts import build_instruction, format_prompt, with_evidence
from ...retrieval import passage_heading
from .data import Example
from .metrics import choose_option


@dataclass(frozen=True)
class SystemSpec:
    """A named system: ``kind`` "chain" (SelfRAGChain with ``settings``) or "plain_rag"."""

    name: str
    kind: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""

    @property
    def uses_retrieval(self) -> bool:
        return self.kind == "plain_rag" or self.settings.get("mode") != "never"


SYSTEMS: dict[str, SystemSpec] = {
    s.name: s
    for s in (
        SystemSpec("no_retrieval", "chain", {"mode": "never"}, "Self-RAG LM, retrieval off"),
        SystemSpec("plain_rag", "plain_rag", {}, "always retrieve, top-1 passage, no critique"),
        SystemSpec("selfrag_adaptive", "chain", {"mode": "adaptive"}, "Self-RAG, adaptive retrieval"),
        SystemSpec("selfrag_always", "chain", {"mode": "always"}, "Self-RAG, always retrieve"),
        SystemSpec("ablation_no_issup", "chain", {"mode": "adaptive", "w_sup": 0.0}, "no IsSup in the score"),
        SystemSpec("ablation_top1", "chain", {"mode": "adaptive", "k": 1}, "top-1 passage only"),
        SystemSpec(
            "ablation_hard_constraints", "chain", {"mode": "adaptive", "hard_constraints": True}, "hard constraints"
        ),
    )
}

DEFAULT_SYSTEMS = tuple(SYSTEMS)

#: Generation budgets used in the paper: 100 new tokens for open QA, 50 for closed-set tasks.
OPEN_MAX_NEW_TOKENS = 100
CLOSED_MAX_NEW_TOKENS = 50


def resolve_systems(names: str | Sequence[str] | None) -> list[SystemSpec]:
    """Systems from a comma list or sequence of names (None: all); unknown names raise ValueError."""
    if names is None:
        return list(SYSTEMS.values())
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown system(s): {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    if not names:
        raise ValueError("no systems selected")
    return [SYSTEMS[n] for n in dict.fromkeys(names)]


def chain_input(example: Example, passages: list[Document] | None) -> dict[str, Any]:
    """The SelfRAGChain input dict for an example."""
    return {
        "question": example.question,
        "instruction": example.instruction,
        "options": example.options,
        "passages": passages,
    }


def plain_rag_prompt(example: Example, passage: Document | None, fitter: EvidenceFitter | None = None) -> str:
    """Self-RAG prompt for the example, with the passage appended as evidence under its heading when there is
    one (cut to fit the model's context by ``fitter``), as the Self-RAG graph reads it."""
    prompt = format_prompt(build_instruction(example.question, example.instruction, example.options))
    if passage is None:
        return prompt
    title = passage_heading(passage)
    if fitter is not None:
        return fitter.prompt(prompt, title, passage.page_content)[0]
    return with_evidence(prompt, title, passage.page_content)


def run_plain_rag(lm: Any, example: Example, passages: list[Document], max_new_tokens: int) -> dict[str, Any]:
    """Plain RAG: the top-1 passage as evidence (cut to fit the context), one greedy generation,
    reflection tokens stripped."""
    top = passages[0] if passages else None
    prompt = plain_rag_prompt(example, top, EvidenceFitter(lm, max_new_tokens))
    gen = lm.generate([prompt], max_new_tokens=max_new_tokens)[0]
    return {
        "answer": T.strip_reflection_tokens(gen.text),
        "abstained": False,
        "retrieved": top is not None,
        "retrieve_probability": None,
        "passages": [top] if top is not None else [],
        "citations": [top] if top is not None else [],
        "trace": [],
    }


def chain_settings(spec: SystemSpec, example: Example, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Per-call SelfRAGConfig values for a chain system on one example."""
    settings: dict[str, Any] = {"max_new_tokens": OPEN_MAX_NEW_TOKENS}
    if example.options:
        settings.update(closed_set=True, max_new_tokens=CLOSED_MAX_NEW_TOKENS)
    settings.update(overrides or {})
    settings.update(spec.settings)
    return settings


def prediction_record(
    example: Example, output: Mapping[str, Any], latency_s: float, trace_chars: int = 400
) -> dict[str, Any]:
    """A JSON-ready record of one system output (chain-shaped), with what the metrics need."""
    answer = str(output.get("answer") or "")
    abstained = bool(output.get("abstained"))
    passages = list(output.get("passages") or [])
    citations = list(output.get("citations") or [])
    trace = [_slim_trace(t, trace_chars) for t in output.get("trace") or [] if t.get("kind", "candidate") == "candidate"]
    selected = [t for t in trace if t.get("selected")]
    record: dict[str, Any] = {
        "id": example.id,
        "answer": answer,
        "abstained": abstained,
        "abstain_reason": output.get("abstain_reason"),
        "confidence": output.get("confidence"),
        "retrieved": bool(output.get("retrieved")),
        "retrieve_probability": output.get("retrieve_probability"),
        "latency_s": latency_s,
        "n_passages": len(passages),
        "citations": [_doc_json(d) for d in citations],
        "segments": [[t.get("passage") is not None, t.get("issup")] for t in selected],
        "trace": trace,
    }
    if example.options:
        record["option"] = None if abstained else choose_option(answer, example.options)
    return record


def _slim_trace(entry: Mapping[str, Any], chars: int) -> dict[str, Any]:
    keys = ("passage", "isrel", "issup", "isuse", "seq_prob", "score", "dropped", "selected", "chosen", "round",
            "truncated")
    out = {k: entry.get(k) for k in keys}
    out["text"] = T.strip_reflection_tokens(str(entry.get("text") or ""))[:chars]
    return out


def _doc_json(doc: Any) -> dict[str, str]:
    if isinstance(doc, Document):
        return {"title": str(doc.metadata.get("title", "")), "text": doc.page_content}
    if isinstance(doc, Mapping):
        return {"title": str(doc.get("title", "")), "text": str(doc.get("text", doc.get("page_content", "")))}
    return {"title": "", "text": str(doc)}


SystemRunner = Callable[[Example, list[Document]], dict[str, Any]]


def make_runner(spec: SystemSpec, lm: Any, chain: Any, overrides: Mapping[str, Any] | None = None) -> SystemRunner:
    """A callable (example, candidate passages) -> chain-shaped output for ``spec``."""
    if spec.kind == "plain_rag":
        budget = dict(overrides or {}).get("max_new_tokens")

        def plain(example: Example, passages: list[Document]) -> dict[str, Any]:
            tokens = budget or (CLOSED_MAX_NEW_TOKENS if example.options else OPEN_MAX_NEW_TOKENS)
            return run_plain_rag(lm, example, passages, tokens)

        return plain

    def selfrag(example: Example, passages: list[Document]) -> dict[str, Any]:
        settings = chain_settings(spec, example, overrides)
        k = int(settings.get("k", 5))
        given = None if settings.get("mode") == "never" else passages[:k]
        return chain.invoke(chain_input(example, given), config={"configurable": settings})

    return selfrag
