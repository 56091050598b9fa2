"""ChatML, Qwen2.5's chat layout: a conversation open at the assistant's turn, and text made safe inside it (pure)."""

from __future__ import annotations


def chatml(system: str, user: str, assistant: str = "") -> str:
    """A ChatML conversation (Qwen2.5's layout) open at the assistant's turn."""
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n{assistant}")


def chat_safe(text: str) -> str:
    """``text`` with chat markers (``<|im_end|>``, ``<|user|>``...) broken by a zero-width space, as
    :func:`~langchain_selfrag.tokens.neutralise` breaks reflection tokens (the Self-RAG prompt's text
    arrives neutralised already): a passage cannot close the user's turn."""
    return text.replace("<|", "<\u200b|")
