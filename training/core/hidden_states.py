""":class:`LlamaCppHiddenStates`: a GGUF model's final hidden state at a prompt's last position.

That vector (after the output norm, what the output matrix multiplies) is what a linear head on a
frozen model reads: the features :mod:`training.relevance_head` fits its
:class:`~training.core.relevance_head.RelevanceHead` on and :mod:`training.question_head` folds into
reflection-token rows. llama.cpp computes it in embedding mode with last-token pooling, one prompt per decode.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from langchain_selfrag.lm.llamacpp.native import NativeCalls, NativeHandles, apply_options, default_threads, open_binding
from langchain_selfrag.lm.protocol import ReflectionLMError


class LlamaCppHiddenStates(NativeCalls):
    """Final hidden states of prompts at their last token (``n_embd`` floats each), thread-safe.

    Other keyword options set fields of llama.cpp's ``llama_model_params`` or ``llama_context_params``
    by name, as :class:`~langchain_selfrag.lm.llamacpp.model.LlamaCppReflectionLM` takes them."""

    def __init__(self, model_path: str | os.PathLike, *, n_ctx: int = 2048, n_threads: int | None = None,
                 verbose: bool = False, **llama_kwargs: Any) -> None:
        lib, path = open_binding(model_path, verbose)
        threads = n_threads or default_threads()
        model_params = lib.llama_model_default_params()
        ctx_params = lib.llama_context_default_params()
        ctx_params.n_ctx = ctx_params.n_batch = ctx_params.n_ubatch = n_ctx  # one decode per prompt
        ctx_params.n_threads = ctx_params.n_threads_batch = threads
        ctx_params.n_seq_max = 1
        ctx_params.embeddings = True
        ctx_params.pooling_type = lib.LLAMA_POOLING_TYPE_LAST
        ctx_params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        ctx_params.no_perf = True
        apply_options(model_params, ctx_params, llama_kwargs)
        self._handles = native = NativeHandles(lib, path, model_params, ctx_params)
        self._finalizer = weakref.finalize(self, native.close)
        self._lib = lib
        self._lock = threading.Lock()
        self.model_path = path
        self.n_ctx = n_ctx
        self.n_embd = int(lib.llama_model_n_embd(native.model))

    @property
    def context_length(self) -> int:
        return self.n_ctx

    def close(self) -> None:
        """Free the llama.cpp model and context."""
        self._finalizer()

    def last_hidden(self, prompts: Sequence[str]) -> np.ndarray:
        """One row per prompt: its final hidden state at the last token (float32, ``n_embd`` wide)."""
        out = np.zeros((len(prompts), self.n_embd), dtype=np.float32)
        with self._lock:
            for i, prompt in enumerate(prompts):
                out[i] = self._one(self.tokenize(prompt, add_bos=True))
        return out

    def _one(self, ids: list[int]) -> np.ndarray:
        if not ids:
            raise ValueError("cannot read the hidden state of an empty prompt")
        if len(ids) > self.n_ctx:
            raise ReflectionLMError(f"context overflow: {len(ids)} tokens exceed n_ctx={self.n_ctx}; "
                                    "shorten the passages or load the model with a larger n_ctx")
        lib, native = self._lib, self._native
        lib.llama_memory_clear(native.memory, True)
        batch = native.batch
        batch.n_tokens = len(ids)
        for j, tok in enumerate(ids):
            batch.token[j] = tok
            batch.pos[j] = j
            batch.n_seq_id[j] = 1
            batch.seq_id[j][0] = 0
            batch.logits[j] = True
        code = lib.llama_decode(native.ctx, batch)
        if code != 0:
            raise ReflectionLMError(f"llama_decode failed with code {code}")
        ptr = lib.llama_get_embeddings_seq(native.ctx, 0)
        if not ptr:
            raise ReflectionLMError("llama.cpp returned no hidden state (is this a generative GGUF?)")
        return np.ctypeslib.as_array(ptr, shape=(self.n_embd,)).copy()
