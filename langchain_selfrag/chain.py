"""``SelfRAGChain``: Self-RAG as a drop-in LangChain Runnable over the LangGraph state machine.

>>> chain = SelfRAGChain.from_retriever(lm, vectorstore_or_retriever, k=5, mode="adaptive")
>>> out = chain.invoke("Who wrote Hamlet?")
>>> out["answer"], out["citations"], out["trace"]

Input: a string, a ``PromptValue``, or a dict with ``question`` and optional ``instruction``,
``options`` (list or label -> text dict) and ``passages`` (Documents used instead of the retriever).
Per-call knobs: ``config={"configurable": {<SelfRAGConfig field>: value}}``.

Output (the contract the evaluation harness relies on)::

    {"answer": str, "abstained": bool, "abstain_reason": str | None, "confidence": float | None,
     "retrieved": bool,
     "retrieve_probability": float | None, "passages": list[Document], "citations": list[Document],
     "trace": [{"passage": int | None, "text": str, "isrel", "issup", "isuse": float | None,
                "seq_prob": float, "score": float, "dropped": bool, "selected": bool, ...}],
     "claims": [{"text": str, "p": float, "kept": bool}], "expected_utility": float | None,
     "restraint": dict | None, "approximate": bool, "approximate_reason": str | None}

``confidence`` is the lowest IsRel x IsSup of the selected answer's evidence candidates (None for an
answer without evidence), also when the run abstained: it ranks answers for a risk-coverage curve.
``claims``, ``expected_utility`` and ``restraint`` are filled by self-restraint (``rho`` set, see
:mod:`langchain_selfrag.restraint`); without it they are ``[]``, None and None.

``approximate`` is True when the backend's reflection probabilities (``retrieve_probability`` and
the trace's critique scores) are not the model's own softmax, ``approximate_reason`` says why: a
remote server that reports only top-k log-probs, or text it cannot map back to token ids (see
:mod:`langchain_selfrag.lm.remote`). It is read from the model after the run and stays True
once the model has had to approximate; local backends are always exact.

``stream`` / ``astream`` yield addable chunks: the clean answer first, then the other fields;
critique events go out as custom callback events named ``selfrag`` (see ``astream_events``),
never into the answer. The answer streams while it is decoded when it is sure to be the final one
(a short-form answer without retrieval token by token, long-form segments as every beam agrees on
them; see :mod:`langchain_selfrag.graph.nodes`); otherwise it comes once the graph has chosen it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import fields
from typing import Any

from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.documents import Document
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import patch_config
from langchain_core.runnables.utils import AddableDict
from langgraph.errors import GraphRecursionError

from .chain_tool import chain_tool
from .config import SelfRAGConfig
from .errors import InvalidInputError, StepBudgetExceededError
from .graph import SelfRAGContext, compile_graph
from .graph.context import split_settings, with_model_bars
from .lm.protocol import approximation
from .retrieval import as_source

#: Keys a dict input may have.
INPUT_KEYS = ("question", "instruction", "options", "passages")
#: Keys of every output, in order.
OUTPUT_KEYS = ("answer", "abstained", "abstain_reason", "confidence", "retrieved", "retrieve_probability", "passages",
               "citations", "trace", "claims", "expected_utility", "restraint", "approximate", "approximate_reason")
#: Name of the custom callback events that carry critiques.
EVENT_NAME = "selfrag"
#: Graph stream events that carry answer text; they become answer chunks, not callback events.
ANSWER_EVENTS = ("token", "segment")

_CONFIG_FIELDS = {f.name for f in fields(SelfRAGConfig)}


def normalize_input(value: Any) -> dict[str, Any]:
    """The graph input for a chain input (string, PromptValue or dict); InvalidInputError otherwise."""
    if isinstance(value, str):
        return {"question": value}
    if isinstance(value, PromptValue):
        return {"question": value.to_string()}
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(INPUT_KEYS))
        if unknown:
            raise InvalidInputError(f"unknown input key(s) {', '.join(unknown)}; expected {', '.join(INPUT_KEYS)}")
        if "question" not in value:
            raise InvalidInputError("the input dict needs a 'question'")
        out = {k: value[k] for k in INPUT_KEYS if k in value and value[k] is not None}
        if "passages" in out and not isinstance(out["passages"], (list, tuple)):
            raise InvalidInputError("passages must be a list of Documents")
        if "passages" in out and not all(isinstance(d, Document) for d in out["passages"]):
            raise InvalidInputError("passages must be a list of Documents")
        return out
    raise InvalidInputError(f"input must be a question string or a dict with 'question', not {type(value).__name__}")


class SelfRAGChain(Runnable[Any, dict[str, Any]]):
    """Self-RAG inference (adaptive retrieval, critique-ranked generation, abstention) as a Runnable.

    By default it abstains when the evidence is absent (``SelfRAGConfig`` ``abstain_isrel``,
    ``abstain_issup``, ``abstain_closed_book``); ``SelfRAGConfig.paper()`` never does.
    Corrective retrieval (off unless given): ``rewrite`` (a chat model or Runnable) rewrites the
    question and retrieves again when no passage is relevant, ``fallback_retriever`` (a retriever,
    vector store or tool such as a web search) is tried next, ``max_retrieval_rounds`` rounds at
    most; see :mod:`langchain_selfrag.graph.nodes.corrective`.
    """

    def __init__(
        self,
        lm: Any,
        retriever: Any = None,
        config: SelfRAGConfig | None = None,
        *,
        retriever_timeout: float | None = 60.0,
        max_question_chars: int = 4000,
        claim_splitter: Any = None,
        claim_scorer: Any = None,
        rewrite: Any = None,
        fallback_retriever: Any = None,
    ) -> None:
        if lm is None:
            raise TypeError("SelfRAGChain needs a reflection LM (langchain_selfrag.lm.load_reflection_lm)")
        self.context = with_model_bars(SelfRAGContext(
            lm=lm, retriever=as_source(retriever), config=config or SelfRAGConfig(),
            retriever_timeout=retriever_timeout, max_question_chars=max_question_chars, claim_splitter=claim_splitter,
            claim_scorer=claim_scorer, rewrite=rewrite, fallback_retriever=as_source(fallback_retriever)))
        self.graph = compile_graph()

    @classmethod
    def from_retriever(cls, lm: Any, retriever: Any = None, **settings: Any) -> SelfRAGChain:
        """A chain over any ``BaseRetriever`` or ``VectorStore``; ``settings`` are SelfRAGConfig fields
        plus ``retriever_timeout``, ``max_question_chars``, for self-restraint (``rho``)
        ``claim_splitter`` and ``claim_scorer``, and for corrective retrieval ``rewrite`` and
        ``fallback_retriever`` (unknown names raise ConfigError)."""
        config_values, extras = split_settings(settings)
        extras = {k: v for k, v in extras.items()
                  if k in ("retriever_timeout", "max_question_chars", "claim_splitter", "claim_scorer", "rewrite",
                           "fallback_retriever")}
        return cls(lm, retriever, SelfRAGConfig.from_mapping(config_values), **extras)

    @property
    def config(self) -> SelfRAGConfig:
        return self.context.config

    @property
    def InputType(self) -> Any:  # noqa: N802 - LangChain's name
        return str | dict

    @property
    def OutputType(self) -> Any:  # noqa: N802 - LangChain's name
        return dict

    def as_tool(self, args_schema: Any = None, *, name: str | None = None, description: str | None = None,
                arg_types: dict[str, type] | None = None) -> Any:
        """The chain as a tool: one typed argument, ``question``; the model reads the answer with its sources
        (or the abstention with its reason), and the whole output is the tool's artifact
        (:mod:`langchain_selfrag.chain_tool`). ``args_schema`` or ``arg_types`` make Runnable's own tool."""
        if args_schema is not None or arg_types is not None:
            return super().as_tool(args_schema, name=name, description=description, arg_types=arg_types)
        return chain_tool(self, name or self.get_name(), description)

    # -- helpers -------------------------------------------------------------------------------
    def context_for(self, config: RunnableConfig | None) -> SelfRAGContext:
        """The context of one call: the chain's knobs with ``configurable`` SelfRAGConfig fields applied."""
        configurable = (config or {}).get("configurable") or {}
        changes = {k: v for k, v in configurable.items() if k in _CONFIG_FIELDS}
        return self.context.with_config(**changes)

    def _graph_config(self, config: RunnableConfig, run_manager: Any, ctx: SelfRAGContext) -> RunnableConfig:
        child = patch_config(config, callbacks=run_manager.get_child() if run_manager else None)
        child["recursion_limit"] = ctx.config.step_budget
        child.pop("run_name", None)
        return child

    @staticmethod
    def _finish(values: Mapping[str, Any], ctx: SelfRAGContext) -> dict[str, Any]:
        out = {key: values.get(key) for key in OUTPUT_KEYS}
        out["claims"] = list(out["claims"] or [])
        # Read after the run: the backend finds out while it answers (see the module docstring).
        reason = approximation(ctx.lm)
        out["approximate"], out["approximate_reason"] = reason is not None, reason
        return out

    @staticmethod
    def _budget_error(ctx: SelfRAGContext, exc: GraphRecursionError) -> StepBudgetExceededError:
        return StepBudgetExceededError(
            f"the Self-RAG graph needed more than step_budget={ctx.config.step_budget} steps; raise step_budget "
            f"or lower max_segments ({exc})"
        )

    # -- invoke ----------------------------------------------------------------------------------
    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        """Answer one question; see the module docstring for the output."""
        return self._call_with_config(self._invoke, input, config, **kwargs)

    def _invoke(self, input: Any, run_manager: Any, config: RunnableConfig) -> dict[str, Any]:
        state = normalize_input(input)
        ctx = self.context_for(config)
        try:
            out = self.graph.invoke(state, config=self._graph_config(config, run_manager, ctx), context=ctx)
        except GraphRecursionError as exc:
            raise self._budget_error(ctx, exc) from exc
        return self._finish(out, ctx)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        """Async :meth:`invoke` (model calls run in LangGraph's executor threads)."""
        return await self._acall_with_config(self._ainvoke, input, config, **kwargs)

    async def _ainvoke(self, input: Any, run_manager: Any, config: RunnableConfig) -> dict[str, Any]:
        state = normalize_input(input)
        ctx = self.context_for(config)
        try:
            out = await self.graph.ainvoke(state, config=self._graph_config(config, run_manager, ctx), context=ctx)
        except GraphRecursionError as exc:
            raise self._budget_error(ctx, exc) from exc
        return self._finish(out, ctx)

    # -- stream ------------------------------------------------------------------------------------
    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Chunks that add up to the :meth:`invoke` output; critiques go out as custom events."""
        yield from self._transform_stream_with_config(iter([input]), self._transform, config, **kwargs)

    def _transform(self, inputs: Iterator[Any], run_manager: Any, config: RunnableConfig) -> Iterator[dict[str, Any]]:
        for item in inputs:
            state = normalize_input(item)
            ctx = self.context_for(config)
            graph_config = self._graph_config(config, run_manager, ctx)
            final: Mapping[str, Any] = {}
            streamed = ""
            try:
                for mode, chunk in self.graph.stream(state, config=graph_config, context=ctx,
                                                     stream_mode=["custom", "values"]):
                    if mode != "custom":
                        final = chunk
                    elif (piece := _answer_piece(chunk)) is not None:
                        if piece:
                            streamed += piece
                            yield AddableDict(answer=piece)
                    else:
                        dispatch_custom_event(EVENT_NAME, chunk, config=config)
            except GraphRecursionError as exc:
                raise self._budget_error(ctx, exc) from exc
            yield from self._chunks(self._finish(final, ctx), streamed)

    async def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        """Async :meth:`stream`."""

        async def one() -> AsyncIterator[Any]:
            yield input

        async for chunk in self._atransform_stream_with_config(one(), self._atransform, config, **kwargs):
            yield chunk

    async def _atransform(self, inputs: AsyncIterator[Any], run_manager: Any, config: RunnableConfig) -> AsyncIterator[dict[str, Any]]:
        async for item in inputs:
            state = normalize_input(item)
            ctx = self.context_for(config)
            graph_config = self._graph_config(config, run_manager, ctx)
            final: Mapping[str, Any] = {}
            streamed = ""
            try:
                async for mode, chunk in self.graph.astream(state, config=graph_config, context=ctx,
                                                            stream_mode=["custom", "values"]):
                    if mode != "custom":
                        final = chunk
                    elif (piece := _answer_piece(chunk)) is not None:
                        if piece:
                            streamed += piece
                            yield AddableDict(answer=piece)
                    else:
                        await adispatch_custom_event(EVENT_NAME, chunk, config=config)
            except GraphRecursionError as exc:
                raise self._budget_error(ctx, exc) from exc
            for piece in self._chunks(self._finish(final, ctx), streamed):
                yield piece

    @staticmethod
    def _chunks(out: dict[str, Any], streamed: str = "") -> Iterator[dict[str, Any]]:
        """The rest of the answer after what was ``streamed`` (split after sentences / citations),
        then the remaining fields."""
        text = out["answer"] or ""
        if not text.startswith(streamed):
            raise RuntimeError(
                f"Self-RAG streamed {streamed!r}, which does not start the final answer {text!r}: the graph "
                "streamed text it could not be sure of (a bug; please report it)"
            )
        pieces = _split_answer(text[len(streamed) :])
        for piece in pieces or ([] if streamed else [""]):
            yield AddableDict(answer=piece)
        yield AddableDict({k: v for k, v in out.items() if k != "answer"})


def _answer_piece(event: Any) -> str | None:
    """The answer text a graph stream event carries (``token`` / ``segment``); None for other events."""
    if isinstance(event, Mapping) and event.get("event") in ANSWER_EVENTS:
        return str(event.get("text") or "")
    return None


def _split_answer(text: str) -> list[str]:
    """Pieces of the answer that concatenate back to it (split after each '. ' boundary)."""
    pieces, start = [], 0
    for i in range(len(text) - 1):
        if text[i] in ".!?]" and text[i + 1] == " ":
            pieces.append(text[start : i + 2])
            start = i + 2
    if start < len(text):
        pieces.append(text[start:])
    return pieces

