"""Several prompts decoded together on llama.cpp's KV sequences, and each sequence's token choice."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from ..protocol import BanHook, StopHook
from ..sampling import TokenSampler
from ..stopping import stop_hooks
from .layout import Entry, common_prefix, continuation_tree, tree_logprob
from .native import NativeCalls


def allowed_argmax(logits: np.ndarray, banned: Collection[int]) -> int:
    """The argmax over the ids not in ``banned`` (``logits`` is left as it is)."""
    masked = logits.copy()
    masked[list(banned)] = -np.inf
    return int(masked.argmax())


class SequenceStep:
    """One sequence's choices: guarded argmax (or a draw of ``sampler``), log-probs and group probabilities."""

    def __init__(self, lm: NativeCalls, banned: BanHook | None, sampler: TokenSampler | None = None) -> None:
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
                tid, self.guarded = allowed_argmax(logits, ban), self.guarded + 1
        self.cum += float(logits[tid]) - lse
        group = self.groups.get(tid)
        self.per_pos.append(dict(zip(group, np.exp(logits[group] - lse).tolist())) if group else {})
        self.generated.append(tid)
        return tid

    def result(self, first: list[float]) -> tuple[list[int], float, list[dict[int, float]], list[float], int]:
        return self.generated, self.cum, self.per_pos, first, self.guarded


class BatchRun:
    """Several prompts decoded together: prompt i on sequence i, its candidate branches after them.

    ``generate`` decodes them to the end; ``score`` only reads their next-position logits and the
    log-probs of ``first_seqs`` (batched ``candidate_probs``).

    The prefix common to the prompts is decoded once for all their sequences (its cached part
    copied from sequence 0), each prompt's tail on its own sequence in the same ``llama_decode``
    calls, then one ``llama_decode`` per step for every live sequence. Sequence 0 (prompt 0 and its
    generation) stays cached afterwards; the other sequences are dropped, except that ``score`` keeps each
    prompt on its sequence until the next call, which reuses the one sharing most of its prompt.
    """

    def __init__(self, lm: NativeCalls, prompts: list[list[int]], first_seqs: list[list[int]], bans,
                 samplers=None) -> None:
        self.lm, self.prompts, self.first_seqs = lm, prompts, first_seqs
        self.steps = [SequenceStep(lm, b, s) for b, s in zip(bans, samplers or [None] * len(bans))]
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
        self.lm._cached = self.prompts[0]
        self.lm._kept = {seq: list(p) for seq, p in enumerate(self.prompts) if seq}  # until the next call
        self.lm._last_logits = (tuple(self.prompts[0]), logits[0])
        return logits, first

    def _keep_first(self, cached: list[int]) -> None:
        """Drop every sequence but 0, which holds ``cached`` (positions 0..n-1)."""
        for seq in range(1, len(self.prompts)):
            self.lm._seq_rm(seq)
        self.lm._cached = cached

    def _prefill(self) -> tuple[list[np.ndarray], list[list[float]]]:
        """Decode the prompts (and their candidate trees): next-position logits and first log-probs.

        Passages read before are restored instead of decoded (:meth:`~.native.NativeCalls._read_passages`);
        passages read now are decoded first, saved, then the rest of their prompts.
        """
        lm, prompts, shared = self.lm, self.prompts, self.shared
        everyone = tuple(range(len(prompts))) + tuple(s for seqs in self.branch_seqs for s in seqs)
        cached = lm._reuse_prefix(prompts[0], shared, everyone)
        need = shared + sum(len(p) - shared + len(self.nodes) for p in prompts)
        lm._check_room(need)
        starts, to_save = lm._read_passages(prompts, shared, self.branch_seqs, lm.context_length - need)
        lm._check_room(need + sum(shared for i, start in enumerate(starts) if start != shared))
        fresh = tuple(s for i, start in enumerate(starts) if start == shared for s in (i, *self.branch_seqs[i]))
        entries: list[Entry] = [(tok, pos, fresh, False) for pos, tok in enumerate(prompts[0][cached:shared], start=cached)
                                if fresh]
        for i, end in to_save.items():  # the passages to save: decoded first
            entries += [(prompts[i][pos], pos, (i, *self.branch_seqs[i]), False) for pos in range(starts[i], end)]
        first_phase = len(entries) if to_save else 0  # decoded before the rest, when passages are saved
        last, row_of = [], []
        for i, p in enumerate(prompts):
            own = (i, *self.branch_seqs[i])
            entries += [(p[pos], pos, own, pos == len(p) - 1) for pos in range(to_save.get(i, starts[i]), len(p))]
            last.append(len(entries) - 1)
            rows_i: dict[tuple[int, ...], int] = {}
            for prefix, branches in self.nodes.items():
                rows_i[prefix] = len(entries)
                seqs = tuple(self.branch_seqs[i][b - 1] for b in branches)
                entries.append((prefix[-1], len(p) + len(prefix) - 1, seqs, True))
            row_of.append(rows_i)
        try:
            if to_save:
                tok, pos, seqs, _ = entries[first_phase - 1]  # a decode asks for one row at least
                lm._decode_entries([*entries[: first_phase - 1], (tok, pos, seqs, True)])
                for i, end in to_save.items():
                    lm._save_passage(prompts[i][:end], i)
            rows = {first_phase + j: row for j, row in lm._decode_entries(entries[first_phase:]).items()}
        finally:
            for seqs in self.branch_seqs:
                for seq in seqs:
                    lm._seq_rm(seq)
        logits = [rows[j] for j in last]
        first = [[tree_logprob(lg, rows, r, c) for c in self.first_seqs] for lg, r in zip(logits, row_of)]
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
