"""Paired bootstrap differences (langchain_selfrag.evaluation.common.bootstrap), checked by hand."""

import numpy as np
import pytest

from langchain_selfrag.evaluation.common.bootstrap import paired_difference, percentile_interval, resample_indices


def test_paired_difference_counts_and_mean_by_hand():
    baseline = [1, 0, 1, 0, 1]
    system = [1, 1, 0, 1, 1]  # differences 0, 1, -1, 1, 0
    d = paired_difference(baseline, system, n_resamples=500, seed=3)
    assert d["n"] == 5 and d["value"] == pytest.approx(0.2)
    assert (d["better"], d["worse"]) == (2, 1)
    lo, hi = d["ci95"]
    assert -1 <= lo <= 0.2 <= hi <= 1 and lo < hi
    assert paired_difference(baseline, system, n_resamples=500, seed=3) == d  # reproducible


def test_identical_systems_have_a_zero_interval_and_bad_input_is_refused():
    assert paired_difference([1, 0, 1], [1, 0, 1], n_resamples=200)["ci95"] == [0.0, 0.0]
    assert paired_difference([1, 0], [0, 1], n_resamples=0)["ci95"] is None
    assert paired_difference([], [])["value"] is None
    with pytest.raises(ValueError, match="differ in number"):
        paired_difference([1, 0], [1])


def test_resamples_and_interval():
    idx = resample_indices(4, 100, seed=0)
    assert idx.shape == (100, 4) and idx.min() >= 0 and idx.max() <= 3
    assert percentile_interval(np.arange(101, dtype=float), 0.9) == pytest.approx((5.0, 95.0))
