"""A scripted tool-calling chat model: the agent's model in tests of ``create_agent`` agents."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage


class ScriptedModel(GenericFakeChatModel):
    """Its messages in turn, whatever tools it is given."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def tool_call(name: str, args: dict[str, Any], call_id: str = "call-1") -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def calls_then_answers(name: str, args: dict[str, Any], answer: str) -> ScriptedModel:
    """A model that calls the tool ``name`` once, then answers ``answer``."""
    return ScriptedModel(messages=iter([tool_call(name, args), AIMessage(answer)]))
