"""llama.cpp's default thread count: physical cores less the processes running elsewhere."""

from __future__ import annotations

import os

import pytest

from langchain_selfrag.lm.llamacpp import native
from langchain_selfrag.lm.llamacpp.native import physical_cores, running_elsewhere, threads_for

HYPERTHREADED = "processor\t: 0\nsiblings\t: 8\ncpu cores\t: 4\n\nprocessor\t: 1\nsiblings\t: 8\ncpu cores\t: 4\n"
ONE_PER_CORE = "processor\t: 0\nsiblings\t: 2\ncpu cores\t: 2\n"


def test_physical_cores_divide_the_logical_cpus_by_the_threads_per_core():
    assert physical_cores(HYPERTHREADED, logical=8) == 4
    assert physical_cores(HYPERTHREADED, logical=2) == 1  # a cpuset of two hyperthreads
    assert physical_cores(ONE_PER_CORE, logical=2) == 2
    assert physical_cores("", logical=8) == 4  # nothing said: half, llama.cpp's own default
    assert physical_cores("", logical=1) == 1


def test_running_elsewhere_leaves_this_process_out():
    assert running_elsewhere("0.50 0.40 0.30 1/120 4242\n") == 0
    assert running_elsewhere("2.10 1.40 1.30 3/120 4242\n") == 2
    assert running_elsewhere("garbled") == 0


def test_threads_leave_busy_cores_alone_and_never_drop_to_zero():
    assert threads_for(2, 0) == 2
    assert threads_for(4, 1) == 3
    assert threads_for(2, 5) == 1


def test_selfrag_threads_overrides_the_measure(monkeypatch):
    monkeypatch.setenv("SELFRAG_THREADS", "3")
    assert native.default_threads() == 3
    monkeypatch.setenv("SELFRAG_THREADS", "auto")
    monkeypatch.setattr(native, "physical_cores", lambda: 4)
    monkeypatch.setattr(native, "running_elsewhere", lambda: 1)
    assert native.default_threads() == 3


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity here")
def test_this_machine_gets_at_least_one_thread(monkeypatch):
    monkeypatch.delenv("SELFRAG_THREADS", raising=False)
    assert 1 <= native.default_threads() <= len(os.sched_getaffinity(0))
