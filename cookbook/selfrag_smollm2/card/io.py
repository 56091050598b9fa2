"""The files of a model folder: JSON reports read leniently, and the digests ``versions.json`` keeps."""

from __future__ import annotations

import json
from pathlib import Path

from training.core.run_identity import file_sha256

#: The same chain evaluation on every answerable question of the held-out articles (no closed-book run).
FULL_EVAL = "eval_full.json"


def quant_report(quant: str) -> str:
    """File name of the full held-out evaluation of the adapter built in ``quant``."""
    return f"eval_full_{quant}.json"


def read_json(folder: Path, name: str) -> dict:
    """``folder/name`` as JSON, or an empty dict when the file is absent."""
    path = Path(folder) / name
    return json.loads(path.read_text()) if path.is_file() else {}


def file_digest(path: Path) -> str:
    """The short digest a ``versions.json`` row keeps of an artefact."""
    return file_sha256(path)[:16]
