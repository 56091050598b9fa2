"""Evaluation harness: data loaders, metrics, the compared systems, the runner and ``selfrag eval``."""

from .loaders import FORMATS, Dataset, DatasetError, Example, Passage, detect_format, load_corpus, load_dataset
from .metrics import exact_match, f1, match, normalize_answer
from .runner import EvalError, EvalOptions, run_evaluation, select_examples
from .systems import DEFAULT_SYSTEMS, SYSTEMS, SystemSpec, resolve_systems

__all__ = [
    "DEFAULT_SYSTEMS",
    "FORMATS",
    "SYSTEMS",
    "Dataset",
    "DatasetError",
    "EvalError",
    "EvalOptions",
    "Example",
    "Passage",
    "SystemSpec",
    "detect_format",
    "exact_match",
    "f1",
    "load_corpus",
    "load_dataset",
    "match",
    "normalize_answer",
    "resolve_systems",
    "run_evaluation",
    "select_examples",
]
