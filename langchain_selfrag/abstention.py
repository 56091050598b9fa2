"""Abstention bars per model: the calibration a model ships or was fitted with, else documented defaults.

The chain abstains on evidence when no retrieved passage reaches ``abstain_isrel`` or the selected
answer's IsSup is below ``abstain_issup`` (:mod:`langchain_selfrag.graph.nodes.abstain`). Where those
bars should sit depends on the model: how its IsRel and IsSup probabilities spread on relevant and
irrelevant passages. So a model carries its own :class:`AbstentionCalibration`:

* beside its file, ``<model file>.calibration.json`` (what ``selfrag calibrate`` writes);
* the bundled model's ships in its folder (``abstention_calibration.json``) and names the model file
  it was fitted for;
* a chat model asked the reflection questions (``ChatReflectionLM``) with no calibration of its own
  gets the bars shipped for chat models (:data:`CHAT_MODELS_FILE`, fitted by
  ``benchmarks/chat_model_bars.py`` on the trust suite's validation part over the chat models that run
  offline here, each checked on the test part with bars fitted without it);
* any other model with neither gets :data:`DEFAULT_BARS`: IsRel 0.5 (the model's own [Relevant] vs
  [Irrelevant] decision) and IsSup 0.25 (an answer the model judges more likely unsupported than
  supported, counting a partial support as half).

``SelfRAGConfig`` bars left at None are filled from the model's calibration when the chain's context
is built (:func:`calibrated_config`); bars set explicitly, and ``SelfRAGConfig.paper()``, are kept.
A calibration may also name the ``answer_form`` it was fitted with (the bars were chosen for answers
of that form); an ``answer_form`` left at None takes it, else :data:`DEFAULT_ANSWER_FORM`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .config import ANSWER_FORMS
from .errors import SelfRAGError

#: Bars of a model without a calibration (see the module docstring).
DEFAULT_BARS = {"abstain_isrel": 0.5, "abstain_issup": 0.25}
#: Answer form of a model whose calibration names none: the model's own words.
DEFAULT_ANSWER_FORM = "generated"
#: Bars shipped for chat models asked the reflection questions that have no calibration of their own.
CHAT_MODELS_FILE = Path(__file__).parent / "models" / "chat_models_calibration.json"
#: The model that file names: any chat model without a calibration of its own.
CHAT_MODELS_NAME = "chat models without a calibration of their own"
#: Suffix of a calibration file written beside a model file.
SIDECAR_SUFFIX = ".calibration.json"
#: The bundled model's calibration, in its folder.
BUNDLED_FILE = "abstention_calibration.json"
SCHEMA = "langchain-selfrag/abstention-calibration/1"


class CalibrationError(SelfRAGError, ValueError):
    """A calibration file that cannot be read or does not fit."""


@dataclass(frozen=True)
class AbstentionCalibration:
    """Abstention bars fitted for one model file, with what they were fitted on and what they are
    expected to give (``expected``: coverage, selective accuracy, rejection rate on the fitting set)."""

    model: str
    abstain_isrel: float
    abstain_issup: float
    rule: str = ""
    fitted_on: dict[str, Any] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)
    answer_form: str | None = None

    def __post_init__(self) -> None:
        if self.answer_form is not None and self.answer_form not in ANSWER_FORMS:
            raise CalibrationError(f"answer_form must be generated, sentence or absent, not {self.answer_form!r}")
        for name in ("abstain_isrel", "abstain_issup"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
                raise CalibrationError(f"{name} must be a number in [0, 1], not {value!r}")

    @property
    def bars(self) -> dict[str, float]:
        return {"abstain_isrel": float(self.abstain_isrel), "abstain_issup": float(self.abstain_issup)}

    def to_dict(self) -> dict[str, Any]:
        data = {"schema": SCHEMA, **asdict(self)}
        if data["answer_form"] is None:  # files of models fitted before answer forms stay as they were
            del data["answer_form"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AbstentionCalibration:
        try:
            return cls(str(data["model"]), float(data["abstain_isrel"]), float(data["abstain_issup"]),
                       str(data.get("rule", "")), dict(data.get("fitted_on") or {}), dict(data.get("expected") or {}),
                       data.get("answer_form"))
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"not an abstention calibration: {exc}") from exc

    @classmethod
    def load(cls, path: str | Path) -> AbstentionCalibration:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CalibrationError(f"cannot read the calibration {path}: {exc}") from exc
        if not isinstance(data, Mapping):
            raise CalibrationError(f"{path}: not a JSON object")
        return cls.from_dict(data)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path


def sidecar_path(model_path: str | Path) -> Path:
    """Where ``selfrag calibrate`` writes the calibration of a model file: beside it."""
    path = Path(model_path)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def model_path_of(lm: Any) -> str | None:
    """The model file (or folder / hub id) behind ``lm``, through schedulers and caches that wrap one."""
    for _ in range(4):
        path = getattr(lm, "model_path", None)
        if path:
            return str(path)
        lm = getattr(lm, "lm", None)
        if lm is None:
            return None
    return None


def calibration_for(model_path: str | Path | None) -> AbstentionCalibration | None:
    """The calibration of a model: its sidecar file, else a bundled model's when it was fitted for a
    file of that name; None without one. A sidecar fitted for another file name is an error."""
    if not model_path:
        return None
    path = Path(model_path)
    side = sidecar_path(path)
    if side.is_file():
        cal = AbstentionCalibration.load(side)
        if cal.model != path.name:
            raise CalibrationError(f"{side} was fitted for {cal.model}, not {path.name}: fit one for this model "
                                   f"(selfrag calibrate) or remove that file")
        return cal
    from .bundled import shipped_files

    for shipped in shipped_files(BUNDLED_FILE):
        cal = AbstentionCalibration.load(shipped)
        if cal.model == path.name:
            return cal
    return None


def asks_questions(lm: Any) -> bool:
    """Whether ``lm`` (through schedulers that wrap one) is a chat model asked the reflection questions."""
    return bool(getattr(lm, "asks_reflection_questions", False))


def chat_models_calibration() -> AbstentionCalibration:
    """The bars shipped for chat models without a calibration of their own (:data:`CHAT_MODELS_FILE`)."""
    return AbstentionCalibration.load(CHAT_MODELS_FILE)


def calibration_of(lm: Any) -> AbstentionCalibration | None:
    """The calibration the chain uses for ``lm``: its own (:func:`calibration_for`), else for a chat model
    asked the reflection questions the shipped chat-model bars, else None."""
    cal = calibration_for(model_path_of(lm))
    if cal is None and asks_questions(lm) and CHAT_MODELS_FILE.is_file():
        return chat_models_calibration()
    return cal


def bars_for(lm: Any) -> tuple[dict[str, float], str]:
    """``(bars, where from)`` for the model behind ``lm``: its calibration (a chat model's may be the
    shipped chat-model bars), else :data:`DEFAULT_BARS`."""
    cal = calibration_of(lm)
    if cal is not None and cal.model == CHAT_MODELS_NAME:
        return cal.bars, "bars shipped for chat models (no calibration for this model)"
    if cal is not None:
        return cal.bars, f"calibration of {cal.model}"
    return dict(DEFAULT_BARS), "defaults (no calibration for this model)"


def calibrated_config(config: Any, lm: Any) -> Any:
    """``config`` with each abstention bar left at None filled from the model's bars (:func:`calibration_of`)
    and an ``answer_form`` left at None from its calibration (else :data:`DEFAULT_ANSWER_FORM`)."""
    unset = [name for name in DEFAULT_BARS if getattr(config, name) is None]
    if not unset and config.answer_form is not None:
        return config
    try:
        cal = calibration_of(lm)
    except CalibrationError:
        if unset:  # the bars must come from it: say what is wrong
            raise
        cal = None  # bars set by hand never read it; the form falls back to the default
    bars = cal.bars if cal is not None else DEFAULT_BARS
    changes: dict[str, Any] = {name: bars[name] for name in unset}
    if config.answer_form is None:
        changes["answer_form"] = (cal.answer_form if cal is not None else None) or DEFAULT_ANSWER_FORM
    return config.with_(**changes)
