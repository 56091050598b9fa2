"""One scheduler per loaded model: concurrent graph runs share batched model calls.

Every ``generate`` / ``candidate_probs`` call from any thread (``batch``, ``abatch``, ``ainvoke``,
a LangGraph server's workers) becomes a request in one queue. A single worker thread owns the
model: it takes the oldest request and every waiting request with the same options, as many as
the bounds allow, and runs them as one batched backend call (the llama.cpp backend decodes them
as parallel sequences, the transformers backend as one padded batch). A request that arrives
while a call runs joins the next one: batching at call boundaries, so a query's next step never
waits for more than the call in flight. No lock is held around a backend call: the worker is the
only thread that runs the model, and ``tokenize`` (a graph's prompt checks and passage fitting)
goes straight to the backend's tokenizer, without waiting for the call in flight.

A failing merged call is retried request by request, so one bad query fails alone. A caller that
counts tokens (:func:`~langchain_selfrag.lm.usage.counting_tokens`) gets its own requests counted,
whatever they were merged with.

A request's ``on_token`` callback (streamed answer text) stays out of the merge key: a merged call
gets one callback that sends each prompt's pieces to its own request's callback, with the
request's own prompt index, in the worker thread. A request retried alone after a failed merged
call does not get again the text its callback already had.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from .protocol import ReflectionLMError, guard_flags
from .usage import current_usage

__all__ = ["BatchScheduler", "SchedulerError", "SchedulerLimits", "scheduler_for", "supported_options", "unwrap"]


class SchedulerError(ReflectionLMError):
    """A request the scheduler cannot take: queue full, too many sequences or tokens, or closed."""


@dataclass(frozen=True)
class SchedulerLimits:
    """Bounds of one scheduler.

    ``max_sequences``: prompts in one batched call (a single request may not exceed it).
    ``max_batch_tokens``: prompt tokens in one batched call (likewise for a single request).
    ``max_queue``: requests waiting; one more raises :class:`SchedulerError` at once.
    """

    max_sequences: int = 64
    max_batch_tokens: int = 32768
    max_queue: int = 1024

    def __post_init__(self) -> None:
        for name in ("max_sequences", "max_batch_tokens", "max_queue"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")


@dataclass
class _Request:
    method: str
    prompts: list[str]
    options: dict[str, Any]
    guards: list[bool] | None
    tokens: int | None = None  # counted by the worker, the one thread that touches the model
    future: Future = field(default_factory=Future)
    on_token: _Relay | None = None

    @property
    def key(self) -> tuple:
        """Requests merge only when the backend call would be the same apart from the prompts."""
        return (self.method, tuple(sorted((k, _freeze(v)) for k, v in self.options.items())))


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


class _Relay:
    """A request's ``on_token``: each prompt's text is passed on once, across retries of its call.

    Every call attempt starts afresh (:meth:`restart`); text the callback already had is skipped
    (greedy decoding repeats it), so a retried request does not stream its answer twice.
    """

    def __init__(self, callback: Callable[[int, str], None], n: int) -> None:
        self.callback = callback
        self.delivered = [""] * n
        self.seen = [""] * n

    def restart(self) -> None:
        self.seen = [""] * len(self.seen)

    def __call__(self, index: int, piece: str) -> None:
        seen = self.seen[index] = self.seen[index] + piece
        done = self.delivered[index]
        if len(seen) > len(done) and seen.startswith(done):
            self.callback(index, seen[len(done) :])
            self.delivered[index] = seen


def _merged_callback(group: list[_Request]) -> Callable[[int, str], None] | None:
    """One ``on_token`` for a merged call: prompt ``i`` of the call goes to its request's relay."""
    if all(r.on_token is None for r in group):
        return None
    owners: list[tuple[_Relay | None, int]] = []
    for req in group:
        if req.on_token is not None:
            req.on_token.restart()
        owners.extend((req.on_token, j) for j in range(len(req.prompts)))

    def on_token(index: int, piece: str) -> None:
        relay, local = owners[index]
        if relay is not None:
            relay(local, piece)

    return on_token


