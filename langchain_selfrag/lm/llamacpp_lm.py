"""Reflection LM on llama.cpp (llama-cpp-python's C API): any GGUF, logits read only where needed.

The model and its context are our own, made and driven through llama.cpp's public C API as
llama-cpp-python binds it (``llama_model_load_from_file``, ``llama_init_from_model``,
``llama_batch_*``, ``llama_decode``, ``llama_memory_*``). Each decode asks for the logits of the
positions that matter only: the last prompt position, one per live sequence while generating, and
those of candidate continuations when a reflection token is spelled in several tokens (a base
vocabulary). The KV cache is unified over several sequences, so tokens shared by sequences are
stored once.

``generate`` decodes its K prompts together: their common prefix is decoded once for every
sequence, each prompt's own tail on a sequence of its own, and then one ``llama_decode`` per step
for all live sequences. ``candidate_probs`` lays out its prompts the same way and stops after
that prefill. llama.cpp quantises activations to 8 bits for quantised weights, so its
logits move slightly with the batch layout: greedy tokens equal one-at-a-time decoding except
where two top logits are within that noise, and probabilities differ by a few hundredths (see
``tests/test_lm_llamacpp.py``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import weakref
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .base import BanHook, ReflectionLMBase, ReflectionLMError, StopHook, TokenSampler, stop_hooks

#: The llama-cpp-python releases this module is tested with, [from, below): the C API it binds
#: (llama_memory_*, llama_batch_*, the context-parameter fields) changes between llama.cpp releases.
TESTED_BINDING = ((0, 3, 36), (0, 4, 0))

Entry = tuple[int, int, tuple[int, ...], bool]  # token, position, sequence ids, wants logits


def check_binding_version(version: str) -> None:
    """Raise :class:`ReflectionLMError` unless ``version`` is in :data:`TESTED_BINDING`."""
    parts: list[int] = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    low, high = TESTED_BINDING
    if len(parts) < 3 or not low <= tuple(parts) < high:
        want = f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
        raise ReflectionLMError(
            f"llama-cpp-python {version} is untested with this backend; install llama-cpp-python{want}"
        )


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def plan_groups(prompts: Sequence[Sequence[int]], extra: int, n_ctx: int, width: int) -> list[list[int]]:
    """Split prompts ``0..n-1`` into runs of consecutive prompts decoded together.

    A run holds at most ``width`` prompts and fits ``n_ctx`` KV cells at its worst: the prefix
    common to the run once, each prompt's own tail, and ``extra`` cells a prompt (candidate nodes
    plus generated tokens). A prompt that does not fit alone forms a run of its own (it raises a
    context overflow when decoded).
    """
    runs: list[list[int]] = []
    for i, ids in enumerate(prompts):
        run = runs[-1] if runs else None
        if run is not None and len(run) < width:
            members = [*run, i]
            shared = min(common_prefix(prompts[run[0]], prompts[j]) for j in members)
            if shared + sum(len(prompts[j]) - shared + extra for j in members) <= n_ctx:
                run.append(i)
                continue
        runs.append([i])
    return runs


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


def _set_fields(params: ctypes.Structure, options: dict[str, Any]) -> None:
    """Set the fields of a llama.cpp parameter struct named in ``options`` (removed from it)."""
    names = {name for name, _ in type(params)._fields_}
    for key in [k for k in options if k in names]:
        setattr(params, key, options.pop(key))


class _Native:
    """The llama.cpp objects one LM owns: model, context and batch, freed once by :meth:`close`.

    Kept apart from the LM so that ``weakref.finalize`` can free them at interpreter exit (while
    the binding's module globals still exist) without keeping the LM alive.
    """

    def __init__(self, lib: Any, path: Path, model_params: Any, context_params: Any) -> None:
        self.lib = lib
        self.model = lib.llama_model_load_from_file(str(path).encode("utf-8"), model_params)
        self.ctx = self.batch = None
        if not self.model:
            raise ReflectionLMError(f"llama.cpp could not load {path}")
        self.ctx = lib.llama_init_from_model(self.model, context_params)
        if not self.ctx:
            self.close()
            raise ReflectionLMError(f"llama.cpp could not make a context for {path} (out of memory?)")
        self.n_batch = int(lib.llama_n_batch(self.ctx))
        self.n_seq = int(lib.llama_n_seq_max(self.ctx))
        self.batch = lib.llama_batch_init(self.n_batch, 0, self.n_seq)
        self.memory = lib.llama_get_memory(self.ctx)
        self.vocab = lib.llama_model_get_vocab(self.model)

    def close(self) -> None:
        lib = self.lib
        if self.batch is not None:
            lib.llama_batch_free(self.batch)
            self.batch = None
        if self.ctx:
            lib.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            lib.llama_model_free(self.model)
            self.model = None


class LlamaCppReflectionLM(ReflectionLMBase):
    """A GGUF model on llama.cpp, greedy decoding in our own loop, K prompts decoded together.

    With ``generate(temperature=...)`` each sequence's tokens are drawn in Python from the logits
    read for it (:class:`~langchain_selfrag.lm.base.TokenSampler`), with llama.cpp's own samplers unused.

    ``n_seq_max`` sequences share one unified KV cache: ``generate`` decodes up to
    ``n_seq_max // (1 + b)`` prompts together, b being the branches of its multi-token first
    candidates (0 with a reflection vocabulary). With ``n_seq_max=1`` prompts go one at a time.
    Other keyword options set fields of llama.cpp's ``llama_model_params`` or
    ``llama_context_params`` by name (``flash_attn_type``, ``type_k``, ``main_gpu`` ...).
    """

    generates_in_batches = True

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        n_seq_max: int = 16,
        n_batch: int = 512,
        verbose: bool = False,
        **llama_kwargs: Any,
    ) -> None:
        try:
            import llama_cpp
            from llama_cpp import llama_cpp as lib
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ReflectionLMError("llama-cpp-python is not installed: pip install 'langchain-selfrag[llamacpp]'") from exc
        check_binding_version(llama_cpp.__version__)
        path = Path(model_path)
        if not path.is_file():
            raise ReflectionLMError(f"GGUF file not found: {path}")
        # llama-cpp-python routes llama.cpp's log through this logger (as Llama(verbose=...) does).
        logging.getLogger("llama-cpp-python").setLevel(logging.DEBUG if verbose else logging.ERROR)
        lib.llama_backend_init()
        threads = n_threads or default_threads()
        model_params = lib.llama_model_default_params()
        model_params.n_gpu_layers = 0x7FFFFFFF if n_gpu_layers == -1 else n_gpu_layers
        ctx_params = lib.llama_context_default_params()
        ctx_params.n_ctx = n_ctx
        ctx_params.n_batch = ctx_params.n_ubatch = min(n_batch, n_ctx)
        ctx_params.n_threads = ctx_params.n_threads_batch = threads
        ctx_params.n_seq_max = max(1, min(n_seq_max, lib.llama_max_parallel_sequences()))
        ctx_params.kv_unified = True
        ctx_params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED  # as Llama(flash_attn=False)
        ctx_params.no_perf = True
        options = dict(llama_kwargs)
        _set_fields(model_params, options)
        _set_fields(ctx_params, options)
        if options:
            raise TypeError(f"unknown llama.cpp options: {', '.join(sorted(options))}")
        self._native = native = _Native(lib, path, model_params, ctx_params)
        # Free the llama.cpp objects at interpreter exit while llama_cpp's module globals still exist;
        # left to garbage collection during teardown they can meet half-destroyed modules.
        self._finalizer = weakref.finalize(self, native.close)
        self._lib = lib
        self.model_path = path
        self.n_vocab = int(lib.llama_vocab_n_tokens(native.vocab))
        self._n_seq = native.n_seq
        self.generates_in_batches = self._n_seq > 1
        self._cached: list[int] = []  # the tokens sequence 0 holds, positions 0..n-1; no other sequence holds any
        self._last_logits: tuple[tuple[int, ...], np.ndarray] | None = None
        self._init_reflection_vocab()
        self._groups = self._group_ids()

    @property
    def context_length(self) -> int:
        """The ``n_ctx`` the model was loaded with (not its training length)."""
        return int(self._lib.llama_n_ctx(self._native.ctx))

    @property
    def n_seq_max(self) -> int:
        """Sequences the KV cache holds at once."""
        return self._n_seq

    @property
    def cached_tokens(self) -> list[int]:
        """The tokens whose KV cells are kept for the next call (a prompt prefix cache)."""
        return list(self._cached)

    def close(self) -> None:
        """Free the llama.cpp model, context and batch (also done once at interpreter exit)."""
        self._finalizer()

    # -- tokenizer -----------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        lib, data = self._lib, text.encode("utf-8")
        size = len(data) + 2
        while True:
            buf = (lib.llama_token * size)()
            n = lib.llama_tokenize(self._native.vocab, data, len(data), buf, size, add_bos, True)
            if n >= 0:
                return list(buf[:n])
            if -n <= size:
                raise ReflectionLMError(f"llama.cpp could not tokenize {text[:60]!r}")
            size = -n

    def _piece(self, tid: int) -> bytes:
        lib, size = self._lib, 32
        while True:
            buf = ctypes.create_string_buffer(size)
            n = lib.llama_token_to_piece(self._native.vocab, tid, buf, size, 0, True)
            if n >= 0:
                return buf.raw[:n]
            size = -n  # the buffer was too small: -n bytes are needed

    def decode(self, ids: Sequence[int]) -> str:
        out = b"".join(self._piece(int(t)) for t in ids)
        # As llama-cpp-python's detokenize: drop the space a leading BOS makes (Llama-1 style vocabularies).
        if ids and ids[0] == self._lib.llama_vocab_bos(self._native.vocab) and out[:1] == b" ":
            out = out[1:]
        return out.decode("utf-8", errors="replace")

    def _eos_ids(self) -> Sequence[int]:
        is_eog, vocab = self._lib.llama_vocab_is_eog, self._native.vocab
        return [i for i in range(self.n_vocab) if is_eog(vocab, i)]

    def _special_ids(self) -> Sequence[int]:
        is_control, vocab = self._lib.llama_vocab_is_control, self._native.vocab
        return [i for i in range(self.n_vocab) if is_control(vocab, i)]

    # -- low-level decoding ---------------------------------------------------------------------
    def _overflow(self, needed: int) -> ReflectionLMError:
        return ReflectionLMError(
            f"context overflow: {needed} tokens exceed n_ctx={self.context_length}; "
            "shorten the passages or load the model with a larger n_ctx"
        )

    def _check_room(self, needed: int) -> None:
        if needed > self.context_length:
            raise self._overflow(needed)

    def _seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> None:
        self._lib.llama_memory_seq_rm(self._native.memory, seq, p0, p1)

    def _seq_cp(self, src: int, dst: int, p1: int) -> None:
        self._lib.llama_memory_seq_cp(self._native.memory, src, dst, 0, p1)

    def _forget_cache(self) -> None:
        """Empty the KV cache (after a failed decode, whose cells are in an unknown state)."""
        self._lib.llama_memory_clear(self._native.memory, True)
        self._cached = []
        self._last_logits = None

    def _logits_row(self, index: int) -> np.ndarray:
        ptr = self._lib.llama_get_logits_ith(self._native.ctx, index)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def _decode_entries(self, entries: Sequence[Entry]) -> dict[int, np.ndarray]:
        """Decode (token, position, sequence ids, wants logits) entries, ``n_batch`` per ``llama_decode``.

        Returns the logits of the entries that asked for them, by entry index.
        """
        native, lib = self._native, self._lib
        batch = native.batch
        rows: dict[int, np.ndarray] = {}
        for start in range(0, len(entries), native.n_batch):
            chunk = entries[start : start + native.n_batch]
            batch.n_tokens = len(chunk)
            for j, (token, pos, seqs, wants) in enumerate(chunk):
                batch.token[j] = token
                batch.pos[j] = pos
                batch.n_seq_id[j] = len(seqs)
                for k, seq in enumerate(seqs):
                    batch.seq_id[j][k] = seq
                batch.logits[j] = wants
            code = lib.llama_decode(native.ctx, batch)
            if code != 0:
                self._forget_cache()
                if code == 1:
                    raise ReflectionLMError(
                        f"context overflow: llama.cpp found no KV cells for {len(chunk)} tokens (n_ctx="
                        f"{self.context_length}); shorten the passages or load the model with a larger n_ctx"
                    )
                raise ReflectionLMError(f"llama_decode failed with code {code}")
            rows.update((start + j, self._logits_row(j)) for j, e in enumerate(chunk) if e[3])
        return rows

    def _decode(self, tokens: Sequence[int]) -> np.ndarray:
        """Append ``tokens`` to sequence 0; the logits of the last position."""
        self._check_room(len(self._cached) + len(tokens))
        n = len(self._cached)
        entries = [(tok, n + j, (0,), j == len(tokens) - 1) for j, tok in enumerate(tokens)]
        rows = self._decode_entries(entries)
        self._cached += list(tokens)
        return rows[len(entries) - 1]

    def _reuse_prefix(self, ids: Sequence[int], upto: int, seqs: Sequence[int]) -> int:
        """Keep the cached cells of ``ids[:upto]`` on sequence 0, shared with ``seqs``; their count.

        Sequence 0 beyond the common prefix leaves the cache (no other sequence holds any cell).
        """
        common = min(common_prefix(self._cached, ids), upto)
        self._seq_rm(0, common, -1)
        del self._cached[common:]
        for seq in seqs:
            if seq and common:
                self._seq_cp(0, seq, common)
        return common

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
        if cached_logits is not None and len(self._cached) == len(ids) and not any(len(c) > 1 for c in continuations):
            return cached_logits, [float(_log_softmax_at(cached_logits, [c[0]])[0]) for c in continuations]
        nodes, n_seqs = continuation_tree([c[:-1] for c in continuations])
        if n_seqs and self._n_seq < 2:
            return self._score_prompt_one_sequence(ids, continuations)
        if n_seqs > self._n_seq - 1:  # more branches than sequences: in two halves
            half = len(continuations) // 2
            logits, out = self._score_prompt(ids, continuations[:half])
            return logits, out + self._score_prompt(ids, continuations[half:])[1]
        seqs = list(range(1, n_seqs + 1))
        common = self._reuse_prefix(ids, len(ids) - 1, seqs)
        self._check_room(len(ids) + len(nodes))
        entries: list[Entry] = [
            (tok, pos, (0, *seqs), pos == len(ids) - 1) for pos, tok in enumerate(ids[common:], start=common)
        ]
        last = len(entries) - 1
        row_of: dict[tuple[int, ...], int] = {}
        for prefix, node_seqs in nodes.items():
            row_of[prefix] = len(entries)
            entries.append((prefix[-1], len(ids) + len(prefix) - 1, node_seqs, True))
        try:
            rows = self._decode_entries(entries)
        finally:
            for seq in seqs:
                self._seq_rm(seq)
        self._cached = list(ids)
        logits = rows[last]
        self._last_logits = (key, logits)
        return logits, [_tree_logprob(logits, rows, row_of, cont) for cont in continuations]

    def _score_prompt_one_sequence(self, ids: list[int], continuations: Sequence[list[int]]) -> tuple[np.ndarray, list[float]]:
        """:meth:`_score_prompt` on a single-sequence context: one decode per continuation."""
        logits, _ = self._score_prompt(ids)
        out = []
        for cont in continuations:
            total = float(_log_softmax_at(logits, [cont[0]])[0])
            if len(cont) > 1:
                self._check_room(len(ids) + len(cont) - 1)
                try:
                    rows = self._decode_entries([(tok, len(ids) + j, (0,), True) for j, tok in enumerate(cont[:-1])])
                finally:
                    self._seq_rm(0, len(ids), -1)
                total += sum(float(_log_softmax_at(rows[j], [tid])[0]) for j, tid in enumerate(cont[1:]))
            out.append(total)
        return logits, out

    def _score_prompts(self, prompt_ids: list[list[int]],
                       continuations: Sequence[list[int]] = ()) -> list[tuple[np.ndarray, list[float]]]:
        """:meth:`_score_prompt` for several prompts with the same continuations, decoded together.

        The prompts go in runs (:func:`plan_groups`: at most ``n_seq_max // (1 + b)`` prompts, b the
        branches of the continuations' prefix tree, and within ``n_ctx``), each run in one prefill
        laid out as :class:`_Run` lays out ``generate``'s: the prefix common to the run decoded once
        (its cached part kept), each prompt's tail on a sequence of its own, its continuations on
        sequences after them. A run of one prompt takes :meth:`_score_prompt` (with its split of
        more branches than sequences). Logits move slightly with the layout, as in ``generate``.
        """
        nodes, n_branches = continuation_tree([c[:-1] for c in continuations])
        width = max(1, self._n_seq // (1 + n_branches))
        out: list[tuple[np.ndarray, list[float]]] = []
        for run in plan_groups(prompt_ids, len(nodes), self.context_length, width):
            if len(run) == 1:
                out.append(self._score_prompt(prompt_ids[run[0]], continuations))
                continue
            logits, first = _Run(self, [prompt_ids[i] for i in run], list(continuations), [None] * len(run)).score()
            out += zip(logits, first)
        return out

    # -- protocol primitives --------------------------------------------------------------------
    def _continuation_logprobs(self, prompt_ids: list[list[int]], continuations: list[list[int]]) -> list[float]:
        spans: list[tuple[int, int]] = []  # consecutive pairs with the same prompt share one decode
        i = 0
        while i < len(prompt_ids):
            j = i + 1
            while j < len(prompt_ids) and prompt_ids[j] == prompt_ids[i]:
                j += 1
            spans.append((i, j))
            i = j
        same = all(continuations[a:b] == continuations[spans[0][0] : spans[0][1]] for a, b in spans)
        if len(spans) > 1 and same:  # candidate_probs' pairs: every prompt with the same candidates
            a, b = spans[0]
            return [lp for _, lps in self._score_prompts([prompt_ids[i] for i, _ in spans], continuations[a:b])
                    for lp in lps]
        return [lp for a, b in spans for lp in self._score_prompt(prompt_ids[a], continuations[a:b])[1]]

    def _first_position_probs(self, prompt_ids: list[list[int]], ids: list[int]) -> list[dict[int, float]]:
        scored = self._score_prompts(prompt_ids)
        return [dict(zip(ids, np.exp(_log_softmax_at(logits, ids)).tolist())) for logits, _ in scored]

    def _greedy(self, prompt_ids, max_new_tokens, first_seqs, stop, bans=None, *, samplers=None):
        bans = list(bans) if bans else [None] * len(prompt_ids)
        samplers = list(samplers) if samplers else [None] * len(prompt_ids)
        stops = stop_hooks(stop, len(prompt_ids))
        nodes, n_branches = continuation_tree([s[:-1] for s in first_seqs])
        width = max(1, self._n_seq // (1 + n_branches))
        runs = plan_groups(prompt_ids, len(nodes) + max_new_tokens, self.context_length, width)
        results = []
        try:
            for run in runs:
                prompts, run_bans = [prompt_ids[i] for i in run], [bans[i] for i in run]
                run_samplers, run_stops = [samplers[i] for i in run], [stops[i] for i in run]
                if len(run) == 1:
                    results.append(self._greedy_one(prompts[0], max_new_tokens, first_seqs, run_stops[0], run_bans[0],
                                                    run_samplers[0]))
                else:
                    results += _Run(self, prompts, first_seqs, run_bans, run_samplers).generate(max_new_tokens, run_stops)
        finally:
            self._last_logits = None
        return results

    def _greedy_one(self, prompt, max_new_tokens, first_seqs, stop, banned, sampler=None):
        """One prompt on sequence 0, its prompt prefix cache kept."""
        logits, first = self._score_prompt(prompt, first_seqs)
        step = _Step(self, banned, sampler)
        for i in range(max_new_tokens):
            tid = step.take(logits)
            if stop(step.generated) or i == max_new_tokens - 1:
                break
            logits = self._decode([tid])
        return step.result(first)


def _tree_logprob(logits: np.ndarray, rows: dict[int, np.ndarray], row_of: dict[tuple[int, ...], int], cont: Sequence[int]) -> float:
    """log p(cont) from the next-position ``logits`` and the rows of its prefix-tree nodes."""
    total = float(_log_softmax_at(logits, [cont[0]])[0])
    for j in range(1, len(cont)):
        total += float(_log_softmax_at(rows[row_of[tuple(cont[:j])]], [cont[j]])[0])
    return total


class _Step:
    """One sequence's choices: guarded argmax (or a draw of ``sampler``), log-probs and group probabilities."""

    def __init__(self, lm: LlamaCppReflectionLM, banned: BanHook | None, sampler: TokenSampler | None = None) -> None:
        self.groups = lm._groups
        self.banned = banned
        self.sampler = sampler
        self.generated: list[int] = []
        self.per_pos: list[dict[int, float]] = []
        self.cum = 0.0
        self.guarded = 0

    def take(self, logits: np.ndarray) -> int:
        """Choose the next token from the unmasked ``logits``; record it."""
        top = float(logits.max())
        lse = top + float(np.log(np.exp(logits - top).sum()))
        ban = self.banned(self.generated) if self.banned else ()
        if self.sampler is not None:
            tid, changed = self.sampler.choose(logits, ban)
            self.guarded += changed
        else:
            tid = int(logits.argmax())
            if tid in ban:
                tid, self.guarded = _allowed_argmax(logits, ban), self.guarded + 1
        self.cum += float(logits[tid]) - lse
        group = self.groups.get(tid)
        self.per_pos.append(dict(zip(group, np.exp(logits[group] - lse).tolist())) if group else {})
        self.generated.append(tid)
        return tid

    def result(self, first: list[float]) -> tuple[list[int], float, list[dict[int, float]], list[float], int]:
        return self.generated, self.cum, self.per_pos, first, self.guarded


class _Run:
    """Several prompts decoded together: prompt i on sequence i, its candidate branches after them.

    ``generate`` decodes them to the end; ``score`` only reads their next-position logits and the
    log-probs of ``first_seqs`` (batched ``candidate_probs``).

    The prefix common to the prompts is decoded once for all their sequences (its cached part
    copied from sequence 0), each prompt's tail on its own sequence in the same ``llama_decode``
    calls, then one ``llama_decode`` per step for every live sequence. Sequence 0 (prompt 0 and its
    generation) stays cached afterwards; the other sequences are dropped.
    """

    def __init__(self, lm: LlamaCppReflectionLM, prompts: list[list[int]], first_seqs: list[list[int]], bans,
                 samplers=None) -> None:
        self.lm, self.prompts, self.first_seqs = lm, prompts, first_seqs
        self.steps = [_Step(lm, b, s) for b, s in zip(bans, samplers or [None] * len(bans))]
        self.nodes, n_branches = continuation_tree([s[:-1] for s in first_seqs])
        n = len(prompts)
        self.branch_seqs = [tuple(n + i * n_branches + b for b in range(n_branches)) for i in range(n)]
        self.shared = min(min(common_prefix(prompts[0], p) for p in prompts), min(len(p) for p in prompts) - 1)

    def generate(self, max_new_tokens: int, stop: StopHook | Sequence[StopHook]) -> list[tuple]:
        """Decode every prompt; ``stop``: one hook for all of them or one per prompt."""
        lm = self.lm
        try:
            logits, first = self._prefill()
            self._steps(logits, max_new_tokens, stop_hooks(stop, len(self.prompts)))
        except BaseException:
            lm._forget_cache()
            raise
        self._keep_first(self.prompts[0] + self.steps[0].generated[:-1])
        return [step.result(f) for step, f in zip(self.steps, first)]

    def score(self) -> tuple[list[np.ndarray], list[list[float]]]:
        """The prefill alone: each prompt's next-position logits and log p(first_seqs | prompt)."""
        try:
            logits, first = self._prefill()
        except BaseException:
            self.lm._forget_cache()
            raise
        self._keep_first(self.prompts[0])
        self.lm._last_logits = (tuple(self.prompts[0]), logits[0])
        return logits, first

    def _keep_first(self, cached: list[int]) -> None:
        """Drop every sequence but 0, which holds ``cached`` (positions 0..n-1)."""
        for seq in range(1, len(self.prompts)):
            self.lm._seq_rm(seq)
        self.lm._cached = cached

    def _prefill(self) -> tuple[list[np.ndarray], list[list[float]]]:
        """Decode the prompts (and their candidate trees): next-position logits and first log-probs."""
        lm, prompts, shared = self.lm, self.prompts, self.shared
        everyone = tuple(range(len(prompts))) + tuple(s for seqs in self.branch_seqs for s in seqs)
        cached = lm._reuse_prefix(prompts[0], shared, everyone)
        lm._check_room(shared + sum(len(p) - shared + len(self.nodes) for p in prompts))
        entries: list[Entry] = [(tok, pos, everyone, False) for pos, tok in enumerate(prompts[0][cached:shared], start=cached)]
        last, row_of = [], []
        for i, p in enumerate(prompts):
            own = (i, *self.branch_seqs[i])
            entries += [(p[pos], pos, own, pos == len(p) - 1) for pos in range(shared, len(p))]
            last.append(len(entries) - 1)
            rows_i: dict[tuple[int, ...], int] = {}
            for prefix, branches in self.nodes.items():
                rows_i[prefix] = len(entries)
                seqs = tuple(self.branch_seqs[i][b - 1] for b in branches)
                entries.append((prefix[-1], len(p) + len(prefix) - 1, seqs, True))
            row_of.append(rows_i)
        try:
            rows = lm._decode_entries(entries)
        finally:
            for seqs in self.branch_seqs:
                for seq in seqs:
                    lm._seq_rm(seq)
        logits = [rows[j] for j in last]
        first = [[_tree_logprob(lg, rows, r, c) for c in self.first_seqs] for lg, r in zip(logits, row_of)]
        return logits, first

    def _steps(self, logits: list[np.ndarray], max_new_tokens: int, stops: Sequence[StopHook]) -> None:
        """Greedy steps for every live sequence, one ``llama_decode`` a step."""
        lm = self.lm
        used = self.shared + sum(len(p) - self.shared for p in self.prompts)
        live = list(range(len(self.prompts)))
        rows = dict(zip(live, logits))
        for i in range(max_new_tokens):
            feed: list[Entry] = []
            for seq in live:
                step = self.steps[seq]
                tid = step.take(rows[seq])
                if not (stops[seq](step.generated) or i == max_new_tokens - 1):
                    feed.append((tid, len(self.prompts[seq]) + len(step.generated) - 1, (seq,), True))
            if not feed:
                return
            used += len(feed)
            lm._check_room(used)
            live = [e[2][0] for e in feed]
            out = lm._decode_entries(feed)
            rows = {seq: out[j] for j, seq in enumerate(live)}
