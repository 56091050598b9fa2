"""The graph's run-time context: the model, the retriever and the knobs (never the state).

Nodes receive it as ``runtime.context``. It may be a :class:`SelfRAGContext`, a plain dict (what a
LangGraph server passes: SelfRAGConfig fields plus optional ``model``, ``store`` or ``chroma_url``) or None;
:func:`resolve_context` turns each into a :class:`SelfRAGContext`, loading the default model and
store lazily when none is given.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, TypedDict

from ..config import SelfRAGConfig
from ..errors import ModelLoadError

log = logging.getLogger(__name__)

#: Extra context keys that are not SelfRAGConfig fields.
CONTEXT_KEYS = ("lm", "retriever", "retriever_timeout", "max_question_chars", "model",
                "chat_model", "base_url", "store",
                "chroma_url", "claim_splitter", "claim_scorer", "rewrite", "fallback_retriever")

#: What replaced the three-model keys (a separate reader writing the answers, a relevance judge), removed in 0.1.
REMOVED_KEYS = {
    "reader": "the context key 'reader' was removed in langchain-selfrag 0.1 (ReaderCriticLM is retired): the "
              "model writes its own answers; for a separate writer give the context lm=ChatReflectionLM(model, "
              "writer=...) (docs/chat-models.md)",
    "judge": "the context key 'judge' was removed in langchain-selfrag 0.1 (RelevanceJudge is retired): the "
             "model asks the IsRel question itself (langchain_selfrag.questions.ReflectionQuestions); for a chat "
             "model's judgement give the context chat_model or lm=ChatReflectionLM(model) (docs/chat-models.md)",
}


@dataclass
class SelfRAGContext:
    """What every node needs besides the state.

    lm: a reflection LM (``langchain_selfrag.lm.ReflectionLM``). retriever: a ``BaseRetriever``, a
    ``VectorStore`` or None (no retrieval possible). config: the knobs (``SelfRAGConfig``).
    retriever_timeout: seconds before a retriever call fails with ``RetrieverTimeoutError``
    (None: wait forever). max_question_chars: longer questions raise ``QuestionTooLongError``.
    claim_splitter, claim_scorer: how the ``restrain`` node (``config.rho`` set) splits an answer
    into claims and scores them (``langchain_selfrag.restraint`` ClaimSplitter / ClaimScorer);
    None: a ``SentenceSplitter`` and an ``IsSupScorer`` over ``lm``.
    rewrite, fallback_retriever: corrective retrieval (:mod:`langchain_selfrag.graph.nodes.corrective`),
    off while both are None. ``rewrite``: a LangChain chat model, LLM or Runnable that rewrites the
    question when no retrieved passage is relevant; the rewritten query goes to ``retriever``.
    ``fallback_retriever``: a retriever, vector store, tool (e.g. a web search) or callable tried
    next. ``config.max_retrieval_rounds`` bounds the rounds.
    """

    lm: Any = None
    retriever: Any = None
    config: SelfRAGConfig = field(default_factory=SelfRAGConfig)
    retriever_timeout: float | None = 60.0
    max_question_chars: int = 4000
    claim_splitter: Any = None
    claim_scorer: Any = None
    rewrite: Any = None
    fallback_retriever: Any = None

    def with_config(self, **changes: Any) -> SelfRAGContext:
        """A copy with some SelfRAGConfig fields changed (unknown names raise ConfigError)."""
        if not changes:
            return self
        return replace(self, config=SelfRAGConfig.from_mapping({**self.config.to_dict(), **changes}))


class ServerContext(TypedDict, total=False):
    """Context as JSON (LangGraph server / ``langgraph dev``): SelfRAGConfig fields plus paths.

    ``model``: reflection LM path or hub id (default: ``$SELFRAG_MODEL`` or the bundled model);
    ``chat_model``: instead of ``model``, a LangChain chat model by name (``openai:qwen``; :func:`chat_lm`)
    whose token log-probabilities give the reflection, on the server at ``base_url`` when given;
    ``store``: Chroma store folder (default: ``$SELFRAG_STORE`` or ``.selfrag/store``);
    ``chroma_url``: a Chroma server, ``http[s]://HOST[:PORT]``, instead of a folder (default:
    ``$SELFRAG_CHROMA_URL``). Give ``store`` or ``chroma_url``, not both.
    """

    mode: Literal["adaptive", "always", "never"]
    threshold: float
    k: int
    w_rel: float
    w_sup: float
    w_use: float
    hard_constraints: bool
    decoding_guard: bool
    long_form: bool
    beam_width: int
    max_segments: int
    max_new_tokens: int
    step_budget: int
    abstain_isrel: float | None
    abstain_issup: float | None
    answer_form: Literal["generated", "sentence"] | None
    closed_set: bool
    max_passage_tokens: int
    write_top: int
    rho: float
    abstain_closed_book: bool
    max_retrieval_rounds: int
    retriever_timeout: float
    max_question_chars: int
    model: str
    chat_model: str
    base_url: str
    store: str
    chroma_url: str


def split_settings(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a mapping into (SelfRAGConfig fields, context extras); unknown keys stay in the first. A key
    that was removed (:data:`REMOVED_KEYS`) raises a ValueError saying what replaced it."""
    removed = [REMOVED_KEYS[k] for k in values if k in REMOVED_KEYS]
    if removed:
        raise ValueError("; ".join(removed))
    extras = {k: v for k, v in values.items() if k in CONTEXT_KEYS}
    config = {k: v for k, v in values.items() if k not in CONTEXT_KEYS}
    return config, extras


