"""How prompts and candidate continuations are laid out on llama.cpp's KV sequences (pure functions).

Prompts decoded together are split into runs that fit the context (:func:`plan_groups`); the
candidate continuations of a prompt form a prefix tree (:func:`continuation_tree`), each node
decoded once for every candidate through it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Entry = tuple[int, int, tuple[int, ...], bool]  # token, position, sequence ids, wants logits


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


def log_softmax_at(logits: np.ndarray, ids: Sequence[int]) -> np.ndarray:
    """log softmax(``logits``) at ``ids``."""
    top = float(logits.max())
    lse = top + float(np.log(np.exp(logits - top).sum()))
    return logits[list(ids)] - lse


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


def tree_logprob(logits: np.ndarray, rows: dict[int, np.ndarray], row_of: dict[tuple[int, ...], int], cont: Sequence[int]) -> float:
    """log p(cont) from the next-position ``logits`` and the rows of its prefix-tree nodes."""
    total = float(log_softmax_at(logits, [cont[0]])[0])
    for j in range(1, len(cont)):
        total += float(log_softmax_at(rows[row_of[tuple(cont[:j])]], [cont[j]])[0])
    return total
