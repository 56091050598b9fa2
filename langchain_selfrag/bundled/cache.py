"""Where built and joined models are kept, and the error every bundled-model step raises."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ModelLoadError


class BundleError(ModelLoadError, RuntimeError):
    """The bundled model cannot be built here (a one-line message naming what to install)."""


def cache_dir() -> Path:
    """Where built models are kept: ``$SELFRAG_CACHE_DIR``, else ``$XDG_CACHE_HOME/langchain-selfrag``,
    else ``~/.cache/langchain-selfrag``."""
    if os.environ.get("SELFRAG_CACHE_DIR"):
        return Path(os.environ["SELFRAG_CACHE_DIR"]).expanduser()
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "langchain-selfrag"
