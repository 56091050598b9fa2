"""Every benchmark that writes a results file runs as the command that file records
(``python benchmarks/NAME.py ...``, from the checkout's root, with nothing on PYTHONPATH)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# each script starts in a subprocess (about 2 s each): not part of the floors run
pytestmark = pytest.mark.slow

RECORDING = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if "Run(" in p.read_text(encoding="utf-8"))


def test_the_recording_benchmarks_are_found():
    assert {"judge_heldout.py", "trust_suite.py"} <= {p.name for p in RECORDING}


@pytest.mark.parametrize("script", RECORDING, ids=lambda p: p.stem)
def test_runs_as_its_recorded_command(script: Path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(script.relative_to(ROOT)), "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
