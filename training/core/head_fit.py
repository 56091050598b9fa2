"""Fit output rows to a frozen base's hidden states: the next-token loss over the whole vocabulary,
with every row but the fitted ones fixed, is convex in the fitted rows; L-BFGS finds its minimum.

Pure functions of :class:`~training.core.head_features.HeadFeatures` arrays (torch for the optimiser).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from langchain_selfrag import tokens as T

from .head_features import HeadFeatures


def _tensors(features: HeadFeatures):
    import torch

    return (torch.from_numpy(features.hidden).double(), torch.from_numpy(features.lse_fixed).double(),
            torch.from_numpy(features.target.astype(np.int64)), torch.from_numpy(features.target_logit).double(),
            torch.from_numpy(features.weight).double())


def _position_losses(rows, hidden, lse_fixed, target, target_logit):
    """Next-token loss at each position: log-sum-exp of all logits minus the target's."""
    import torch

    logits = hidden @ rows.T  # (n, k)
    lse_all = torch.logaddexp(lse_fixed, torch.logsumexp(logits, dim=1))
    fitted_target = target >= 0
    score = torch.where(fitted_target, logits.gather(1, target.clamp(min=0)[:, None])[:, 0], target_logit)
    return lse_all - score


def head_loss(features: HeadFeatures, rows: np.ndarray) -> float:
    """Weighted mean next-token loss of ``rows`` on ``features``."""
    import torch

    hidden, lse, target, tlogit, weight = _tensors(features)
    losses = _position_losses(torch.from_numpy(rows).double(), hidden, lse, target, tlogit)
    return float((losses * weight).sum() / weight.sum())


def fit_rows(features: HeadFeatures, init: np.ndarray, *, l2: float, max_iter: int = 200) -> np.ndarray:
    """The rows minimising the weighted mean loss plus ``l2`` times the squared distance from ``init``
    (the untrained rows: the prior is the model before fitting)."""
    import torch

    hidden, lse, target, tlogit, weight = _tensors(features)
    start = torch.from_numpy(np.asarray(init, dtype=np.float64))
    rows = start.clone().requires_grad_(True)
    total = weight.sum()
    opt = torch.optim.LBFGS([rows], lr=1.0, max_iter=max_iter, history_size=20, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-9, tolerance_change=1e-12)

    def closure():
        opt.zero_grad()
        loss = (_position_losses(rows, hidden, lse, target, tlogit) * weight).sum() / total
        loss = loss + l2 * ((rows - start) ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    out = rows.detach().numpy().astype(np.float32)
    if not np.isfinite(out).all():
        raise ValueError("the fit of the reflection rows diverged (non-finite rows)")
    return out


def _auc(positive: np.ndarray, score: np.ndarray) -> float | None:
    """:func:`~training.core.metrics.roc_auc` of ``score`` for the ``positive`` positions; None without both."""
    from .metrics import roc_auc

    return roc_auc(score, positive) if positive.any() and not positive.all() else None


def heldout_report(features: HeadFeatures, rows: np.ndarray, names: Sequence[str]) -> dict:
    """Losses (at every position, and at the positions whose next token is a fitted one: the
    reflection tokens and end of sequence), and per reflection group how often the right token wins
    within its group, how often it is written (its probability over the whole vocabulary above one
    half) and, for the group's first token (``[No Retrieval]``, ``[Irrelevant]``, ``[Fully supported]``) against the
    rest, the AUC of its share of the group; and how often some fitted row is written where the next
    token is an ordinary one."""
    import torch

    hidden, lse, target, tlogit, weight = _tensors(features)
    r = torch.from_numpy(rows).double()
    with torch.no_grad():
        logits = hidden @ r.T
        lse_all = torch.logaddexp(lse, torch.logsumexp(logits, dim=1))
        probs = torch.exp(logits - lse_all[:, None]).numpy()
        losses = (_position_losses(r, hidden, lse, target, tlogit) * weight).numpy()
    loss = float(losses.sum() / features.weight.sum())
    on_fitted = features.target >= 0
    fitted_loss = float(losses[on_fitted].sum() / features.weight[on_fitted].sum()) if on_fitted.any() else None
    col = {name: k for k, name in enumerate(names)}
    groups = {}
    for kind, members in T.GROUPS.items():
        cols = [col[m] for m in members if m in col]
        at = np.isin(features.target, cols)
        if not at.any():
            continue
        within = np.asarray(cols)[probs[at][:, cols].argmax(1)] == features.target[at]
        written = probs[at, features.target[at]] > 0.5
        share = probs[at][:, cols[0]] / probs[at][:, cols].sum(1)
        auc = _auc(features.target[at] == cols[0], share) if kind is not T.Kind.ISUSE else None
        groups[kind.value] = {"n": int(at.sum()), "right_in_group": round(float(within.mean()), 4),
                              "written": round(float(written.mean()), 4),
                              "auc_first": None if auc is None else round(auc, 4)}
    ordinary = features.target < 0
    false_fire = probs[ordinary].max(1) > 0.5 if ordinary.any() else np.zeros(0, bool)
    return {"loss": loss, "fitted_loss": fitted_loss, "groups": groups, "ordinary_positions": int(ordinary.sum()),
            "fitted_row_written_at_ordinary": round(float(false_fire.mean()) if false_fire.size else 0.0, 5)}