def resolve_context(value: Any) -> SelfRAGContext:
    """A complete :class:`SelfRAGContext` from whatever the graph was given as context."""
    if isinstance(value, SelfRAGContext):
        ctx = value
    elif value is None or isinstance(value, Mapping):
        settings, extras = split_settings(dict(value or {}))
        known = {f.name for f in fields(SelfRAGContext)}
        ctx = SelfRAGContext(
            config=SelfRAGConfig.from_mapping(settings),
            **{k: v for k, v in extras.items() if k in known},
        )
        if ctx.lm is None:
            if extras.get("chat_model"):
                if extras.get("model"):
                    raise ValueError("the context's 'chat_model' replaces 'model': give one of them")
                ctx.lm = chat_lm(extras["chat_model"], extras.get("base_url"))
            else:
                ctx.lm = default_lm(extras.get("model"))
        if ctx.retriever is None:
            ctx.retriever = default_store(extras.get("store"), chroma_url=extras.get("chroma_url"))
        return _scheduled(with_model_bars(ctx))
    else:
        raise TypeError(f"graph context must be a SelfRAGContext, a dict or None, not {type(value).__name__}")
    if ctx.lm is None:
        ctx = replace(ctx, lm=default_lm(None))
    return _scheduled(with_model_bars(ctx))


def with_model_bars(ctx: SelfRAGContext) -> SelfRAGContext:
    """The context with abstention bars left at None filled from its model's calibration
    (:func:`langchain_selfrag.abstention.calibrated_config`)."""
    from ..abstention import calibrated_config

    if ctx.lm is None:
        return ctx
    config = calibrated_config(ctx.config, ctx.lm)
    return ctx if config is ctx.config else replace(ctx, config=config)


def _scheduled(ctx: SelfRAGContext) -> SelfRAGContext:
    """The context with its model behind the model's one scheduler (concurrent runs share batches)."""
    from ..lm.scheduler import BatchScheduler, scheduler_for

    if ctx.lm is None or isinstance(ctx.lm, BatchScheduler):
        return ctx
    return replace(ctx, lm=scheduler_for(ctx.lm))


def default_model_path() -> str:
    """``$SELFRAG_MODEL`` (a path, hub id or server URL), else the bundled Self-RAG model, built on
    first use. Never an untrained model: when the bundled one cannot be had, ``BundleError`` (a
    ``ModelLoadError``) says what to install; a base model (:data:`~langchain_selfrag.bundled.bases.BASES`)
    is loaded only when asked for by name or path."""
    env = os.environ.get("SELFRAG_MODEL")
    if env:
        return env
    from ..bundled import default_model_path as bundled_path

    return str(bundled_path())


