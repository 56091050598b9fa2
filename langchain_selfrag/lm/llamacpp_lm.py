"""Reflection LM on llama.cpp (llama-cpp-python): any GGUF, logits read only where needed.

The model runs without ``logits_all``: each decode asks llama.cpp for the logits of the last
position only, plus those of candidate continuations when a reflection token is spelled in several
tokens (a base vocabulary). Candidates ride on sequences of their own in the same ``llama_decode``
call as the prompt, sharing its KV cells. The KV cache of the longest common prefix with the
previous call is kept, so the K passage prompts of one question share their instruction prefix.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .base import ReflectionLMBase, ReflectionLMError


def _log_softmax_at(logits: np.ndarray, ids: Sequence[int]) -> np.ndarray:
    top = float(logits.max())
    lse = top + float(np.log(np.exp(logits - top).sum()))
    return logits[list(ids)] - lse


def _allowed_argmax(logits: np.ndarray, banned: Collection[int]) -> int:
    """The argmax over the ids not in ``banned`` (``logits`` is left as it is)."""
    masked = logits.copy()
    masked[list(banned)] = -np.inf
    return int(masked.argmax())


def continuation_tree(tails: Sequence[Sequence[int]]) -> tuple[dict[tuple[int, ...], tuple[int, ...]], int]:
    """The prefix tree of candidate tails, for decoding them together on KV sequences 1..n.

    Returns every distinct non-empty prefix (a tree node), in an order where each branch's nodes
    come by increasing depth, mapped to the sequence ids of the branches through it, and the
    number of branches n. A branch is a tail that is no prefix of another, so ``[Utility:1]`` ...
    ``[Utility:5]`` (tails ``[``, ``Ut``, ``ility``, ``:``) share one branch of four nodes.
    """
    unique = list(dict.fromkeys(tuple(t) for t in tails if t))
    branches = [t for t in unique if not any(len(o) > len(t) and o[: len(t)] == t for o in unique)]
    nodes: dict[tuple[int, ...], tuple[int, ...]] = {}
    for branch in branches:
        for depth in range(1, len(branch) + 1):
            prefix = branch[:depth]
            if prefix not in nodes:
                nodes[prefix] = tuple(i + 1 for i, b in enumerate(branches) if b[:depth] == prefix)
    return nodes, len(branches)


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

    generates_in_batches = False

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        n_seq_max: int = 8,
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
        # Free the llama.cpp objects at interpreter exit while llama_cpp's module globals still exist;
        # left to Llama.__del__ during teardown they can meet half-destroyed modules.
        self._finalizer = weakref.finalize(self, self.llm.close)
        self._lib = llama_cpp
        self.model_path = path
        self.n_vocab = self.llm.n_vocab()
        self._last_logits: tuple[tuple[int, ...], np.ndarray] | None = None
        self._n_seq = 1
        if n_seq_max > 1:
            self._use_multi_sequence_context(n_seq_max)
        self._init_reflection_vocab()
        self._groups = self._group_ids()

    @property
    def context_length(self) -> int:
        """The ``n_ctx`` the model was loaded with (not its training length)."""
        return int(self.llm.n_ctx())

    # -- tokenizer -----------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def decode(self, ids: Sequence[int]) -> str:
        return self.llm.detokenize(list(ids), special=True).decode("utf-8", errors="replace")

    def _eos_ids(self) -> Sequence[int]:
        vocab = self.llm._model.vocab
        is_eog = self._lib.llama_vocab_is_eog
        return [i for i in range(self.n_vocab) if is_eog(vocab, i)]

    def _special_ids(self) -> Sequence[int]:
        vocab = self.llm._model.vocab
        is_control = self._lib.llama_vocab_is_control
        return [i for i in range(self.n_vocab) if is_control(vocab, i)]

    # -- low-level decoding ---------------------------------------------------------------------
    def _use_multi_sequence_context(self, n_seq: int) -> None:
        """Swap in a context with ``n_seq`` sequences over one unified KV cache.

        llama-cpp-python's ``Llama`` gives text generation a single sequence; scoring candidate
        continuations (``[Relevant]`` vs ``[Irrelevant]`` spelled in several base-vocabulary tokens)
        on sequences of their own lets them share the prompt's KV cells and ride in the same
        ``llama_decode`` call as the prompt, instead of one call each.
        """
        from llama_cpp import _internals

        llm = self.llm
        params = type(llm.context_params).from_buffer_copy(llm.context_params)
        params.n_seq_max = max(1, min(n_seq, self._lib.llama_max_parallel_sequences()))
        params.kv_unified = True
        try:
            ctx = _internals.LlamaContext(model=llm._model, params=params, verbose=llm.verbose)
        except ValueError:  # pragma: no cover - out of memory for a second context: keep one sequence
            self._n_seq = 1
            return
        old, llm._ctx, llm.context_params = llm._ctx, ctx, params
        llm._stack.enter_context(contextlib.closing(ctx))
        old.close()
        self._n_seq = params.n_seq_max

    def _logits_row(self, index: int) -> np.ndarray:
        ptr = self.llm._ctx.get_logits_ith(index)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def _check_room(self, n_new: int) -> None:
        llm = self.llm
        if llm.n_tokens + n_new > llm.n_ctx():
            raise ReflectionLMError(
                f"context overflow: {llm.n_tokens + n_new} tokens exceed n_ctx={llm.n_ctx()}; "
                "shorten the passages or load the model with a larger n_ctx"
            )

    def _decode(self, tokens: Sequence[int]) -> np.ndarray:
        """Append ``tokens`` to sequence 0; the logits of the last position."""
        llm = self.llm
        self._check_room(len(tokens))
        llm._ctx.kv_cache_seq_rm(0, llm.n_tokens, -1)
        for start in range(0, len(tokens), llm.n_batch):
            chunk = list(tokens[start : start + llm.n_batch])
            llm._batch.set_batch(batch=chunk, n_past=llm.n_tokens, logits_all=False)
            llm._ctx.decode(llm._batch)
            llm.input_ids[llm.n_tokens : llm.n_tokens + len(chunk)] = chunk
            llm.n_tokens += len(chunk)
        return self._logits_row(-1)

    def _decode_entries(self, entries: list[tuple[int, int, tuple[int, ...], bool]]) -> dict[int, np.ndarray]:
        """Decode (token, position, sequence ids, wants logits) entries in batches of ``n_batch``.

        Returns the logits of the entries that asked for them, by entry index.
        """
        llm = self.llm
        batch = llm._batch.batch
        rows: dict[int, np.ndarray] = {}
        for start in range(0, len(entries), llm.n_batch):
            chunk = entries[start : start + llm.n_batch]
            batch.n_tokens = len(chunk)
            for j, (token, pos, seqs, wants) in enumerate(chunk):
                batch.token[j] = token
                batch.pos[j] = pos
                batch.n_seq_id[j] = len(seqs)
                for k, seq in enumerate(seqs):
                    batch.seq_id[j][k] = seq
                batch.logits[j] = wants
            llm._ctx.decode(llm._batch)
            rows.update((start + j, self._logits_row(j)) for j, e in enumerate(chunk) if e[3])
        return rows

    def _score_prompt(self, ids: list[int], continuations: Sequence[list[int]] = ()) -> tuple[np.ndarray, list[float]]:
        """Next-position logits after ``ids`` and log p(continuation | ids) for each continuation.

        The KV cache of the longest common prefix with the previous call is kept. The uncached tail
        of the prompt goes on sequence 0 and the continuations on sequences of their own, all in
        one ``llama_decode`` call: the continuations' tokens form a prefix tree (see
        :func:`continuation_tree`), each of its nodes decoded once for every continuation through
        it. The extra sequences are dropped afterwards, so the cache ends holding ``ids`` only.
        """
        if not ids:
            raise ValueError("cannot score an empty prompt")
        key = tuple(ids)
        cached_logits = self._last_logits[1] if self._last_logits and self._last_logits[0] == key else None
        if cached_logits is not None and self.llm.n_tokens == len(ids) and not any(len(c) > 1 for c in continuations):
            return cached_logits, [float(_log_softmax_at(cached_logits, [c[0]])[0]) for c in continuations]
        nodes, n_seqs = continuation_tree([c[:-1] for c in continuations])
        if n_seqs and self._n_seq < 2:
            return self._score_prompt_one_sequence(ids, continuations)
        if n_seqs > self._n_seq - 1:  # more branches than sequences: in two halves
            half = len(continuations) // 2
            logits, out = self._score_prompt(ids, continuations[:half])
            return logits, out + self._score_prompt(ids, continuations[half:])[1]
        llm = self.llm
        common = 0
        for a, b in zip(llm.input_ids[: llm.n_tokens], ids):
            if a != b:
                break
            common += 1
        common = min(common, len(ids) - 1)
        seqs = list(range(1, n_seqs + 1))
        llm.n_tokens = common
        self._check_room(len(ids) - common + max((len(p) for p in nodes), default=0))
        ctx = llm._ctx
        ctx.kv_cache_seq_rm(0, common, -1)
        for seq in seqs:
            ctx.kv_cache_seq_rm(seq, -1, -1)
            if common:
                ctx.kv_cache_seq_cp(0, seq, 0, common)
        entries = [(tok, pos, (0, *seqs), pos == len(ids) - 1) for pos, tok in enumerate(ids[common:], start=common)]
        last = len(entries) - 1
        row_of: dict[tuple[int, ...], int] = {}
        for prefix, node_seqs in nodes.items():
            row_of[prefix] = len(entries)
            entries.append((prefix[-1], len(ids) + len(prefix) - 1, node_seqs, True))
        try:
            rows = self._decode_entries(entries)
        finally:
            for seq in seqs:
                ctx.kv_cache_seq_rm(seq, -1, -1)
        llm.input_ids[common : len(ids)] = ids[common:]
        llm.n_tokens = len(ids)
        logits = rows[last]
        self._last_logits = (key, logits)
        out = []
        for cont in continuations:
            total = float(_log_softmax_at(logits, [cont[0]])[0])
            for j in range(1, len(cont)):
                total += float(_log_softmax_at(rows[row_of[tuple(cont[:j])]], [cont[j]])[0])
            out.append(total)
        return logits, out

    def _score_prompt_one_sequence(self, ids: list[int], continuations: Sequence[list[int]]) -> tuple[np.ndarray, list[float]]:
        """:meth:`_score_prompt` on a single-sequence context: one decode per continuation."""
        logits, _ = self._score_prompt(ids)
        out = []
        for cont in continuations:
            total = float(_log_softmax_at(logits, [cont[0]])[0])
            if len(cont) > 1:
                self._check_room(len(cont) - 1)
                try:
                    rows = self._decode_entries([(tok, len(ids) + j, (0,), True) for j, tok in enumerate(cont[:-1])])
                finally:
                    self.llm._ctx.kv_cache_seq_rm(0, len(ids), -1)
                total += sum(float(_log_softmax_at(rows[j], [tid])[0]) for j, tid in enumerate(cont[1:]))
            out.append(total)
        return logits, out

    # -- protocol primitives --------------------------------------------------------------------
    def _continuation_logprobs(self, prompt_ids: list[list[int]], continuations: list[list[int]]) -> list[float]:
        out: list[float] = []
        i = 0
        while i < len(prompt_ids):  # consecutive pairs with the same prompt share one decode
            j = i + 1
            while j < len(prompt_ids) and prompt_ids[j] == prompt_ids[i]:
                j += 1
            out += self._score_prompt(prompt_ids[i], continuations[i:j])[1]
            i = j
        return out

    def _first_position_probs(self, prompt_ids: list[list[int]], ids: list[int]) -> list[dict[int, float]]:
        return [dict(zip(ids, np.exp(_log_softmax_at(self._score_prompt(p)[0], ids)).tolist())) for p in prompt_ids]

    def _greedy(self, prompt_ids, max_new_tokens, first_seqs, stop, bans=None):
        results = []
        for i, prompt in enumerate(prompt_ids):
            banned = bans[i] if bans else None
            logits, first = self._score_prompt(prompt, first_seqs)
            generated: list[int] = []
            per_pos: list[dict[int, float]] = []
            cum = 0.0
            guarded = 0
            for step in range(max_new_tokens):
                top = float(logits.max())
                lse = top + float(np.log(np.exp(logits - top).sum()))
                tid = int(logits.argmax())
                ban = banned(generated) if banned else ()
                if tid in ban:
                    tid, guarded = _allowed_argmax(logits, ban), guarded + 1
                cum += float(logits[tid]) - lse
                group = self._groups.get(tid)
                per_pos.append(dict(zip(group, np.exp(logits[group] - lse).tolist())) if group else {})
                generated.append(tid)
                if stop(generated) or step == max_new_tokens - 1:
                    break
                logits = self._decode([tid])
            self._last_logits = None
            results.append((generated, cum, per_pos, first, guarded))
        return results

    def close(self) -> None:
        """Free the llama.cpp model and contexts (also done once at interpreter exit)."""
        self._finalizer()