def supported_options(fn: Callable[..., Any], options: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``options`` that ``fn`` takes (all when it takes ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return options
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return options
    return {k: v for k, v in options.items() if k in params}


def unwrap(lm: Any) -> Any:
    """The model behind a scheduler (``lm`` itself otherwise)."""
    return lm.lm if isinstance(lm, BatchScheduler) else lm


class BatchScheduler:
    """A :class:`~langchain_selfrag.lm.protocol.ReflectionLM` that batches concurrent calls to ``lm``.

    Attributes it does not define (``has_reflection_vocab``, ``context_length``, ``tokenize``, ...)
    are the wrapped model's. ``calls`` counts backend calls, ``merged`` the requests they served.
    """

    #: A worker with nothing to do for this long ends; the next request starts another.
    idle_seconds: float = 5.0

    def __init__(self, lm: Any, limits: SchedulerLimits | None = None) -> None:
        self.lm = lm
        self.limits = limits or SchedulerLimits()
        self.calls = 0
        self.merged = 0
        self._queue: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._worker: threading.Thread | None = None  # started on demand, ends when idle

    def __getattr__(self, name: str) -> Any:
        if name == "lm":  # not set yet (during unpickling or a failed __init__)
            raise AttributeError(name)
        return getattr(self.lm, name)

    def __repr__(self) -> str:
        return f"BatchScheduler({self.lm!r}, {self.limits})"

    # -- the ReflectionLM protocol ----------------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        """The model's tokenizer, called at once: it does not wait for the call the worker runs.

        Every backend's ``tokenize`` is safe beside its own model calls (the transformers backend
        guards its tokenizer with a lock of its own, held only while it tokenizes).
        """
        return self.lm.tokenize(text, add_bos=add_bos)

    def candidate_probs(self, prompts: Sequence[str], candidates: Sequence[str]) -> list[dict[str, float]]:
        """As the wrapped model's, batched with other callers' requests for the same candidates."""
        req = self._submit("candidate_probs", prompts, {"candidates": tuple(candidates)})
        return self._counted(req, req.future.result())

    def generate(self, prompts: Sequence[str], **options: Any) -> list[Any]:
        """As the wrapped model's ``generate``; ``guard`` and ``on_token`` may differ between merged requests."""
        req = self._submit("generate", prompts, options)
        return self._counted(req, req.future.result())

    async def acandidate_probs(self, prompts: Sequence[str], candidates: Sequence[str]) -> list[dict[str, float]]:
        req = self._submit("candidate_probs", prompts, {"candidates": tuple(candidates)})
        return self._counted(req, await asyncio.wrap_future(req.future))

    async def agenerate(self, prompts: Sequence[str], **options: Any) -> list[Any]:
        req = self._submit("generate", prompts, options)
        return self._counted(req, await asyncio.wrap_future(req.future))

    def _counted(self, req: _Request, results: list[Any]) -> list[Any]:
        """``results``, after adding the request's tokens to the caller's count (if one is open)."""
        usage = current_usage()
        if usage is not None:
            generated = sum(len(getattr(r, "token_ids", ())) for r in results) if req.method == "generate" else 0
            usage.add(input_tokens=self._count_tokens(req), output_tokens=generated)
        return results

    # -- queue --------------------------------------------------------------------------------------
    def submit(self, method: str, prompts: Sequence[str], options: dict[str, Any]) -> Future:
        """Queue one request; its future holds the backend's result for exactly these prompts."""
        return self._submit(method, prompts, options).future

    def _submit(self, method: str, prompts: Sequence[str], options: dict[str, Any]) -> _Request:
        prompts = list(prompts)
        options = dict(options)
        guards = (guard_flags(options.pop("guard", False), len(prompts), ReflectionLMError)
                  if method == "generate" else None)
        callback = options.pop("on_token", None)
        if options.get("temperature"):  # sampled streams depend on the prompt's index: never merge
            options["_unshared"] = object()
        req = _Request(method, prompts, options, guards,
                       on_token=_Relay(callback, len(prompts)) if callback is not None else None)
        if len(prompts) > self.limits.max_sequences:
            raise SchedulerError(
                f"{len(prompts)} prompts in one request exceed max_sequences={self.limits.max_sequences}"
            )
        if not prompts:
            req.future.set_result([])
            return req
        with self._cond:
            if self._closed:
                raise SchedulerError("the scheduler is closed")
            if len(self._queue) >= self.limits.max_queue:
                raise SchedulerError(f"the model's queue is full ({self.limits.max_queue} requests waiting)")
            self._queue.append(req)
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name=f"selfrag-scheduler-{id(self.lm):x}", daemon=True)
                self._worker.start()
            self._cond.notify()
        return req

    def _count_tokens(self, req: _Request) -> int:
        if req.tokens is None:
            req.tokens = self._tokens_of(req.prompts)
        return req.tokens

    def _tokens_of(self, prompts: Sequence[str]) -> int:
        if getattr(self.lm, "tokenize", None) is None:
            return sum(len(p) // 4 + 1 for p in prompts)
        try:
            return sum(len(self.tokenize(p, add_bos=True)) for p in prompts)
        except Exception:  # noqa: BLE001 - a tokenizer error surfaces in the backend call itself
            return sum(len(p) // 4 + 1 for p in prompts)

    def _too_big(self, req: _Request) -> SchedulerError | None:
        tokens = self._count_tokens(req)
        if tokens > self.limits.max_batch_tokens:
            return SchedulerError(
                f"{tokens} prompt tokens in one request exceed max_batch_tokens={self.limits.max_batch_tokens}"
            )
        return None

    def _take(self) -> list[_Request] | None:
        """The oldest request and the waiting ones that merge with it, within the bounds.

        Token counts are taken here, in the worker, outside the lock callers queue under.
        """
        with self._cond:
            if not self._queue and not self._closed:
                self._cond.wait(timeout=self.idle_seconds)
            if not self._queue:
                self._worker = None  # idle or closed: the next submit starts a new worker
                return None
            first = self._queue.popleft()
            waiting = [r for r in self._queue if r.key == first.key]
        if (error := self._too_big(first)) is not None:
            first.future.set_exception(error)
            return []
        group, seqs, tokens = [first], len(first.prompts), first.tokens or 0
        for req in waiting:
            if seqs + len(req.prompts) > self.limits.max_sequences:
                break
            if tokens + self._count_tokens(req) > self.limits.max_batch_tokens:
                break
            with self._cond:
                try:
                    self._queue.remove(req)
                except ValueError:  # cannot happen: only this worker takes requests out
                    continue
            group.append(req)
            seqs += len(req.prompts)
            tokens += req.tokens or 0
        return group

    # -- worker -------------------------------------------------------------------------------------
    def _run(self) -> None:
        while (group := self._take()) is not None:
            live = [r for r in group if r.future.set_running_or_notify_cancel()]
            if not live:
                continue
            try:
                results = self._call(live)
            except BaseException as exc:  # noqa: BLE001 - isolate: each request alone, each with its own outcome
                if len(live) == 1:
                    live[0].future.set_exception(exc)
                    continue
                for req in live:
                    try:
                        req.future.set_result(self._call([req]))
                    except BaseException as alone:  # noqa: BLE001
                        req.future.set_exception(alone)
                continue
            start = 0
            for req in live:
                req.future.set_result(results[start : start + len(req.prompts)])
                start += len(req.prompts)

    def _call(self, group: list[_Request]) -> list[Any]:
        prompts = [p for r in group for p in r.prompts]
        options = {k: v for k, v in group[0].options.items() if not k.startswith("_")}
        self.calls += 1
        self.merged += len(group)
        if group[0].method == "candidate_probs":
            out = self.lm.candidate_probs(prompts, list(options["candidates"]))
        else:
            guards = [g for r in group for g in (r.guards or [])]
            if any(guards):
                options["guard"] = guards if not all(guards) else True
            on_token = _merged_callback(group)
            if on_token is not None:
                options["on_token"] = on_token
            out = self.lm.generate(prompts, **supported_options(self.lm.generate, options))
        if len(out) != len(prompts):
            raise ReflectionLMError(f"the backend returned {len(out)} results for {len(prompts)} prompts")
        return list(out)

    def close(self, *, close_model: bool = False) -> None:
        """Stop the worker after the queued requests; optionally close the wrapped model too."""
        with self._cond:
            self._closed = True
            worker = self._worker
            self._cond.notify_all()
        if worker is not None and threading.current_thread() is not worker:
            worker.join(timeout=60)
        if close_model and hasattr(self.lm, "close"):
            self.lm.close()


_BY_ID: dict[int, BatchScheduler] = {}
_LOCK = threading.Lock()
_ATTR = "_selfrag_batch_scheduler"


def scheduler_for(lm: Any, limits: SchedulerLimits | None = None) -> BatchScheduler:
    """The one scheduler of ``lm`` (created on first use); a scheduler is returned as it is.

    It is kept on the model object itself, so it lives exactly as long as the model. ``limits``
    apply when the scheduler is created; later calls get the existing one.
    """
    if isinstance(lm, BatchScheduler):
        return lm
    with _LOCK:
        found = getattr(lm, _ATTR, None)
        if isinstance(found, BatchScheduler) and found.lm is lm:
            return found
        found = BatchScheduler(lm, limits)
        try:
            object.__setattr__(lm, _ATTR, found)
        except (AttributeError, TypeError):  # no room for attributes: keep it for the process's life
            kept = _BY_ID.get(id(lm))
            if kept is not None and kept.lm is lm:
                return kept
            _BY_ID[id(lm)] = found
        return found
