"""Reflection LM on llama.cpp (llama-cpp-python): any GGUF, logits read only where needed.

The model runs without ``logits_all``: each decode asks llama.cpp for the logits of the last
position only (or of the few candidate positions when scoring a multi-token continuation), and the
KV cache of the longest common prefix with the previous call is kept, so the K passage prompts of
one question share the evaluation of their instruction prefix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .base import ReflectionLMBase, ReflectionLMError


def _log_softmax_at(logits: np.ndarray, ids: Sequence[int]) -> np.ndarray:
    top = float(logits.max())
    lse = top + float(np.log(np.exp(logits - top).sum()))
    return logits[list(ids)] - lse


def default_threads() -> int:
    """``$SELFRAG_THREADS``, else half the CPU cores (llama.cpp's own default).

    llama.cpp's threads spin while they wait for each other, so using every core slows to a crawl
    when other processes compete for them (measured: about 10x on a shared 2-core machine).
    """
    env = os.environ.get("SELFRAG_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, (os.cpu_count() or 2) // 2)


class LlamaCppReflectionLM(ReflectionLMBase):
    """A GGUF model through llama-cpp-python, greedy decoding in our own loop."""

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        verbose: bool = False,
        **llama_kwargs: Any,
    ) -> None:
        try:
            import llama_cpp
            from llama_cpp import Llama
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ReflectionLMError("llama-cpp-python is not installed: pip install 'langchain-selfrag[llamacpp]'") from exc
        path = Path(model_path)
        if not path.is_file():
            raise ReflectionLMError(f"GGUF file not found: {path}")
        threads = n_threads or default_threads()
        try:
            self.llm = Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_threads=threads,
                n_threads_batch=threads,
                n_gpu_layers=n_gpu_layers,
                logits_all=False,
                verbose=verbose,
                **llama_kwargs,
            )
        except (ValueError, RuntimeError) as exc:
            raise ReflectionLMError(f"llama.cpp could not load {path}: {exc}") from exc
        self._lib = llama_cpp
        self.model_path = path
        self.n_vocab = self.llm.n_vocab()
        self._last_logits: tuple[tuple[int, ...], np.ndarray] | None = None
        self._init_reflection_vocab()
        self._groups = self._group_ids()

    # -- tokenizer -----------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def decode(self, ids: Sequence[int]) -> str:
        return self.llm.detokenize(list(ids), special=True).decode("utf-8", errors="replace")

    def _eos_ids(self) -> Sequence[int]:
        vocab = self.llm._model.vocab
        is_eog = self._lib.llama_vocab_is_eog
        return [i for i in range(self.n_vocab) if is_eog(vocab, i)]

    # -- low-level decoding ---------------------------------------------------------------------
    def _logits_row(self, index: int) -> np.ndarray:
        ptr = self.llm._ctx.get_logits_ith(index)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def _decode(self, tokens: Sequence[int], *, every_position: bool = False) -> list[np.ndarray]:
        """Append ``tokens`` to the context; logits of the last position (or of every one)."""
        llm = self.llm
        if llm.n_tokens + len(tokens) > llm.n_ctx():
            raise ReflectionLMError(
                f"context overflow: {llm.n_tokens + len(tokens)} tokens exceed n_ctx={llm.n_ctx()}; "
                "shorten the passages or load the model with a larger n_ctx"
            )
        llm._ctx.kv_cache_seq_rm(-1, llm.n_tokens, -1)
        rows: list[np.ndarray] = []
        for start in range(0, len(tokens), llm.n_batch):
            chunk = list(tokens[start : start + llm.n_batch])
            llm._batch.set_batch(batch=chunk, n_past=llm.n_tokens, logits_all=every_position)
            llm._ctx.decode(llm._batch)
            llm.input_ids[llm.n_tokens : llm.n_tokens + len(chunk)] = chunk
            llm.n_tokens += len(chunk)
            if every_position:
                rows.extend(self._logits_row(i) for i in range(len(chunk)))
        return rows if every_position else [self._logits_row(-1)]

    def _prompt_logits(self, ids: list[int]) -> np.ndarray:
        """Next-position logits after ``ids``, re-using the KV cache of the common prefix."""
        if not ids:
            raise ValueError("cannot score an empty prompt")
        key = tuple(ids)
        if self._last_logits is not None and self._last_logits[0] == key and self.llm.n_tokens == len(ids):
            return self._last_logits[1]
        llm = self.llm
        cached = llm.input_ids[: llm.n_tokens]
        common = 0
        for a, b in zip(cached, ids):
            if a != b:
                break
            common += 1
        common = min(common, len(ids) - 1)
        llm.n_tokens = common
        logits = self._decode(ids[common:])[0]
        self._last_logits = (key, logits)
        return logits

    # -- protocol primitives --------------------------------------------------------------------
    def _continuation_logprob(self, prompt: list[int], first_logits: np.ndarray, cont: list[int]) -> float:
        """log p(cont | prompt) given the prompt's next-position logits; leaves the KV at the prompt."""
        total = float(_log_softmax_at(first_logits, [cont[0]])[0])
        if len(cont) > 1:
            rows = self._decode(cont[:-1], every_position=True)
            total += sum(float(_log_softmax_at(row, [tid])[0]) for row, tid in zip(rows, cont[1:]))
            self.llm.n_tokens = len(prompt)
        return total

    def _continuation_logprobs(self, prompt_ids: list[list[int]], continuations: list[list[int]]) -> list[float]:
        return [
            self._continuation_logprob(prompt, self._prompt_logits(prompt), cont)
            for prompt, cont in zip(prompt_ids, continuations)
        ]

    def _first_position_probs(self, prompt_ids: list[list[int]], ids: list[int]) -> list[dict[int, float]]:
        return [dict(zip(ids, np.exp(_log_softmax_at(self._prompt_logits(p), ids)).tolist())) for p in prompt_ids]

    def _greedy(self, prompt_ids, max_new_tokens, first_seqs, stop):
        results = []
        for prompt in prompt_ids:
            logits = self._prompt_logits(prompt)
            first = [self._continuation_logprob(prompt, logits, seq) for seq in first_seqs]
            generated: list[int] = []
            per_pos: list[dict[int, float]] = []
            cum = 0.0
            for step in range(max_new_tokens):
                top = float(logits.max())
                lse = top + float(np.log(np.exp(logits - top).sum()))
                tid = int(logits.argmax())
                cum += float(logits[tid]) - lse
                group = self._groups.get(tid)
                per_pos.append(dict(zip(group, np.exp(logits[group] - lse).tolist())) if group else {})
                generated.append(tid)
                if stop(generated) or step == max_new_tokens - 1:
                    break
                logits = self._decode([tid])[0]
            self._last_logits = None
            results.append((generated, cum, per_pos, first))
        return results

    def close(self) -> None:
        """Free the llama.cpp context."""
        self.llm.close()
