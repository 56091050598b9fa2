"""The IsRel probe's pure parts: sentence windows and the --labelled summary."""

from __future__ import annotations

import numpy as np

from cookbook.experiments.isrel_probe import labelled_summary, windows


def test_windows_cut_at_sentence_ends_and_keep_every_sentence():
    text = "One two three. Four five six seven! Eight? A very long sentence that is over the limit alone."
    out = windows(text, 36)
    assert out == ["One two three. Four five six seven!", "Eight?",
                   "A very long sentence that is over the limit alone."]
    assert " ".join(out) == text
    assert windows(text, 1000) == [text]


def test_labelled_summary_counts_gold_best_passages_and_near_misses_below_the_bar():
    cases = [{"question": "a", "kind": "answerable", "gold": True}, {"question": "a", "kind": "answerable", "gold": False},
             {"question": "b", "kind": "answerable", "gold": True}, {"question": "b", "kind": "answerable", "gold": False},
             {"question": "c", "kind": "near_miss", "gold": False}]
    scores = np.array([0.9, 0.2, 0.5, 0.6, 0.8])
    assert labelled_summary(cases, scores, 0.75) == (
        "gold passage judged best 1/2, and at >= 0.75: 1/2; near misses below 0.75: 0/1")
    assert labelled_summary(cases, scores, 0.85).endswith("near misses below 0.85: 1/1")
