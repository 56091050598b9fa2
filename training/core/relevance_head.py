""":class:`RelevanceHead`: a logistic head on a frozen chat model's hidden state at the IsRel question.

``p([Relevant]) = sigmoid(weights · h + bias)``, ``h`` the model's final hidden state at the last token
of the IsRel question (:class:`~langchain_selfrag.questions.ReflectionQuestions`). The file names the
model it was fitted on by sha256 and holds the question it was fitted with. Fitted by
:mod:`training.relevance_head`; :mod:`training.question_head` folds it into the reflection tokens' rows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HEAD_FORMAT = "selfrag-relevance-head/1"


class RelevanceHeadError(ValueError):
    """A relevance head file that cannot be used (unreadable, another format, another model)."""


@dataclass(frozen=True)
class RelevanceHead:
    """Weights and bias over a model's hidden state, the model's sha256 and name (a base's name, else
    its file's path) and the IsRel question's text (``ask``, ``system``)."""

    weights: np.ndarray
    bias: float
    model_sha256: str
    model_name: str
    ask: str
    system: str
    report: Mapping[str, Any] = field(default_factory=dict)

    def relevant(self, hidden: np.ndarray) -> np.ndarray:
        """``p([Relevant])`` of each row of ``hidden`` (shape ``(n, n_embd)``)."""
        hidden = np.asarray(hidden, dtype=np.float64)
        if hidden.ndim != 2 or hidden.shape[1] != len(self.weights):
            raise RelevanceHeadError(f"the head reads {len(self.weights)}-wide hidden states, got shape {hidden.shape}")
        return 0.5 * (1.0 + np.tanh(0.5 * (hidden @ self.weights.astype(np.float64) + self.bias)))

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        data = {"format": HEAD_FORMAT, "model_sha256": self.model_sha256, "model_name": self.model_name,
                "system": self.system, "ask": self.ask, "bias": self.bias,
                "weights": [float(w) for w in np.asarray(self.weights, dtype=np.float32)], "report": dict(self.report)}
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> RelevanceHead:
        """The head in ``path``; a :class:`RelevanceHeadError` naming the file when it is not one."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RelevanceHeadError(f"cannot read relevance head {path}: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != HEAD_FORMAT:
            raise RelevanceHeadError(f"{path} is not a relevance head (format {HEAD_FORMAT!r})")
        try:
            weights = np.asarray(data["weights"], dtype=np.float32)
            return cls(weights=weights, bias=float(data["bias"]), model_sha256=str(data["model_sha256"]),
                       model_name=str(data["model_name"]), ask=str(data["ask"]), system=str(data["system"]),
                       report=data.get("report") or {})
        except (KeyError, TypeError, ValueError) as exc:
            raise RelevanceHeadError(f"{path}: malformed relevance head ({exc})") from None
