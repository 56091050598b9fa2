"""The results file a benchmark writes with ``--json PATH``: its figures plus where, when and how they were measured.

Every file holds ``benchmark``, ``date`` (UTC), ``command`` (the command line), ``machine`` (CPU model,
cores, load average at the start and at the end, platform), ``versions`` (Python and the packages
that shape the figures), ``settings`` (the parsed arguments) and ``figures``. The figures of the README and docs/
are rendered from these files (``python -m benchmarks.readme_figures``).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
ROOT = RESULTS_DIR.parents[1]

#: keys every results file carries, and those of its ``machine`` object
REQUIRED_KEYS = ("benchmark", "date", "command", "machine", "versions", "settings", "figures")
MACHINE_KEYS = ("cpu", "cores", "load_average_start", "load_average_end", "platform")

#: distributions whose versions move the figures
PACKAGES = ("langchain-selfrag", "llama-cpp-python", "langchain-core", "langgraph", "chromadb", "torch",
            "transformers", "sentence-transformers", "bm25s")


#: CPU flags that move llama.cpp's and torch's speed on a CPU (``cpu_features``)
CPU_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def cpu_features(cpuinfo: str | None = None) -> list[str]:
    """Which of :data:`CPU_FEATURES` the CPU has (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text() if cpuinfo is None else cpuinfo
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return [f for f in CPU_FEATURES if f in flags]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float]:
    """1-, 5- and 15-minute load averages (the machine's other work while the figures were taken)."""
    return [round(x, 2) for x in os.getloadavg()]


def versions() -> dict[str, str | None]:
    """Python's version and each of :data:`PACKAGES` (None when not installed)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def git_commit() -> str | None:
    """The checkout's HEAD commit (the working tree may differ from it), None outside git."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def in_repo(value: Any) -> Any:
    """A path setting inside the checkout as a repository-relative path, so that a results file does
    not depend on where the checkout was (a ``Path`` as its string); any other value as it is."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str) and os.path.isabs(value):
        try:
            return Path(value).resolve().relative_to(ROOT).as_posix()
        except ValueError:
            return value
    return value


@dataclass
class Run:
    """One benchmark run: started with the machine's load noted; :meth:`write` saves its figures."""

    benchmark: str
    started: float = field(default_factory=time.time)
    load_start: list[float] = field(default_factory=load_average)
    argv: list[str] = field(default_factory=lambda: list(sys.argv))

    def record(self, settings: dict[str, Any], figures: dict[str, Any]) -> dict[str, Any]:
        """The results object (see the module docstring)."""
        script = Path(self.argv[0])
        try:
            script = script.resolve().relative_to(ROOT)
        except ValueError:
            pass
        return {
            "benchmark": self.benchmark,
            "date": datetime.fromtimestamp(self.started, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "duration_s": round(time.time() - self.started, 1),
            "command": shlex.join(["python", str(script), *self.argv[1:]]),
            "git_commit": git_commit(),
            "machine": {
                "cpu": cpu_model(),
                "cpu_features": cpu_features(),
                "cores": os.cpu_count(),
                "load_average_start": self.load_start,
                "load_average_end": load_average(),
                "platform": platform.platform(),
            },
            "versions": versions(),
            "settings": {k: in_repo(v) for k, v in settings.items()},
            "figures": figures,
        }

    def write(self, path: str | Path, settings: dict[str, Any], figures: dict[str, Any]) -> Path:
        """Write the results object as JSON to ``path`` (folders made as needed) and return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.record(settings, figures), indent=2, ensure_ascii=False) + "\n")
        print(f"results written to {path}")
        return path


def load(path: str | Path) -> dict[str, Any]:
    """A results file, checked for :data:`REQUIRED_KEYS` and :data:`MACHINE_KEYS`; ValueError names what is missing."""
    path = Path(path)
    data = json.loads(path.read_text())
    missing = [k for k in REQUIRED_KEYS if k not in data]
    missing += [f"machine.{k}" for k in MACHINE_KEYS if k not in data.get("machine", {})]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    return data
