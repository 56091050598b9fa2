"""The llama.cpp backend itself: :class:`LlamaCppReflectionLM` (loading, scoring, the protocol primitives).

See :mod:`langchain_selfrag.lm.llamacpp` for how prompts are decoded together.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...layout_record import layout_of_path
from ..base import ReflectionLMBase
from ..stopping import stop_hooks
from ..protocol import ReflectionLMError
from .batching import BatchRun, SequenceStep
from .layout import Entry, common_prefix, continuation_tree, log_softmax_at, plan_groups, tree_logprob
from .native import NativeCalls, NativeHandles, apply_options, binding_version, default_threads, open_binding
from .prefix_states import PrefixStates, prefix_cache_mb


class LlamaCppReflectionLM(NativeCalls, ReflectionLMBase):
    """A GGUF model on llama.cpp, greedy decoding in our own loop, K prompts decoded together.

    With ``generate(temperature=...)`` each sequence's tokens are drawn in Python from the logits
    read for it (:class:`~langchain_selfrag.lm.sampling.TokenSampler`), with llama.cpp's own samplers unused.

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
        lib, path = open_binding(model_path, verbose)
        threads = n_threads or default_threads()
        model_params = lib.llama_model_default_params()
        model_params.n_gpu_layers = 0x7FFFFFFF if n_gpu_layers == -1 else n_gpu_layers
        ctx_params = lib.llama_context_default_params()
        ctx_params.n_ctx = n_ctx
        ctx_params.n_batch = ctx_params.n_ubatch = min(n_batch, n_ctx)
        ctx_params.n_threads = ctx_params.n_threads_batch = threads
        ctx_params.n_seq_max = max(1, min(n_seq_max, lib.llama_max_parallel_sequences()))
        ctx_params.kv_unified = True
        # off, as Llama(flash_attn=False): on, batched and single prompts differ by up to 5e-3 in log-prob
        # (on two CPU cores five passages prefill about 1.15x faster with flash_attn_type=1)
        ctx_params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        ctx_params.no_perf = True
        apply_options(model_params, ctx_params, llama_kwargs)
        self._handles = native = NativeHandles(lib, path, model_params, ctx_params)
        # Free the llama.cpp objects at interpreter exit while llama_cpp's module globals still exist;
        # left to garbage collection during teardown they can meet half-destroyed modules.
        self._finalizer = weakref.finalize(self, native.close)
        self._lib = lib
        self.model_path = path
        self.n_vocab = int(lib.llama_vocab_n_tokens(native.vocab))
        self._n_seq = native.n_seq
        self.generates_in_batches = self._n_seq > 1
        self._cached: list[int] = []  # the tokens sequence 0 holds, positions 0..n-1
        self._kept: dict[int, list[int]] = {}  # the prompts other sequences hold until the next call
        self._last_logits: tuple[tuple[int, ...], np.ndarray] | None = None
        self.prompt_layout = layout_of_path(path)
        # what the KV cells saved for a prompt prefix depend on besides its tokens (.prefix_states)
        stat = path.stat()
        self._state_key = "|".join(str(v) for v in (
            path.resolve(), stat.st_size, stat.st_mtime_ns, binding_version(),
            ctx_params.flash_attn_type, ctx_params.type_k, ctx_params.type_v, model_params.n_gpu_layers))
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

    # -- passages read once ---------------------------------------------------------------------
    def reuse_passage_reads(self, marker: str | None, folder: str | os.PathLike | None = None) -> bool:
        """Save the KV cells of each batched prompt's text before its last ``marker`` (its passage, when
        prompts put the passage first) and restore them when a later prompt starts with the same tokens
        (:mod:`.prefix_states`). ``folder``: default the cache folder's ``prefix-states``; ``marker``
        None or ``$SELFRAG_PREFIX_CACHE_MB=0`` turn it off. True when on."""
        max_mb = prefix_cache_mb()
        if not marker or max_mb == 0:
            self._prefix_states, self._prefix_marker = None, None
            return False
        if folder is None:
            from ...bundled.cache import cache_dir

            folder = cache_dir() / "prefix-states"
        self._prefix_states = PrefixStates(folder, self._state_key, max_mb << 20)
        self._prefix_marker = marker.encode("utf-8")
        return True

    def read_passages_ahead(self, prompts: Sequence[str], on_progress: Any = None) -> tuple[int, int, int]:
        """Decode and save the passage of each prompt whose state is not saved yet (:meth:`reuse_passage_reads`
        must be on), so that the questions that come later find it read; ``on_progress(done, total)``
        after each batch. Stops before the folder would exceed its size (the least recently used states
        would make room for these, which would then push out each other). Returns (passages read now,
        passages found saved, passages left unread for want of room)."""
        states = self._prefix_states
        if states is None:
            raise ReflectionLMError("passage reuse is off: call reuse_passage_reads(marker) first "
                                    "(or $SELFRAG_PREFIX_CACHE_MB is 0)")
        todo: dict[tuple[int, ...], None] = {}
        saved = 0
        for ids in self._encode_prompts(prompts):
            n = self._passage_prefix(ids)
            if n is None:
                continue
            if states.has(ids[:n]):
                saved += 1
            else:
                todo[tuple(ids[:n])] = None
        prefixes = [list(p) for p in todo]
        done, used, full = 0, states.size(), False
        try:
            for run in plan_groups(prefixes, 0, self.context_length, self._n_seq):
                if full:
                    break
                group = [prefixes[i] for i in run]
                self._forget_cache()
                shared = min(common_prefix(group[0], p) for p in group)
                seqs = tuple(range(len(group)))
                entries: list[Entry] = [(tok, pos, seqs, False) for pos, tok in enumerate(group[0][:shared])]
                for seq, p in enumerate(group):
                    entries += [(p[pos], pos, (seq,), pos == len(p) - 1) for pos in range(shared, len(p))]
                self._decode_entries(entries)
                for seq, p in enumerate(group):
                    data = self._seq_state(seq)
                    full = used + len(data) > states.max_bytes
                    if full:
                        break
                    states.put(p, data)
                    used += len(data)
                    done += 1
                if on_progress is not None:
                    on_progress(done, len(prefixes))
        finally:
            self._forget_cache()
        return done, saved, len(prefixes) - done

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
            return cached_logits, [float(log_softmax_at(cached_logits, [c[0]])[0]) for c in continuations]
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
        common, save_at = self._read_passage(ids, common, seqs)
        if save_at:  # the passage first, saved, then the rest of the prompt
            self._decode_entries([(tok, pos, (0, *seqs), pos == save_at - 1)
                                  for pos, tok in enumerate(ids[common:save_at], start=common)])
            self._save_passage(ids[:save_at], 0)
            common = save_at
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
        return logits, [tree_logprob(logits, rows, row_of, cont) for cont in continuations]

    def _score_prompt_one_sequence(self, ids: list[int], continuations: Sequence[list[int]]) -> tuple[np.ndarray, list[float]]:
        """:meth:`_score_prompt` on a single-sequence context: one decode per continuation."""
        logits, _ = self._score_prompt(ids)
        out = []
        for cont in continuations:
            total = float(log_softmax_at(logits, [cont[0]])[0])
            if len(cont) > 1:
                self._check_room(len(ids) + len(cont) - 1)
                try:
                    rows = self._decode_entries([(tok, len(ids) + j, (0,), True) for j, tok in enumerate(cont[:-1])])
                finally:
                    self._seq_rm(0, len(ids), -1)
                total += sum(float(log_softmax_at(rows[j], [tid])[0]) for j, tid in enumerate(cont[1:]))
            out.append(total)
        return logits, out

    def _score_prompts(self, prompt_ids: list[list[int]],
                       continuations: Sequence[list[int]] = ()) -> list[tuple[np.ndarray, list[float]]]:
        """:meth:`_score_prompt` for several prompts with the same continuations, decoded together.

        The prompts go in runs (:func:`plan_groups`: at most ``n_seq_max // (1 + b)`` prompts, b the
        branches of the continuations' prefix tree, and within ``n_ctx``), each run in one prefill
        laid out as :class:`~.batching.BatchRun` lays out ``generate``'s: the prefix common to the run
        decoded once (its cached part kept), each prompt's tail on a sequence of its own, its
        continuations on sequences after them. A run of one prompt takes :meth:`_score_prompt` (with its split of
        more branches than sequences). Logits move slightly with the layout, as in ``generate``.
        """
        nodes, n_branches = continuation_tree([c[:-1] for c in continuations])
        width = max(1, self._n_seq // (1 + n_branches))
        out: list[tuple[np.ndarray, list[float]]] = []
        for run in plan_groups(prompt_ids, len(nodes), self.context_length, width):
            if len(run) == 1:
                out.append(self._score_prompt(prompt_ids[run[0]], continuations))
                continue
            logits, first = BatchRun(self, [prompt_ids[i] for i in run], list(continuations), [None] * len(run)).score()
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
        # float64: a token far below another keeps a probability that its group can renormalise
        return [dict(zip(ids, np.exp(log_softmax_at(logits.astype(np.float64), ids)).tolist())) for logits, _ in scored]

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
                    batch = BatchRun(self, prompts, first_seqs, run_bans, run_samplers)
                    results += batch.generate(max_new_tokens, run_stops)
        finally:
            self._last_logits = None
        return results

    def _greedy_one(self, prompt, max_new_tokens, first_seqs, stop, banned, sampler=None):
        """One prompt on sequence 0, its prompt prefix cache kept."""
        logits, first = self._score_prompt(prompt, first_seqs)
        step = SequenceStep(self, banned, sampler)
        for i in range(max_new_tokens):
            tid = step.take(logits)
            if stop(step.generated) or i == max_new_tokens - 1:
                break
            logits = self._decode([tid])
        return step.result(first)
