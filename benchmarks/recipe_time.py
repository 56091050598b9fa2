"""How long one step of a training recipe takes on this machine: runs a command, records its wall time.

For the stages whose time no training record holds (a recipe's data build, for example):

    python benchmarks/recipe_time.py --json benchmarks/results/recipe_time_qwen15_data.json -- \\
        env RUN=runs/qwen bash cookbook/selfrag_qwen/build_data.sh

The command's output goes to this process's stderr; a failing command writes no results file.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.record import Run  # noqa: E402


def timed(command: list[str]) -> tuple[int, float]:
    """``(exit code, seconds)`` of ``command``, its output sent to stderr."""
    start = time.perf_counter()
    code = subprocess.run(command, stdout=2).returncode  # file descriptor 2: the process's stderr
    return code, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="the results file (benchmarks/record.py)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to time")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command to time after --")
    run = Run("recipe_time")
    code, seconds = timed(command)
    if code != 0:
        print(f"{shlex.join(command)} failed (exit {code}): no results written", file=sys.stderr)
        return code
    run.write(args.json, {"command": shlex.join(command)}, {"seconds": round(seconds, 1)})
    print(f"{seconds:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
