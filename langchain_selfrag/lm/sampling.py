"""Sampled decoding (``generate(temperature=..., top_p=..., seed=...)``), shared by every backend.

Pure numpy: the temperature / top-p distribution, one draw from it, the per-prompt seeded streams
and :class:`TokenSampler`, the object a backend asks for each prompt's next sampled token.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np


def check_sampling(temperature: float, top_p: float, seed: int | None) -> None:
    """ValueError unless ``temperature >= 0``, ``0 < top_p <= 1`` and ``seed`` is None or an int."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0.0:
        raise ValueError(f"temperature must be a number >= 0, not {temperature!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must lie in (0, 1], not {top_p!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise ValueError(f"seed must be an int or None, not {seed!r}")


def sampling_probs(logits: Any, temperature: float, top_p: float = 1.0, banned: Collection[int] = ()) -> np.ndarray:
    """The distribution :func:`sample_token` draws from (float64, sums to 1; pure).

    softmax(logits / temperature) with ``banned`` ids removed, then cut to its nucleus: the fewest
    most probable ids whose mass reaches ``top_p`` (ties kept in id order), renormalised.
    ``logits`` may be log-probabilities (any shift gives the same result). ``temperature`` > 0.
    """
    if not temperature > 0.0:
        raise ValueError("sampling_probs needs temperature > 0 (temperature 0 is the argmax)")
    x = np.array(logits, dtype=np.float64).reshape(-1) / float(temperature)
    if banned:
        x[np.fromiter(banned, dtype=np.int64)] = -np.inf
    top = x.max()
    if not np.isfinite(top):
        raise ValueError("every id is banned or has -inf logit")
    p = np.exp(x - top)
    p /= p.sum()
    if top_p < 1.0:
        p = _nucleus(p, top_p)
    return p


def _nucleus(p: np.ndarray, top_p: float) -> np.ndarray:
    """``p`` cut to its ``top_p`` nucleus and renormalised.

    Only ids above a small threshold are sorted when they alone reach ``top_p`` (then the nucleus
    lies among them: every id left out ranks below all of them); else every id is sorted.
    """
    want = top_p * p.sum()
    ids = np.flatnonzero(p > p.max() * 1e-6)
    if p[ids].sum() < want:
        ids = np.arange(len(p))
    order = ids[np.argsort(-p[ids], kind="stable")]
    mass = np.cumsum(p[order])
    keep = min(int(np.searchsorted(mass, want, side="left")) + 1, len(order))
    cut = np.zeros_like(p)
    cut[order[:keep]] = p[order[:keep]]
    return cut / cut.sum()


def sample_token(
    logits: Any, temperature: float, top_p: float, rng: np.random.Generator, banned: Collection[int] = ()
) -> int:
    """One id drawn from :func:`sampling_probs` with ``rng``; temperature 0: the argmax over allowed ids."""
    if temperature <= 0.0:
        x = np.array(logits, dtype=np.float64).reshape(-1)
        if banned:
            x[np.fromiter(banned, dtype=np.int64)] = -np.inf
        return int(x.argmax())
    p = sampling_probs(logits, temperature, top_p, banned)
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))


def stream_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed for the stream ``(seed, *keys)``, e.g. prompt ``i`` of a call (deterministic)."""
    state = np.random.SeedSequence([int(seed) & (2**64 - 1), *(int(k) & (2**64 - 1) for k in keys)])
    return int(state.generate_state(1, np.uint64)[0] >> np.uint64(1))


@dataclass
class TokenSampler:
    """One prompt's sampling stream: temperature, top-p and its own seeded generator."""

    temperature: float
    top_p: float
    rng: np.random.Generator
    #: The stream's seed (None: fresh entropy); remote backends send it to the server.
    seed: int | None = None

    def choose(self, logits: Any, banned: Collection[int] = ()) -> tuple[int, bool]:
        """The next id and whether the ban changed it.

        The id is drawn from the unmasked distribution first; a banned draw is drawn again from
        the distribution without the banned ids (together: a draw from the allowed ids' renormalised
        probabilities), and counts as guarded, as a banned argmax does under greedy decoding.
        """
        tid = sample_token(logits, self.temperature, self.top_p, self.rng)
        if banned and tid in banned:
            return sample_token(logits, self.temperature, self.top_p, self.rng, banned), True
        return tid, False


def make_samplers(n: int, temperature: float, top_p: float, seed: int | None) -> list[TokenSampler | None]:
    """One sampler per prompt (streams ``(seed, i)``), or ``[None] * n`` for greedy decoding."""
    check_sampling(temperature, top_p, seed)
    if temperature == 0.0:
        return [None] * n
    out: list[TokenSampler | None] = []
    for i in range(n):
        s = stream_seed(seed, i) if seed is not None else None
        out.append(TokenSampler(float(temperature), float(top_p), np.random.default_rng(s), s))
    return out
