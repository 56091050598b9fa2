"""Which questions a run evaluates: the first ``--limit`` of them, or a seeded ``--sample``."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

Item = TypeVar("Item")


def select_examples(
    examples: Sequence[Item], limit: int | None = None, sample: int | None = None, seed: int = 0
) -> list[Item]:
    """The first ``limit`` examples, or a seeded random ``sample`` of them (in file order)."""
    chosen = list(examples)
    if sample is not None:
        if sample < 1:
            raise ValueError("--sample must be at least 1")
        if sample < len(chosen):
            keep = set(random.Random(seed).sample(range(len(chosen)), sample))
            chosen = [ex for i, ex in enumerate(chosen) if i in keep]
    if limit is not None:
        if limit < 1:
            raise ValueError("--limit must be at least 1")
        chosen = chosen[:limit]
    return chosen
