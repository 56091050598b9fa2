"""Comparing two greedy decoders of one model whose logits differ slightly (another batch layout,
a server against in-process, another CPU's SIMD kernels): equal paths up to near-ties.

llama.cpp quantises activations to 8 bits and sums in an order that depends on the batch layout
and the CPU, so exact greedy equality holds only where the top two tokens are further apart than
that noise. These helpers check that two paths part only at such a near-tie, and compare
probabilities on the path each decoder chose.
"""

from __future__ import annotations

import math

import pytest

from langchain_selfrag.lm.llamacpp import common_prefix

#: SmolLM2 Q4_1 between batch layouts, per base-vocabulary token of a candidate string (a
#: [Utility:k] is 6 tokens, [Relevant] 4): the worst measured was 0.22 nats on the 4 tokens of
#: [Relevant] on AMD EPYC family 26 (Zen 5, AVX-512; 0.055 a token) and 0.29 on a 6-token
#: [Utility:k] on another AMD EPYC (0.048 a token); Intel Sapphire Rapids stayed under 0.25 for all.
#: About twice the worst:
Q4_TOKEN_LOG_TOL = 0.1
#: Q4_1 greedy choices between layouts flip only where the top two are this close (nats): the
#: layouts move single-token log-probs by up to 0.15 (measured over four reflection groups on six
#: SQuAD prompts, Intel), so a tie within twice that may go either way.
Q4_NEAR_TIE = 0.3


def teacher_forced(lm, prompt: str, ids: list[int]) -> float:
    """``lm``'s log-probability of continuing ``prompt`` with ``ids``."""
    return lm._continuation_logprobs([lm.tokenize(prompt, add_bos=True)], [ids])[0]


def next_probs(lm, prompt: str, prefix: list[int], ids: list[int]) -> dict[int, float]:
    """Full-softmax probabilities of ``ids`` after ``prompt`` + ``prefix``."""
    return lm._first_position_probs([lm.tokenize(prompt, add_bos=True) + prefix], ids)[0]


def path_ids(lm, prompt: str, gen) -> list[int]:
    """``gen``'s token ids in ``lm``'s vocabulary. A server in text mode reports the end-of-sequence
    token it stopped on as id -1; it becomes the end-of-sequence id ``lm`` finds most likely there."""
    ids = list(gen.token_ids)
    if ids and ids[-1] < 0 and gen.stop_reason == "eos":
        probs = next_probs(lm, prompt, ids[:-1], list(lm.eos_ids))
        ids[-1] = max(probs, key=probs.get)
    return ids


def assert_greedy_twins(lm, prompt: str, got, want, *, near_tie: float, log_tol: float) -> int:
    """``got`` follows ``want``'s greedy path, or parts from it only where ``lm`` puts the two
    choices within ``near_tie`` nats of each other; ``got``'s log-prob is ``lm``'s on ``got``'s path
    within ``log_tol``. Returns the length of the shared path."""
    got_ids, want_ids = path_ids(lm, prompt, got), path_ids(lm, prompt, want)
    shared = common_prefix(got_ids, want_ids)
    if got_ids == want_ids:
        assert got.text == want.text and got.stop_reason == want.stop_reason
    elif shared < min(len(got_ids), len(want_ids)):
        mine, theirs = want_ids[shared], got_ids[shared]
        probs = next_probs(lm, prompt, want_ids[:shared], [mine, theirs])
        gap = abs(math.log(probs[mine]) - math.log(probs[theirs]))
        assert gap < near_tie, f"parted at token {shared} with a margin of {gap:.3f} nats"
    else:  # one stopped where the other went on: the end of sequence was a near-tie there
        longer = got_ids if len(got_ids) > len(want_ids) else want_ids
        nxt = longer[shared]
        probs = next_probs(lm, prompt, longer[:shared], [nxt, *lm.eos_ids])
        gap = abs(math.log(probs[nxt]) - math.log(max(probs[i] for i in lm.eos_ids)))
        assert gap < near_tie, f"one stopped at token {shared}, the other went on, margin {gap:.3f} nats"
    assert got.cumulative_logprob == pytest.approx(teacher_forced(lm, prompt, got_ids), abs=log_tol)
    return shared
