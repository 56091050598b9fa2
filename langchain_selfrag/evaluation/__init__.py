"""Evaluation harnesses and ``selfrag eval``.

* :mod:`.qa`: ``selfrag eval DATASET``, Self-RAG against its baselines and ablations on a QA data set;
* :mod:`.bio`: ``selfrag eval bio``, self-restraint on biographies, with claim judges;
* :mod:`.common`: what both share (errors, question selection, resumable records, the model
  cache, bootstrap, report writing);
* :mod:`.cli`: the ``selfrag eval`` command (``python -m langchain_selfrag.evaluation``).
"""

from .common.errors import DatasetError, EvalError
from .common.selection import select_examples
from .qa.data import Dataset, Example, Passage
from .qa.loaders import FORMATS, detect_format, load_corpus, load_dataset
from .qa.metrics import exact_match, f1, match, normalize_answer
from .qa.runner import EvalOptions, run_evaluation
from .qa.systems import DEFAULT_SYSTEMS, SYSTEMS, SystemSpec, resolve_systems

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
