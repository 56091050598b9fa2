"""Real servers on 127.0.0.1 for tests: a free port, start, wait for health, stop by process group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

# LangGraph's server pins protobuf<7, which breaks transformers' SentencePiece conversion, so
# `make test` installs the `serve` extra (with `local`, no torch) in a venv of its own and names its
# interpreter here.
SERVE_PYTHON = os.path.abspath(os.environ.get("SELFRAG_SERVE_PYTHON") or sys.executable)  # no symlink resolution


def serve_has(module: str) -> bool:
    """Whether the serving interpreter can import ``module``."""
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    done = subprocess.run([SERVE_PYTHON, "-c", probe], capture_output=True, timeout=60)
    return done.returncode == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def answers(url: str, accept: Callable[[bytes], bool] = lambda body: True) -> bool:
    """Whether ``url`` answers 200 with a body that ``accept`` likes."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200 and accept(resp.read())
    except OSError:
        return False


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, then SIGKILL whatever is left of it."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; make sure no member of its group survives it
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return


@contextlib.contextmanager
def running(cmd: Sequence[str], health_url: str, log: Path, *, name: str, timeout: float = 120.0,
            accept: Callable[[bytes], bool] = lambda body: True, cwd: Path | None = None,
            env: dict[str, str] | None = None, cpus: set[int] | None = None) -> Iterator[subprocess.Popen]:
    """Start ``cmd`` in its own process group, wait until ``health_url`` answers, stop it afterwards.
    ``cpus``: the CPUs the server and its children may run on (all, by default)."""
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
    with log.open("wb") as out:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                start_new_session=True, preexec_fn=pin)
    try:
        deadline = time.monotonic() + timeout
        while not answers(health_url, accept):
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"{name} did not answer {health_url} within {timeout:g} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield proc
    finally:
        stop_group(proc)
