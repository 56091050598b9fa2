"""Quantise a GGUF with llama.cpp (``llama_model_quantize``) into the 4-bit types gguf-py cannot write."""

from __future__ import annotations

import os
from pathlib import Path

from . import ExportError

#: Written as f32 first, then quantised by llama.cpp (``llama_model_quantize``): 4-bit types whose
#: weights llama.cpp's CPU backend repacks for its fast AVX2/NEON kernels (prompts read about 1.25x
#: faster than Q8_0 and 2x faster than Q4_1 on an AVX-512 CPU, single tokens about 1.5x faster).
#: As llama.cpp does for these file types, the (tied) output/embedding matrix and ``attn_v`` keep
#: more bits: Q6_K, or Q8_0 where a row is not a multiple of 256.
LLAMA_QUANT_TYPES = ("iq4_nl", "q4_0")


def quantize_gguf(source: str | os.PathLike, out_path: str | os.PathLike, outtype: str, *, threads: int | None = None) -> Path:
    """Quantise the GGUF ``source`` to ``outtype`` (e.g. ``iq4_nl``) with llama.cpp, atomically into ``out_path``.

    Metadata (vocabulary, control tokens) is copied unchanged. A source that is already quantised
    is re-quantised (dequantised first), which adds error: quantise from f32 or f16 where possible.
    """
    import ctypes

    try:
        import llama_cpp
    except ImportError as exc:
        raise ExportError(f"writing {outtype} needs llama.cpp: pip install llama-cpp-python") from exc
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{outtype.upper()}", None)
    if ftype is None:
        raise ExportError(f"this llama.cpp cannot write {outtype!r}")
    source, out = Path(source), Path(out_path)
    if not source.is_file():
        raise ExportError(f"no GGUF file at {source}")
    out.parent.mkdir(parents=True, exist_ok=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = threads or os.cpu_count() or 1
    tmp = out.with_name(out.name + ".partial")
    with _quiet_stderr():  # llama.cpp logs every tensor
        status = llama_cpp.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params))
    if status != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise ExportError(f"llama.cpp could not quantise {source} to {outtype} (status {status})")
    os.replace(tmp, out)
    return out


class _quiet_stderr:
    """Silence file descriptor 2 (C code writes there directly) inside a ``with`` block."""

    def __enter__(self) -> None:
        self._saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
