"""An agent's retrieval tools: which they are, how their Documents are had, and their text rebuilt.

A tool made by ``langchain_core.tools.create_retriever_tool`` (recognised by its ``RetrieverInput`` argument
schema) joins its Documents into one string by default; :func:`with_documents` gives a twin that returns the
same text with the Documents as the artifact, so that the Documents themselves are graded, never a split of
the text. A ``StructuredTool`` whose function returns Documents gets a twin that does the same. The text of
the Documents kept is rebuilt as the tool writes it (:func:`tool_text`).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.prompts import BasePromptTemplate, PromptTemplate, format_document
from langchain_core.tools import BaseTool, StructuredTool, create_retriever_tool
from langchain_core.tools.retriever import RetrieverInput

#: How a tool that returns Documents of its own function joins them (the retriever tool's default too).
SEPARATOR = "\n\n"
#: Argument names read as the query of a tool call, in this order.
QUERY_ARGS = ("query", "question", "q", "search", "input", "text")


@dataclass(frozen=True)
class RetrieverParts:
    """What a ``create_retriever_tool`` tool is made of."""

    retriever: Any
    document_prompt: BasePromptTemplate
    separator: str


def is_retriever_tool(tool: Any) -> bool:
    """A tool made by ``create_retriever_tool``: its argument schema is ``RetrieverInput``."""
    schema = getattr(tool, "args_schema", None)
    return isinstance(schema, type) and issubclass(schema, RetrieverInput)


def _is_documents(annotation: Any) -> bool:
    if annotation is Document:
        return True
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    return origin in (list, tuple, Sequence, typing.Sequence) and bool(args) and args[0] is Document


def returns_documents(tool: Any) -> bool:
    """A ``StructuredTool`` whose function is annotated to return Documents (``list[Document]``)."""
    fn = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
    if fn is None:
        return False
    try:
        hints = typing.get_type_hints(inspect.unwrap(fn))
    except Exception:  # noqa: BLE001 - a name the annotation cannot resolve: not ours to judge
        return False
    return _is_documents(hints.get("return"))


def retriever_parts(tool: Any) -> RetrieverParts | None:
    """The retriever, document prompt and separator inside a ``create_retriever_tool`` tool (its function's
    closure, or the keywords of the ``functools.partial`` older releases made); None when not found."""
    fn = getattr(tool, "func", None)
    if isinstance(fn, functools.partial):
        found = dict(fn.keywords)
    elif fn is not None and getattr(fn, "__closure__", None):
        found = {name: cell.cell_contents for name, cell in zip(fn.__code__.co_freevars, fn.__closure__)}
    else:
        return None
    retriever = found.get("retriever")
    if retriever is None:
        return None
    prompt = found.get("document_prompt_") or found.get("document_prompt") or PromptTemplate.from_template(
        "{page_content}")
    return RetrieverParts(retriever, prompt, found.get("document_separator", SEPARATOR))


def documents_of(value: Any) -> list[Document] | None:
    """``value`` as a list of Documents (a Document alone, or a non-empty sequence of them); else None."""
    if isinstance(value, Document):
        return [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(d, Document) for d in value):
        return list(value)
    if isinstance(value, (list, tuple)) and not value:
        return []
    return None


def _with_artifact(output: Any) -> tuple[Any, Any]:
    docs = documents_of(output)
    if docs is None:
        return output if isinstance(output, str) else str(output), None
    return SEPARATOR.join(d.page_content for d in docs), docs


def with_documents(tool: BaseTool) -> BaseTool:
    """The tool itself, or a twin that returns ``(text, Documents)``: for a ``create_retriever_tool`` tool
    without an artifact, and for a ``StructuredTool`` whose function returns Documents."""
    if getattr(tool, "response_format", "content") == "content_and_artifact":
        return tool
    if is_retriever_tool(tool):
        parts = retriever_parts(tool)
        if parts is None:
            return tool
        twin = create_retriever_tool(parts.retriever, tool.name, tool.description,
                                     document_prompt=parts.document_prompt, document_separator=parts.separator,
                                     response_format="content_and_artifact")
        twin.tags, twin.metadata = tool.tags, tool.metadata
        return twin
    if isinstance(tool, StructuredTool) and returns_documents(tool):
        update: dict[str, Any] = {"response_format": "content_and_artifact"}
        if tool.func is not None:
            update["func"] = functools.wraps(tool.func)(lambda *a, **k: _with_artifact(tool.func(*a, **k)))
        if tool.coroutine is not None:
            async def coroutine(*a: Any, **k: Any) -> tuple[Any, Any]:
                return _with_artifact(await tool.coroutine(*a, **k))

            update["coroutine"] = functools.wraps(tool.coroutine)(coroutine)
        return tool.model_copy(update=update)
    return tool


def tool_text(tool: Any, docs: Sequence[Document]) -> str:
    """The Documents as the tool writes them: a retriever tool's document prompt and separator, else
    each page's text joined by a blank line."""
    parts = retriever_parts(tool) if is_retriever_tool(tool) else None
    if parts is None:
        return SEPARATOR.join(d.page_content for d in docs)
    return parts.separator.join(format_document(d, parts.document_prompt) for d in docs)


def message_text(message: BaseMessage) -> str:
    """A message's text (the text blocks of a list content, joined)."""
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content
                   if isinstance(b, str) or b.get("type") == "text")


def query_of(call: dict[str, Any], messages: Sequence[BaseMessage]) -> str:
    """What a tool call searches for: its ``query`` (or another query-like) argument, its one string
    argument, else the user's last message."""
    args = call.get("args") or {}
    for name in QUERY_ARGS:
        if isinstance(args.get(name), str) and args[name].strip():
            return args[name]
    strings = [v for v in args.values() if isinstance(v, str) and v.strip()]
    if len(strings) == 1:
        return strings[0]
    return question_of(messages)


def question_of(messages: Sequence[BaseMessage]) -> str:
    """The user's last message: the question an answer is judged against."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message_text(message)
    return ""


def asking_message(call_id: str | None, messages: Sequence[BaseMessage]) -> str:
    """The id of the model's message that made the tool call ``call_id`` (its round), else the call's own id."""
    for message in reversed(messages):
        if isinstance(message, AIMessage) and any(c.get("id") == call_id for c in message.tool_calls):
            return str(message.id or call_id)
    return str(call_id)