def model_path(model: str | None) -> str:
    """Where ``model`` is: the default model for None; a bundled model's GGUF (built on first use) or a
    base's GGUF for their names (``selfrag-smollm2-135m``, ``qwen2.5-coder-0.5b-instruct``, …); else ``model`` itself."""
    from ..bundled import BUNDLED
    from ..bundled import default_model_path as bundled_path
    from ..bundled.bases import base_gguf_path, is_base_name

    if not model:
        return default_model_path()
    if model in BUNDLED:
        return str(bundled_path(model))
    if is_base_name(model):
        return str(base_gguf_path(model))
    return model


def _cached_until_closed(load: Callable[..., Any]) -> Callable[..., Any]:
    """``load`` cached per arguments (4 entries), loaded again when what it gave was closed since
    (``closed``: its user called ``close()``); ``.cache_clear()`` forgets them all."""
    cached = functools.lru_cache(maxsize=4)(load)

    @functools.wraps(load)
    def get(*args: Any, **kwargs: Any) -> Any:
        value = cached(*args, **kwargs)
        if getattr(value, "closed", False):
            cached.cache_clear()
            value = cached(*args, **kwargs)
        return value

    get.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return get


@_cached_until_closed
def default_lm(model: str | None = None) -> Any:
    """Load (once per path) the reflection LM at ``model`` (see :func:`model_path`), or the default model;
    one its user has closed since is loaded again."""
    from ..lm import ReflectionLMError, load_reflection_lm

    path = model_path(model)
    try:
        lm = load_reflection_lm(path)
    except (ReflectionLMError, OSError, ValueError) as exc:
        raise ModelLoadError(f"could not load model {path!r}: {exc}") from exc
    log.info("reflection LM loaded from %s", path)
    return lm


@_cached_until_closed
def chat_lm(spec: str, base_url: str | None = None) -> Any:
    """Load (once per name and server) the :class:`~langchain_selfrag.lm.chat_reflection.ChatReflectionLM`
    over the LangChain chat model ``spec`` names (``provider:model``, :func:`~langchain_selfrag.lm.transports.init_chat`),
    or over a local chat GGUF (a ``.gguf`` file or a base model's name, e.g. ``qwen2.5-coder-1.5b-instruct``,
    loaded as :func:`default_lm` loads it)."""
    from ..bundled.bases import is_base_name
    from ..lm import ChatReflectionLM, ReflectionLMError
    from ..lm.transports import init_chat

    if is_base_name(spec) or spec.endswith(".gguf"):
        if base_url:
            raise ModelLoadError(f"--base-url is for a chat model on a server; {spec} runs here")
        return ChatReflectionLM(default_lm(model_path(spec)))
    try:
        return ChatReflectionLM(init_chat(spec, base_url))
    except (ReflectionLMError, TypeError, ValueError) as exc:
        raise ModelLoadError(f"could not load chat model {spec!r}: {exc}") from exc


def default_store(store: str | None = None, *, chroma_url: str | None = None) -> Any:
    """The Chroma store the graph retrieves from when the context names no retriever.

    An explicit ``store`` folder or ``chroma_url`` wins; else ``$SELFRAG_CHROMA_URL`` (a Chroma
    server), else ``$SELFRAG_STORE`` or ``.selfrag/store`` if that folder exists (None if not).
    A server that cannot be reached or holds nothing raises StoreError / EmptyStoreError.
    """
    from ..errors import StoreError
    from ..retrieval import DEFAULT_STORE

    if store and chroma_url:
        raise StoreError("the context gives both 'store' and 'chroma_url': give one of them")
    url = chroma_url or (None if store else os.environ.get("SELFRAG_CHROMA_URL"))
    if url:
        return _open_store_cached(None, url)
    path = store or os.environ.get("SELFRAG_STORE") or DEFAULT_STORE
    if not os.path.isdir(path):
        return None
    return _open_store_cached(os.path.abspath(path), None)


@functools.lru_cache(maxsize=4)
def _open_store_cached(path: str | None, chroma_url: str | None) -> Any:
    from ..retrieval import DEFAULT_STORE, open_store

    return open_store(path or DEFAULT_STORE, chroma_url=chroma_url)
