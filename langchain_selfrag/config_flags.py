"""Command-line flags generated from :class:`~langchain_selfrag.config.SelfRAGConfig`'s fields.

Each field gives one flag, named after it (``max_new_tokens`` → ``--max-new-tokens``) unless its
metadata names another, with the field's ``help`` and default as its help. A flag left out parses
to ``None``, so the config's default (or a preset such as :meth:`SelfRAGConfig.paper`) applies. A
boolean that defaults to False is switched on by its flag; one that defaults to True is switched
off by ``--no-NAME`` (or the flag its metadata names).
"""

from __future__ import annotations

import argparse
import typing
from collections.abc import Iterable
from dataclasses import MISSING, Field, fields
from typing import Any

from .config import SelfRAGConfig


def _value_type(annotation: Any) -> tuple[type | None, tuple[Any, ...] | None]:
    """The argparse ``type`` and ``choices`` of a field annotation (``X | None`` reads as ``X``)."""
    if typing.get_origin(annotation) is typing.Literal:
        return None, typing.get_args(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if args:
        return _value_type(args[0])
    return (annotation if annotation in (int, float, str) else None), None


def _show(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def config_fields(names: Iterable[str] | None = None) -> list[Field]:
    """SelfRAGConfig's fields, all or those in ``names`` (in the config's order)."""
    wanted = None if names is None else set(names)
    chosen = [f for f in fields(SelfRAGConfig) if wanted is None or f.name in wanted]
    missing = (wanted or set()) - {f.name for f in chosen}
    if missing:
        raise ValueError(f"not SelfRAGConfig fields: {', '.join(sorted(missing))}")
    return chosen


def add_config_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                     names: Iterable[str] | None = None) -> None:
    """Add one flag per SelfRAGConfig field (all, or those in ``names``) to ``parser``."""
    hints = typing.get_type_hints(SelfRAGConfig)
    for f in config_fields(names):
        default = f.default if f.default is not MISSING else None
        help_text = f.metadata.get("help", "")
        dashed = f.name.replace("_", "-")
        if hints[f.name] is bool:
            if default:
                flag = f.metadata.get("flag", f"--no-{dashed}")
                parser.add_argument(flag, dest=f.name, action="store_false", default=None,
                                    help=f"turn {f.name} off (default on): {help_text}")
            else:
                flag = f.metadata.get("flag", f"--{dashed}")
                parser.add_argument(flag, dest=f.name, action="store_true", default=None,
                                    help=f"{help_text} (default off)")
            continue
        value_type, choices = _value_type(hints[f.name])
        parser.add_argument(f.metadata.get("flag", f"--{dashed}"), dest=f.name, type=value_type, choices=choices,
                            default=None, metavar=f.metadata.get("metavar"),
                            help=f"{help_text} (default {_show(default)})")


def config_settings(args: argparse.Namespace, names: Iterable[str] | None = None) -> dict[str, Any]:
    """The SelfRAGConfig settings given on the command line (flags left out are not in it)."""
    return {f.name: getattr(args, f.name) for f in config_fields(names) if getattr(args, f.name, None) is not None}


def add_chat_model_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--chat-model provider:model`` and ``--base-url URL``: Self-RAG over any LangChain chat model."""
    parser.add_argument("--chat-model", metavar="PROVIDER:MODEL",
                        help="instead of a Self-RAG model, a LangChain chat model by init_chat_model's name "
                             "(openai:gpt-4o-mini, ollama:qwen2.5-coder:1.5b; needs the openai extra) or a local chat "
                             "GGUF (a .gguf file or a base's name: qwen2.5-coder-1.5b-instruct), asked one question per "
                             "reflection group and read from its token probabilities (ChatReflectionLM, docs/chat-models.md)")
    parser.add_argument("--base-url", metavar="URL",
                        help="with --chat-model: the server it talks to (an OpenAI-compatible /v1 of vLLM, "
                             "llama.cpp's server or Ollama)")


#: The flags of the three-model opt-in (a separate reader writing the answers, a relevance judge),
#: removed in 0.1, and what replaced them.
REMOVED_FLAGS = {
    "--reader": "--reader was removed in langchain-selfrag 0.1 (ReaderCriticLM is retired): the model writes its "
                "own answers; a separate writer is ChatReflectionLM(model, writer=...) in Python (docs/chat-models.md)",
    "--judge": "--judge was removed in langchain-selfrag 0.1 (RelevanceJudge is retired): the model asks the IsRel "
               "question itself; for a chat model's judgement use --chat-model (docs/chat-models.md)",
}


class _RemovedFlag(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(REMOVED_FLAGS[self.option_strings[0]])


def add_removed_flags(parser: argparse.ArgumentParser) -> None:
    """``--reader`` and ``--judge``, hidden: given, they stop the command with one error saying what replaced them."""
    for flag in REMOVED_FLAGS:
        parser.add_argument(flag, action=_RemovedFlag, help=argparse.SUPPRESS)
