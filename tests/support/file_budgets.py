"""Each test file's time against the budget ``tests/file_budgets.toml`` gives it.

A file's time is the CPU seconds of the process that runs its tests and of the processes it started and reaped
(servers, ``selfrag`` subprocesses), from each test's setup to its teardown. CPU time, not wall time: on a shared
two-core machine a file's wall time moves with whatever else runs (another worker, another checkout), while the
work it does moves little, so a budget on CPU time fails a file that got slower and not one that got unlucky.
Session-scoped fixtures (a model built, a store indexed once per worker) are left out of the file that happens to
ask first and reported on their own lines.

``--file-budgets=report`` (the default) prints the slowest files and those over budget; ``enforce`` also fails
the run when a file takes more than ``tolerance`` times its recorded seconds plus ``slack_s``; ``record`` writes
the measured seconds of the files that ran back into the table; ``off`` measures nothing. ``make test`` passes
``FILE_BUDGETS`` (default ``report``).
"""

from __future__ import annotations

import resource
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

MODES = ("off", "report", "enforce", "record")
#: How many of the slowest files the report lists (every file over budget is listed as well).
SHOWN = 12
#: Session fixtures that took less CPU than this are left out of the report.
FIXTURE_SHOWN_S = 0.5
_HEADER = """\
# CPU seconds each test file took under `make test` (two pytest-xdist workers on two cores, one thread each),
# written by `make test FILE_BUDGETS=record` (tests/support/file_budgets.py). A file that takes more than
# `tolerance` times its seconds plus `slack_s` is flagged after the run (`FILE_BUDGETS=enforce` fails the run); a
# file not listed is held to `unlisted_s`. The listed seconds may add up to `suite_s` at most
# (tests/unit_tests/test_file_budgets.py): seconds given to one file come from another. Lower `suite_s` as the suite
# gets faster; 15 minutes on two cores is about 1500 (two workers, less their start and the wait for the last file).
"""


