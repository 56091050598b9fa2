"""Trainer callbacks (loss and reward curves, a wall-clock budget) and the curve plots they write."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def time_budget_callback(minutes: float):
    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        """Stops training (and saves) once ``minutes`` of wall-clock time have passed."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.time()

        def on_step_end(self, args, state, control, **kwargs):
            if time.time() - self.start > minutes * 60:
                control.should_training_stop = True
                control.should_save = True
            return control

    return TimeBudget()


#: In each checkpoint folder: the training seconds up to that checkpoint, earlier runs' included.
ELAPSED_FILE = "selfrag_elapsed.json"


def checkpoint_seconds(checkpoint: str | os.PathLike | None) -> float:
    """Training seconds a checkpoint recorded (:func:`elapsed_callback`; 0 for none or an older one)."""
    if not checkpoint:
        return 0.0
    try:
        return float(json.loads((Path(checkpoint) / ELAPSED_FILE).read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def elapsed_callback(earlier: float = 0.0):
    """Writes :data:`ELAPSED_FILE` into each checkpoint: ``earlier`` plus this run's seconds so far, so that
    a run resumed from the checkpoint reports its whole training time."""
    from transformers import TrainerCallback

    class ElapsedSeconds(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.time()

        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                seconds = round(earlier + time.time() - self.start, 1)
                (folder / ELAPSED_FILE).write_text(json.dumps({"seconds": seconds, "step": state.global_step}))

    return ElapsedSeconds()


def loss_callback(output_dir: Path):
    from transformers import TrainerCallback

    class LossCurve(TrainerCallback):
        """Writes ``loss_history.json`` and ``loss_curve.png`` at every save and at the end."""

        def _write(self, state):
            write_loss_curve(state.log_history, output_dir)

        def on_save(self, args, state, control, **kwargs):
            self._write(state)

        def on_train_end(self, args, state, control, **kwargs):
            self._write(state)

    return LossCurve()


def write_loss_curve(log_history: Sequence[Mapping[str, Any]], output_dir: str | os.PathLike) -> Path | None:
    """Plot training (and eval) loss against step; returns the PNG path (None without losses)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    train = [(h["step"], h["loss"]) for h in log_history if "loss" in h and "step" in h]
    evals = [(h["step"], h["eval_loss"]) for h in log_history if "eval_loss" in h]
    (out / "loss_history.json").write_text(json.dumps({"train": train, "eval": evals}, indent=1))
    if not train:
        return None
    lines = [(train, "-", "train loss")] + ([(evals, "o-", "eval loss")] if evals else [])
    return plot_against_step(lines, "loss", out / "loss_curve.png")


def reward_callback(output_dir: Path):
    from transformers import TrainerCallback

    class RewardCurve(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            write_reward_curve(state.log_history, output_dir)

        def on_train_end(self, args, state, control, **kwargs):
            write_reward_curve(state.log_history, output_dir)

    return RewardCurve()


def write_reward_curve(log_history: Sequence[Mapping[str, Any]], output_dir: str | Path) -> Path | None:
    """Plot the mean reward against step (``reward_history.json``, ``reward_curve.png``)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    points = [(h["step"], h["reward"]) for h in log_history if "reward" in h and "step" in h]
    (out / "reward_history.json").write_text(json.dumps(points, indent=1))
    if not points:
        return None
    return plot_against_step([(points, "-", "mean reward (E[U])")], "reward", out / "reward_curve.png")


def plot_against_step(lines: Sequence[tuple[Sequence[tuple[float, float]], str, str]], ylabel: str, path: Path) -> Path:
    """Plot each (points, style, label) line against the training step into the PNG ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for points, style, label in lines:
        ax.plot(*zip(*points), style, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
