"""The per-model scheduler: concurrent callers share batched backend calls, and stay apart."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from langchain_selfrag.lm.scheduler import BatchScheduler, SchedulerError, SchedulerLimits, scheduler_for


class RecordingLM:
    """Echoes each prompt; records every backend call; can be held or made to fail."""

    has_reflection_vocab = True

    def __init__(self, delay: float = 0.05) -> None:
        self.delay = delay
        self.calls: list[tuple[str, list[str], dict]] = []
        self.active = 0
        self.max_active = 0
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()

    def _enter(self, method: str, prompts, options) -> None:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.calls.append((method, list(prompts), dict(options)))
        self.gate.wait()
        time.sleep(self.delay)
        with self._lock:
            self.active -= 1
        if any("BOOM" in p for p in prompts):
            raise RuntimeError("injected failure")

    def generate(self, prompts, **options):
        self._enter("generate", prompts, options)
        guard = options.get("guard", False)
        flags = guard if isinstance(guard, list) else [guard] * len(prompts)
        return [f"{p}|{options.get('max_new_tokens')}|{g}" for p, g in zip(prompts, flags)]

    def candidate_probs(self, prompts, candidates):
        self._enter("candidate_probs", prompts, {"candidates": tuple(candidates)})
        return [{c: float(len(p)) for c in candidates} for p in prompts]

    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        return list(range(len(text.split()) + add_bos))


def test_concurrent_requests_share_calls_and_get_their_own_results():
    lm = RecordingLM()
    sched = BatchScheduler(lm)
    lm.gate.clear()  # hold the first call so the others queue up behind it
    args = [([f"q{i}-a", f"q{i}-b"],) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(sched.generate, *a, max_new_tokens=5) for a in args]
        time.sleep(0.3)
        lm.gate.set()
        results = [f.result(timeout=10) for f in futures]
    for i, res in enumerate(results):
        assert res == [f"q{i}-a|5|False", f"q{i}-b|5|False"]
    assert len(lm.calls) < 8 and sched.merged == 8
    assert lm.max_active == 1  # one thread touches the model


def test_requests_with_different_options_are_not_merged():
    lm = RecordingLM()
    sched = BatchScheduler(lm)
    lm.gate.clear()
    with ThreadPoolExecutor(4) as pool:
        f1 = pool.submit(sched.generate, ["a"], max_new_tokens=5)
        time.sleep(0.1)
        f2 = pool.submit(sched.generate, ["b"], max_new_tokens=7)
        f3 = pool.submit(sched.candidate_probs, ["c"], ["[Relevant]"])
        f4 = pool.submit(sched.generate, ["d"], max_new_tokens=7)
        time.sleep(0.2)
        lm.gate.set()
        assert f2.result(10) == ["b|7|False"] and f4.result(10) == ["d|7|False"]
        assert f1.result(10) == ["a|5|False"] and f3.result(10) == [{"[Relevant]": 1.0}]
    batches = [prompts for _, prompts, _ in lm.calls]
    assert ["b", "d"] in batches and ["a"] in batches and ["c"] in batches


def test_guard_flags_follow_their_prompts_when_merged():
    lm = RecordingLM()
    sched = BatchScheduler(lm)
    lm.gate.clear()
    with ThreadPoolExecutor(3) as pool:
        f0 = pool.submit(sched.generate, ["x"], max_new_tokens=1)
        time.sleep(0.1)
        f1 = pool.submit(sched.generate, ["a", "b"], max_new_tokens=2, guard=[True, False])
        f2 = pool.submit(sched.generate, ["c"], max_new_tokens=2, guard=False)
        time.sleep(0.2)
        lm.gate.set()
        assert f1.result(10) == ["a|2|True", "b|2|False"]
        assert f2.result(10) == ["c|2|False"]
        f0.result(10)
    assert ["a", "b", "c"] in [p for _, p, _ in lm.calls]


def test_a_failing_request_fails_alone():
    lm = RecordingLM()
    sched = BatchScheduler(lm)
    lm.gate.clear()
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(sched.generate, ["warm"], max_new_tokens=1)
        time.sleep(0.1)
        good = [pool.submit(sched.generate, [f"ok{i}"], max_new_tokens=1) for i in range(2)]
        bad = pool.submit(sched.generate, ["BOOM"], max_new_tokens=1)
        time.sleep(0.2)
        lm.gate.set()
        with pytest.raises(RuntimeError, match="injected"):
            bad.result(10)
        assert [g.result(10) for g in good] == [["ok0|1|False"], ["ok1|1|False"]]
        first.result(10)


def test_bounds_give_clear_errors():
    lm = RecordingLM()
    sched = BatchScheduler(lm, SchedulerLimits(max_sequences=3, max_batch_tokens=50, max_queue=2))
    with pytest.raises(SchedulerError, match="max_sequences=3"):
        sched.generate(["a", "b", "c", "d"])
    with pytest.raises(SchedulerError, match="max_batch_tokens=50"):
        sched.generate(["word " * 60])
    lm.gate.clear()
    with ThreadPoolExecutor(4) as pool:
        running = pool.submit(sched.generate, ["r"])
        time.sleep(0.1)  # the worker holds "r"; two more fill the queue
        waiting = [pool.submit(sched.generate, [f"w{i}"], max_new_tokens=i) for i in range(2)]
        time.sleep(0.1)
        with pytest.raises(SchedulerError, match="queue is full"):
            sched.generate(["one too many"])
        lm.gate.set()
        running.result(10)
        [w.result(10) for w in waiting]
    with pytest.raises(ValueError, match="max_queue"):
        SchedulerLimits(max_queue=0)


def test_merged_calls_stay_within_max_sequences():
    lm = RecordingLM()
    sched = BatchScheduler(lm, SchedulerLimits(max_sequences=4))
    lm.gate.clear()
    with ThreadPoolExecutor(7) as pool:
        first = pool.submit(sched.generate, ["x"])
        time.sleep(0.1)
        rest = [pool.submit(sched.generate, [f"p{i}", f"q{i}"]) for i in range(6)]
        time.sleep(0.2)
        lm.gate.set()
        first.result(10)
        assert [r.result(10) for r in rest] == [[f"p{i}|None|False", f"q{i}|None|False"] for i in range(6)]
    assert max(len(p) for _, p, _ in lm.calls) <= 4
    assert any(len(p) == 4 for _, p, _ in lm.calls)


def test_async_callers_are_batched_too():
    lm = RecordingLM(delay=0.1)
    sched = BatchScheduler(lm)

    async def main():
        return await asyncio.gather(*(sched.agenerate([f"a{i}"], max_new_tokens=3) for i in range(6)))

    out = asyncio.run(main())
    assert out == [[f"a{i}|3|False"] for i in range(6)]
    assert len(lm.calls) < 6


def test_one_scheduler_per_model_and_the_worker_ends_when_idle(monkeypatch):
    lm = RecordingLM(delay=0)
    sched = scheduler_for(lm)
    assert scheduler_for(lm) is sched and scheduler_for(sched) is sched
    assert scheduler_for(RecordingLM()) is not sched
    assert sched.has_reflection_vocab is True  # attributes come from the model
    monkeypatch.setattr(BatchScheduler, "idle_seconds", 0.05)
    assert sched.generate(["a"]) == ["a|None|False"]
    time.sleep(0.3)
    assert sched._worker is None
    assert sched.generate(["b"]) == ["b|None|False"]  # a new worker starts
    sched.close()
    with pytest.raises(SchedulerError, match="closed"):
        sched.generate(["c"])


class StreamingLM(RecordingLM):
    """RecordingLM whose ``generate`` passes two pieces per prompt to ``on_token`` before answering."""

    def generate(self, prompts, **options):
        callback = options.get("on_token")
        if callback is not None:
            for piece in ("a", "b"):
                for i, p in enumerate(prompts):
                    callback(i, f"{p}.{piece} ")
        return super().generate(prompts, **{k: v for k, v in options.items() if k != "on_token"})


def test_on_token_follows_its_request_when_merged_and_runs_in_the_worker():
    lm = StreamingLM()
    sched = BatchScheduler(lm)
    got: dict[str, list[tuple[int, str, str]]] = {"x": [], "y": []}

    def recorder(name):
        return lambda i, piece: got[name].append((i, piece, threading.current_thread().name))

    lm.gate.clear()
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(sched.generate, ["warm"], max_new_tokens=2)
        time.sleep(0.1)
        fx = pool.submit(sched.generate, ["x0", "x1"], max_new_tokens=2, on_token=recorder("x"))
        fn = pool.submit(sched.generate, ["n0"], max_new_tokens=2)
        fy = pool.submit(sched.generate, ["y0"], max_new_tokens=2, on_token=recorder("y"))
        time.sleep(0.2)
        lm.gate.set()
        assert fx.result(10) == ["x0|2|False", "x1|2|False"] and fy.result(10) == ["y0|2|False"]
        assert fn.result(10) == ["n0|2|False"]
        first.result(10)
    assert ["x0", "x1", "n0", "y0"] in [p for _, p, _ in lm.calls]  # different callbacks still merge
    assert [(i, piece) for i, piece, _ in got["x"]] == [(0, "x0.a "), (1, "x1.a "), (0, "x0.b "), (1, "x1.b ")]
    assert [(i, piece) for i, piece, _ in got["y"]] == [(0, "y0.a "), (0, "y0.b ")]
    assert all(name.startswith("selfrag-scheduler") for _, _, name in got["x"] + got["y"])


def test_a_request_retried_alone_does_not_stream_twice():
    lm = StreamingLM()
    sched = BatchScheduler(lm)
    pieces: list[tuple[int, str]] = []
    lm.gate.clear()
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(sched.generate, ["warm"], max_new_tokens=1)
        time.sleep(0.1)
        good = pool.submit(sched.generate, ["ok"], max_new_tokens=1, on_token=lambda i, p: pieces.append((i, p)))
        bad = pool.submit(sched.generate, ["BOOM"], max_new_tokens=1)
        time.sleep(0.2)
        lm.gate.set()
        assert good.result(10) == ["ok|1|False"]
        with pytest.raises(RuntimeError, match="injected"):
            bad.result(10)
        first.result(10)
    assert [p for _, p, _ in lm.calls].count(["ok"]) == 1  # it was retried alone after the merged call failed
    assert pieces == [(0, "ok.a "), (0, "ok.b ")]


def test_a_failing_callback_fails_its_own_request():
    lm = StreamingLM(delay=0)
    sched = BatchScheduler(lm)

    def broken(i, piece):
        raise ValueError("callback failed")

    with pytest.raises(ValueError, match="callback failed"):
        sched.generate(["p"], on_token=broken)
    assert sched.generate(["q"], on_token=lambda i, p: None) == ["q|None|False"]
