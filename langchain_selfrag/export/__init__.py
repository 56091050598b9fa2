"""Model export: a base model given the reflection tokens, written as GGUF for llama.cpp.

* :mod:`.hf`: load a Hugging Face causal LM (or a GGUF, de-quantised) and add the 15 reflection
  tokens (the ``transformers`` extra);
* :mod:`.gguf`: write a Llama, Mistral or Gemma 3 model as GGUF, reflection tokens as control
  tokens, with :mod:`.layouts` (what differs per architecture), :mod:`.gguf_tokenizer` (its
  tokenizer metadata) and :mod:`.quantize` (llama.cpp's 4-bit types);
* :mod:`.merge`: a PEFT LoRA adapter and its token rows merged onto a GGUF with numpy and gguf
  alone (no torch): how the bundled model is built.

Used by the bundled-model build (:mod:`langchain_selfrag.bundled`) and by the training recipes.
"""

from __future__ import annotations

from ..errors import SelfRAGError

__all__ = ["ExportError"]


class ExportError(SelfRAGError, RuntimeError):
    """The model cannot be exported as asked."""
