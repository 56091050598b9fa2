"""The reflection-head fit on fixed hidden states: which positions are read, and the convex fit."""

from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("torch")

from langchain_selfrag import tokens as T  # noqa: E402
from training.core.collate import IGNORE_INDEX  # noqa: E402
from training.core.head_features import HeadFeatures, chosen_positions  # noqa: E402
from training.core.head_fit import fit_rows, head_loss, heldout_report  # noqa: E402

NAMES = [*T.REFLECTION_TOKENS, "<eos>"]


def test_every_labelled_position_is_read_and_extra_ones_avoid_fitted_tokens():
    ids = [5, 6, 7, 100, 8, 9, 101, 3]
    labels = [IGNORE_INDEX] * 3 + [100, 8, 9, 101, 3]
    picks = chosen_positions(ids, labels, {100, 101, 3}, extra=5, rng=random.Random(0))
    labelled = [(p, t) for p, t, _ in picks[:5]]
    assert labelled == [(2, 100), (3, 8), (4, 9), (5, 101), (6, 3)]  # position p predicts token p + 1
    extra = [(p, t) for p, t, _ in picks[5:]]
    assert extra == [(0, 6), (1, 7)]  # only unlabelled positions, none whose next token is fitted


def planted(n: int, seed: int, dim: int = 12) -> tuple[HeadFeatures, np.ndarray]:
    """Positions whose next token follows planted rows: a fitted token where a planted row beats the
    fixed vocabulary, an ordinary token otherwise."""
    rng = np.random.default_rng(seed)
    true_rows = rng.normal(0, 1.5, size=(len(NAMES), dim))
    hidden = rng.normal(0, 1, size=(n, dim))
    logits = hidden @ true_rows.T
    lse_fixed = np.full(n, 4.5)
    target = np.where(logits.max(1) > lse_fixed, logits.argmax(1), -1)
    features = HeadFeatures(hidden=hidden.astype(np.float32), lse_fixed=lse_fixed.astype(np.float32),
                            target=target.astype(np.int32), target_logit=np.full(n, 2.5, np.float32),
                            weight=np.ones(n, np.float32), record=np.arange(n, dtype=np.int32))
    return features, true_rows


def test_fit_lowers_the_loss_and_learns_which_token_is_written():
    features, _ = planted(2000, seed=2)  # one draw: the held-out part follows the same planted rows
    train, held = features.subset(np.arange(2000) < 1600), features.subset(np.arange(2000) >= 1600)
    init = np.zeros((len(NAMES), 12), np.float32)
    rows = fit_rows(train, init, l2=1e-4)
    assert head_loss(held, rows) < 0.5 * head_loss(held, init)
    report = heldout_report(held, rows, NAMES)
    assert report["groups"], report
    for group in report["groups"].values():
        assert group["right_in_group"] >= 0.9, report
    # the planted boundary is hard and the fit's is soft: measured 0.12 of the ordinary positions near it
    assert report["fitted_row_written_at_ordinary"] < 0.25, report


def test_a_strong_l2_keeps_the_rows_near_their_start():
    features, _ = planted(500, seed=3)
    init = np.ones((len(NAMES), 12), np.float32)
    near = fit_rows(features, init, l2=10.0)
    far = fit_rows(features, init, l2=1e-5)
    assert np.abs(near - init).max() < np.abs(far - init).max()
    assert np.isfinite(near).all() and near.dtype == np.float32


def test_a_feature_folder_resumes_only_the_same_extraction(tmp_path):
    from training.core.config import TrainingError
    from training.core.head_features import _claim

    settings = {"records": 3, "data_sha256": "ab", "seed": 0}
    _claim(tmp_path, settings)
    _claim(tmp_path, dict(settings))  # the same extraction: a resume
    with pytest.raises(TrainingError, match="data_sha256 differ"):
        _claim(tmp_path, settings | {"data_sha256": "cd"})
    (tmp_path / "features.json").unlink()
    (tmp_path / "shard-00000.npz").write_bytes(b"")
    with pytest.raises(TrainingError, match="without their settings"):
        _claim(tmp_path, settings)
