"""The per-file time budgets of ``make test`` (tests/support/file_budgets.py, tests/file_budgets.toml)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from file_budgets import Budgets, FileTime, load_budgets, over_budget, render_budgets, report_lines

TESTS = Path(__file__).resolve().parents[1]
TABLE = TESTS / "file_budgets.toml"


def test_the_recorded_seconds_add_up_to_suite_s_at_most() -> None:
    budgets = load_budgets(TABLE)
    total = sum(budgets.seconds.values())
    assert total <= budgets.suite_s, (f"the files' recorded CPU seconds add up to {total:.0f}, over the suite's "
                                      f"{budgets.suite_s:.0f}: make a file faster before adding seconds to one")


def test_the_table_lists_test_files_and_orders_the_suite() -> None:
    from tests import conftest

    budgets = load_budgets(TABLE)
    assert all(f.endswith(".py") and Path(f).name.startswith("test_") for f in budgets.seconds)
    assert conftest.LONGEST_FIRST == budgets.longest_first()
    seconds = [budgets.seconds[f] for f in conftest.LONGEST_FIRST]
    assert seconds == sorted(seconds, reverse=True)


def test_the_table_reads_back_as_written(tmp_path: Path) -> None:
    budgets = Budgets({"integration_tests/test_a.py": 120.0, "unit_tests/test_b.py": 3.0}, tolerance=1.25,
                      slack_s=5.0, unlisted_s=15.0, suite_s=1400.0)
    path = tmp_path / "file_budgets.toml"
    path.write_text(render_budgets(budgets))
    assert path.read_text().startswith("# CPU seconds each test file took")
    assert load_budgets(path) == budgets
    assert render_budgets(load_budgets(TABLE)) == TABLE.read_text()  # the committed table is as written


def test_a_file_is_over_budget_past_tolerance_times_its_seconds_plus_slack() -> None:
    budgets = Budgets({"a.py": 100.0, "b.py": 10.0}, tolerance=1.5, slack_s=10.0, unlisted_s=20.0)
    assert budgets.allowed("a.py") == 160.0 and budgets.allowed("new.py") == 40.0
    times = {"a.py": FileTime(cpu_s=159.0, wall_s=400.0), "b.py": FileTime(cpu_s=26.0), "new.py": FileTime(cpu_s=70.0)}
    over = over_budget(times, budgets)
    assert [(o.file, o.allowed_s) for o in over] == [("new.py", 40.0), ("b.py", 25.0)]  # most over first
    # wall time is reported, never judged: a slow neighbour does not fail a file
    assert over_budget({"a.py": FileTime(cpu_s=100.0, wall_s=1e6)}, budgets) == []


def test_the_report_lists_the_slowest_and_every_file_over_budget() -> None:
    budgets = Budgets({f"f{i}.py": 50.0 for i in range(5)}, tolerance=1.0, slack_s=0.0, unlisted_s=1.0)
    times = {f"f{i}.py": FileTime(cpu_s=40.0 - i, wall_s=45.0, tests=2) for i in range(5)}
    times["tiny.py"] = FileTime(cpu_s=2.0, wall_s=2.5, tests=1)  # the smallest, and over its unlisted 1 s
    fixtures = {"bundled_gguf": FileTime(cpu_s=12.0, wall_s=13.0, tests=2)}
    lines = report_lines(times, fixtures, budgets, shown=2)
    files = [line.split()[3] for line in lines[1:-2]]
    assert files == ["f0.py", "f1.py", "tiny.py"]
    assert lines[3].endswith("OVER BUDGET") and "OVER" not in lines[1]
    assert lines[-2].split()[:3] == [f"{sum(t.cpu_s for t in times.values()):.1f}", "227.5", "all"]
    assert "session fixture bundled_gguf" in lines[-1]


PLUGIN_CONFTEST = """\
import sys
from pathlib import Path

sys.path.insert(0, {support!r})
from file_budgets import add_option, register


def pytest_addoption(parser):
    add_option(parser)


def pytest_configure(config):
    register(config, Path(__file__).with_name("file_budgets.toml"))
"""
BURN = """\
import time

import pytest


def burn(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
"""


def run_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess:
    # the plugins this venv holds would each load in every process: only xdist's
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", str(folder), "-c", str(folder / "pytest.ini"),
                           "-p", "xdist", "-p", "no:cacheprovider", "-q", *args], check=False, capture_output=True,
                          text=True, timeout=120, env=env, cwd=folder)


def test_a_real_run_judges_each_file_on_its_cpu_without_the_session_fixtures(tmp_path: Path) -> None:
    """Two workers, as ``make test`` runs: the file that burns CPU in its test fails the run, the file whose session
    fixture burns it does not (the fixture is reported on its own line); ``record`` writes what was measured."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(PLUGIN_CONFTEST.format(support=str(TESTS / "support")))
    (tmp_path / "file_budgets.toml").write_text(render_budgets(
        Budgets({"test_burns.py": 0.0, "test_fixture_burns.py": 0.0}, tolerance=1.0, slack_s=0.3, unlisted_s=0.0)))
    (tmp_path / "test_burns.py").write_text(BURN + "\n\ndef test_burns():\n    burn(0.8)\n")
    (tmp_path / "test_fixture_burns.py").write_text(
        BURN + "\n\n@pytest.fixture(scope='session')\ndef built():\n    burn(0.8)\n    yield 1\n    burn(0.4)\n"
        "\n\ndef test_uses_it(built):\n    assert built == 1\n")
    done = run_pytest(tmp_path, "-n", "2", "--file-budgets=enforce")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    over = [line for line in done.stdout.splitlines() if "OVER BUDGET" in line]
    assert len(over) == 1 and "test_burns.py" in over[0], done.stdout
    cpu = float(over[0].split()[0])
    assert 0.8 <= cpu < 5, done.stdout
    fixture = next(line for line in done.stdout.splitlines() if "session fixture built" in line)
    assert float(fixture.split()[0]) >= 1.2, done.stdout  # its setup and its teardown
    assert "test_burns.py took" in done.stdout and "fails the run" in done.stdout

    done = run_pytest(tmp_path, "-n", "0", "--file-budgets=record")
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = load_budgets(tmp_path / "file_budgets.toml")
    assert recorded.seconds["test_burns.py"] >= 1 and recorded.seconds["test_fixture_burns.py"] == 0
    assert (recorded.tolerance, recorded.slack_s) == (1.0, 0.3)