def cpu_seconds() -> float:
    """CPU seconds of this process and of the children it has reaped (user and system)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@dataclass(frozen=True)
class Budgets:
    """The table: recorded CPU seconds per file (relative to ``tests/``) and how far a file may go past them."""

    seconds: dict[str, float]
    tolerance: float = 1.5
    slack_s: float = 10.0
    unlisted_s: float = 20.0
    suite_s: float = 1500.0

    def allowed(self, file: str) -> float:
        """The CPU seconds ``file`` may take before ``enforce`` fails the run."""
        return self.tolerance * self.seconds.get(file, self.unlisted_s) + self.slack_s

    def longest_first(self) -> tuple[str, ...]:
        """The listed files, most seconds first (the order ``make test`` hands files to its workers)."""
        return tuple(sorted(self.seconds, key=lambda f: (-self.seconds[f], f)))


def load_budgets(path: Path) -> Budgets:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return Budgets(seconds={k: float(v) for k, v in data["cpu_s"].items()},
                   **{k: float(v) for k, v in data.get("settings", {}).items()})


def render_budgets(budgets: Budgets) -> str:
    """The table as ``tests/file_budgets.toml`` holds it (``load_budgets`` reads it back)."""
    lines = [_HEADER, "[settings]"]
    lines += [f"{name} = {getattr(budgets, name):g}" for name in ("tolerance", "slack_s", "unlisted_s", "suite_s")]
    lines += ["", "[cpu_s]"]
    lines += [f'"{file}" = {budgets.seconds[file]:.0f}' for file in budgets.longest_first()]
    return "\n".join(lines) + "\n"


@dataclass
class FileTime:
    cpu_s: float = 0.0
    wall_s: float = 0.0
    tests: int = 0


@dataclass(frozen=True)
class Over:
    file: str
    cpu_s: float
    allowed_s: float


def over_budget(times: dict[str, FileTime], budgets: Budgets) -> list[Over]:
    """The files whose CPU seconds exceed what the table allows them, most over first."""
    over = [Over(f, t.cpu_s, budgets.allowed(f)) for f, t in times.items() if t.cpu_s > budgets.allowed(f)]
    return sorted(over, key=lambda o: o.allowed_s - o.cpu_s)


def report_lines(times: dict[str, FileTime], fixtures: dict[str, FileTime], budgets: Budgets,
                 shown: int = SHOWN) -> list[str]:
    """The slowest files and every file over budget, then the session fixtures, one line each."""
    over = {o.file for o in over_budget(times, budgets)}
    slowest = sorted(times, key=lambda f: -times[f].cpu_s)
    listed = slowest[:shown] + [f for f in slowest[shown:] if f in over]
    lines = [f"{'cpu_s':>7} {'wall_s':>7} {'allowed':>7}  file (tests)"]
    for f in listed:
        t = times[f]
        mark = "  OVER BUDGET" if f in over else ""
        lines.append(f"{t.cpu_s:7.1f} {t.wall_s:7.1f} {budgets.allowed(f):7.0f}  {f} ({t.tests}){mark}")
    lines.append(f"{sum(t.cpu_s for t in times.values()):7.1f} {sum(t.wall_s for t in times.values()):7.1f}"
                 f" {'':7}  all {len(times)} files")
    for name, t in sorted(fixtures.items(), key=lambda kv: -kv[1].cpu_s):
        if t.cpu_s >= FIXTURE_SHOWN_S:
            lines.append(f"{t.cpu_s:7.1f} {t.wall_s:7.1f} {'':7}  session fixture {name} (set up {t.tests} "
                         f"time(s): once in each worker that asks for it)")
    return lines


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].removeprefix("tests/")


@dataclass
class _Clock:
    cpu: float = field(default_factory=cpu_seconds)
    wall: float = field(default_factory=time.perf_counter)

    def lap(self) -> tuple[float, float]:
        """CPU and wall seconds since the last lap (or since the clock started)."""
        cpu, wall = cpu_seconds(), time.perf_counter()
        out = (cpu - self.cpu, wall - self.wall)
        self.cpu, self.wall = cpu, wall
        return out


class FileBudgetsPlugin:
    """Measures each test phase where it runs (a worker, or this process) and adds it up per file where the
    reports arrive (the controller, or this process)."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config, self.path = config, path
        self.mode = config.getoption("file_budgets")
        self.budgets = load_budgets(path)
        self.times: dict[str, FileTime] = {}
        self.fixtures: dict[str, FileTime] = {}
        self._clock = _Clock()
        self._held = [0.0, 0.0]  # session fixtures' seconds within the current phase, not the file's
        self._held_names: list[tuple[str, float, float]] = []
        self._in_fixture = False
        self.over: list[Over] = []

    # -- where the tests run -------------------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        if fixturedef.scope != "session" or self._in_fixture:
            yield
            return
        self._in_fixture, clock = True, _Clock()
        try:
            yield
        finally:
            self._in_fixture = False
            self._hold(fixturedef.argname, *clock.lap(), setup=True)
            # Finalizers run last-added first: this one marks the start of the fixture's own teardown
            fixturedef.addfinalizer(lambda: self._teardown_starts(fixturedef))

    def _teardown_starts(self, fixturedef) -> None:
        if not self._in_fixture:
            self._in_fixture, self._teardown_clock = True, (fixturedef, _Clock())

    def pytest_fixture_post_finalizer(self, fixturedef, request) -> None:
        started = getattr(self, "_teardown_clock", None)
        if started is not None and started[0] is fixturedef:
            self._in_fixture, self._teardown_clock = False, None
            self._hold(fixturedef.argname, *started[1].lap(), setup=False)

    def _hold(self, name: str, cpu: float, wall: float, *, setup: bool) -> None:
        self._held[0] += cpu
        self._held[1] += wall
        self._held_names.append((name, cpu, wall, setup))

    def pytest_runtest_logstart(self, nodeid, location) -> None:
        self._clock.lap()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        cpu, wall = self._clock.lap()
        report = outcome.get_result()
        # attributes of the report travel from a pytest-xdist worker to the controller with it
        report.file_cpu_s, report.file_wall_s = max(0.0, cpu - self._held[0]), max(0.0, wall - self._held[1])
        report.session_fixture_s = self._held_names
        self._held, self._held_names = [0.0, 0.0], []

    # -- where the reports arrive --------------------------------------------------------------------------------
    def pytest_runtest_logreport(self, report) -> None:
        if not hasattr(report, "file_cpu_s"):
            return
        t = self.times.setdefault(_file_of(report.nodeid), FileTime())
        t.cpu_s += report.file_cpu_s
        t.wall_s += report.file_wall_s
        t.tests += report.when == "call" or (report.when == "setup" and report.skipped)
        for name, cpu, wall, setup in report.session_fixture_s:
            f = self.fixtures.setdefault(name, FileTime())
            f.cpu_s += cpu
            f.wall_s += wall
            f.tests += setup

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput") or not self.times:
            return
        self.over = over_budget(self.times, self.budgets)
        if self.mode == "enforce" and self.over and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.mode == "record":
            seconds = {**self.budgets.seconds, **{f: round(t.cpu_s) for f, t in self.times.items()}}
            kept = {k: getattr(self.budgets, k) for k in ("tolerance", "slack_s", "unlisted_s", "suite_s")}
            self.path.write_text(render_budgets(Budgets(seconds, **kept)), encoding="utf-8")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if hasattr(self.config, "workerinput") or not self.times:
            return
        name = self.path.relative_to(self.config.rootpath) if self.path.is_relative_to(self.config.rootpath) \
            else self.path
        terminalreporter.section(f"time per test file (CPU seconds; budgets: {name})")
        for line in report_lines(self.times, self.fixtures, self.budgets):
            terminalreporter.write_line(line)
        if self.mode == "record":
            terminalreporter.write_line(f"recorded the CPU seconds of {len(self.times)} file(s) in {name}")
        for o in self.over:
            verdict = ", which fails the run" if self.mode == "enforce" else ""
            terminalreporter.write_line(f"{o.file} took {o.cpu_s:.0f} s of CPU, over the {o.allowed_s:.0f} s it may "
                                        f"take{verdict}: make it faster, or give it seconds in {name}", red=True)


def add_option(parser: pytest.Parser) -> None:
    parser.addoption("--file-budgets", choices=MODES, default="report",
                     help="each test file's CPU time against tests/file_budgets.toml: report (default), enforce "
                          "(fail the run when a file is over), record (write the measured seconds), off")


def register(config: pytest.Config, path: Path) -> None:
    if config.getoption("file_budgets") != "off":
        config.pluginmanager.register(FileBudgetsPlugin(config, path), "file-budgets")
