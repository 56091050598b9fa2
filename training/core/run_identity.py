"""Which run an output folder's checkpoints belong to, so that a rerun resumes only its own run.

A rerun into the same ``--output-dir`` resumes from its last checkpoint. With another training file
or other settings that would silently continue someone else's optimizer state and step count, so
each run records what defines it (its data by content, its model and optimizer settings) and a
resume that differs is refused with the remedy. How long a run goes on (steps, epochs, minutes),
how often it saves or logs, and its threads may change between reruns.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .config import SFTRunConfig, TrainingError

IDENTITY_FILE = "run_identity.json"
#: Settings a resumed run may change.
MAY_CHANGE = frozenset({"output_dir", "epochs", "max_steps", "max_minutes", "save_steps", "logging_steps",
                        "threads", "resume", "gradient_checkpointing", "bf16"})
#: Settings compared by the content of the file they name, not by its path.
BY_CONTENT = ("train_file", "eval_file")


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks (training files and model files are large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run_identity(cfg: SFTRunConfig) -> dict[str, Any]:
    """What defines ``cfg``'s run, as JSON-ready values."""
    settings = {k: v for k, v in asdict(cfg).items() if k not in MAY_CHANGE and k not in BY_CONTENT}
    identity = json.loads(json.dumps(settings, default=str))
    identity.update({f"{k}_sha256": file_sha256(path) if (path := getattr(cfg, k)) else None for k in BY_CONTENT})
    return identity


def identity_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """The settings that differ, as ``name: saved -> current`` (a changed file shows its name only)."""
    out = []
    for name in sorted(set(saved) | set(current)):
        before, now = saved.get(name), current.get(name)
        if before != now:
            out.append(name.removesuffix("_sha256") + " (its content)" if name.endswith("_sha256")
                       else f"{name}: {before!r} -> {now!r}")
    return out


def check_resume(output_dir: Path, identity: Mapping[str, Any], checkpoint: str) -> None:
    """Refuse to resume ``checkpoint`` for another run; say so when the folder predates identities."""
    path = Path(output_dir) / IDENTITY_FILE
    if not path.is_file():
        print(f"resuming from {checkpoint} (its run recorded no identity to check)", file=sys.stderr)
        return
    differences = identity_differences(json.loads(path.read_text(encoding="utf-8")), identity)
    if differences:
        raise TrainingError(
            f"{output_dir} holds checkpoints of another run, and resuming would continue it: "
            f"{'; '.join(differences)}. Give a new --output-dir, or --no-resume to start over in this one.")
    print(f"resuming from {checkpoint}", file=sys.stderr)


def write_identity(output_dir: Path, identity: Mapping[str, Any]) -> None:
    """Record the run's identity in its output folder."""
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    (Path(output_dir) / IDENTITY_FILE).write_text(json.dumps(identity, indent=1, sort_keys=True) + "\n",
                                                  encoding="utf-8")
