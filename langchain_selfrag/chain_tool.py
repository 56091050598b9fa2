"""The chain as a tool an agent calls with just a name and a description (``SelfRAGChain.as_tool``).

The tool takes one typed argument, ``question``; the model reads text (the answer with its sources, or the
abstention and its reason) and the chain's whole output rides as the tool's artifact
(``response_format="content_and_artifact"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import Document
from langchain_core.tools import StructuredTool
from pydantic import BaseModel, Field

from .retrieval import document_title

#: The description of a tool made without one.
DEFAULT_DESCRIPTION = ("Answer a question from the documents with Self-RAG: the answer with its sources, or an "
                       "abstention with its reason when the documents do not support an answer.")


class QuestionInput(BaseModel):
    """The tool's one argument."""

    question: str = Field(description="the question to answer from the documents, in full")


def source_of(doc: Document) -> str:
    """How a passage is named to a model: its ``source``, else its title."""
    return str(doc.metadata.get("source") or document_title(doc) or "")


def with_reason(answer: str, reason: str | None) -> str:
    """An abstention's text with its reason."""
    return f"{answer} Reason: {reason}." if reason else answer


def answer_text(out: Mapping[str, Any]) -> str:
    """What the agent's model reads of a chain output: the answer and its numbered sources, or the
    abstention and its reason."""
    if out.get("abstained"):
        return with_reason(out["answer"], out.get("abstain_reason"))
    sources = list(dict.fromkeys(source_of(d) for d in out.get("citations") or []))
    listed = "".join(f"\n[{i}] {s}" for i, s in enumerate(sources, 1))
    return f"{out['answer']}\n\nSources:{listed}" if listed else out["answer"]


def chain_tool(chain: Any, name: str, description: str | None = None) -> StructuredTool:
    """A tool that asks ``chain`` the ``question`` it is called with (sync and async)."""

    def ask(question: str, callbacks: Callbacks = None) -> tuple[str, dict[str, Any]]:
        out = chain.invoke(question, config={"callbacks": callbacks})
        return answer_text(out), out

    async def aask(question: str, callbacks: Callbacks = None) -> tuple[str, dict[str, Any]]:
        out = await chain.ainvoke(question, config={"callbacks": callbacks})
        return answer_text(out), out

    return StructuredTool(name=name, description=description or DEFAULT_DESCRIPTION, func=ask, coroutine=aask,
                          args_schema=QuestionInput, response_format="content_and_artifact")
