"""benchmarks/recipe_time.py: a recipe step's wall time in a results file, none when the step fails."""

from __future__ import annotations

import json
import sys

from benchmarks.recipe_time import main


def test_a_step_s_time_is_recorded(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--json", str(out), "--", sys.executable, "-c", "import time; time.sleep(0.2)"]) == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "recipe_time" and 0.2 <= data["figures"]["seconds"] < 30
    assert "time.sleep(0.2)" in data["settings"]["command"]


def test_a_failed_step_writes_nothing(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--json", str(out), "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert not out.exists() and "failed (exit 3)" in capsys.readouterr().err
