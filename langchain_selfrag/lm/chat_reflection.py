"""``ChatReflectionLM``: Self-RAG over any chat model, its reflection read from token probabilities.

A chat model with no Self-RAG training still knows whether a passage states an answer: asked in its own
chat layout, the probability of ``Yes`` as its reply's first token is a usable IsRel (Qwen2.5-Coder-1.5B
behind llama.cpp's server tells package-documentation questions a passage answers from near misses at AUC
0.84). Each reflection group becomes one short question (:mod:`langchain_selfrag.questions`) read the same way, and
the answer is written by the chat model with the passage in the user's turn::

    from langchain_openai import ChatOpenAI
    lm = load_reflection_lm(ChatOpenAI(model="qwen", base_url="http://127.0.0.1:8080/v1", api_key="none"))
    chain = SelfRAGChain(lm, retriever)

It is a :class:`~langchain_selfrag.lm.protocol.ReflectionLM`: the graph, the chain, ``ChatSelfRAG``,
calibration, restraint and the trust suite take it unchanged. Per ``generate`` call (the K passages of
a question): the K IsRel questions in one batch; answers written only for the ``write_top`` passages
judged most relevant (the others cannot win: a candidate without text is never chosen), then their IsSup
and IsUse questions in one batch. A generation's reflection points have position -1 (asked after the
text); its ``token_ids`` are empty (a remote model's ids are not known) and its ``cumulative_logprob`` is
the answer's mean token log-probability, so that the sequence probability of ranking is the per-token
geometric mean that Self-RAG uses (0.0 when the model gives no answer log-probabilities).
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import tokens as T
from ..prompts import PromptFormatError
from ..questions import Conversation, ReflectionQuestions, Turn, critique_turn, turn_of
from .protocol import Generation, ReflectionLMError, ReflectionPoint, TokenCallback
from .scheduler import unwrap
from .transports import BackendTransport, LangChainTransport, Written, chat_model_of, model_name_of, server_of

__all__ = ["ChatReflectionLM", "chat_model_key", "read_turn"]


def _best(probs: dict[str, float]) -> str:
    return max(probs, key=lambda tok: probs[tok])


def read_turn(prompt: str, *, critique: bool = False) -> Any:
    """:func:`~langchain_selfrag.questions.turn_of` (``critique``: :func:`~langchain_selfrag.questions.critique_turn`)
    of a prompt given to a reflection LM, a :class:`ReflectionLMError` for text that is not a Self-RAG prompt."""
    try:
        return critique_turn(prompt) if critique else turn_of(prompt)
    except PromptFormatError as exc:
        raise ReflectionLMError(f"a chat model's reflection LM takes Self-RAG prompts: {exc}") from None


def _transport(model: Any, **options: Any) -> LangChainTransport | BackendTransport:
    if isinstance(model, (LangChainTransport, BackendTransport)):
        return model
    if chat_model_of(model) is not None:
        return LangChainTransport(model, **options)
    if callable(getattr(model, "candidate_probs", None)) and callable(getattr(model, "generate", None)):
        return BackendTransport(model)
    raise TypeError(f"expected a LangChain chat model or a model of this package's backends, not {type(model).__name__}")


def chat_model_key(model: Any) -> str:
    """A file-name-safe name for a chat model: class, model name and a hash of its server
    (``ChatOpenAI-qwen-3f2a9c1d``), or ``local-<file name>`` for a model of this package's backends;
    calibration of the model asked this way is kept under it."""
    if isinstance(model, BackendTransport) or chat_model_of(model) is None and getattr(model, "model_path", None):
        return "local-" + re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(model.model_path)).name)
    base = chat_model_of(model) or model
    name = model_name_of(base) or "model"
    server = server_of(base) or ""
    digest = hashlib.sha256(server.encode("utf-8")).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{type(base).__name__}-{name}-{digest}")


class ChatReflectionLM:
    """A reflection LM whose every reflection group is a question to ``model``, and whose answers ``writer`` writes.

    ``model``: a LangChain chat model (``BaseChatModel``, or one bound with ``.bind``) that returns token
    log-probabilities, or a chat model of this package's backends (a chat GGUF on llama.cpp).
    ``writer``: another chat model that writes the answers (default: ``model``).
    ``questions``: what each group asks (:class:`~langchain_selfrag.questions.ReflectionQuestions`).
    ``write_top``: answers per ``generate`` call, for the passages judged most relevant (None: all).
    ``max_concurrency`` and ``top_logprobs`` go to a LangChain chat model's calls.
    ``calibration_dir``: where ``selfrag calibrate`` keeps this model's bars (default: the cache folder's
    ``chat-models/``); :attr:`model_path` names the model there.
    """

    generates_in_batches = True
    has_reflection_vocab = True
    #: Without a calibration of its own it takes the bars shipped for chat models (``abstention``).
    asks_reflection_questions = True

    def __init__(self, model: Any, writer: Any = None, *, questions: ReflectionQuestions | None = None,
                 write_top: int | None = 1, max_concurrency: int = 4, top_logprobs: int = 10,
                 calibration_dir: str | Path | None = None) -> None:
        if write_top is not None and int(write_top) < 1:
            raise ValueError(f"write_top must be None or >= 1, not {write_top!r}")
        options = {"max_concurrency": max_concurrency, "top_logprobs": top_logprobs}
        self.asked = _transport(model, **options)
        self.writer = self.asked if writer is None or writer is model else _transport(writer, **options)
        self.questions = questions or ReflectionQuestions()
        self.write_top = None if write_top is None else int(write_top)
        self._model = model
        self._calibration_dir = Path(calibration_dir) if calibration_dir is not None else None

    @property
    def name(self) -> str:
        """The models, as errors and reports name them."""
        same = self.writer is self.asked
        return self.asked.name if same else f"{self.asked.name} (answers by {self.writer.name})"

    @property
    def model_path(self) -> Path:
        """Where this model's calibration is found: a name for the chat model (:func:`chat_model_key`) under
        ``calibration_dir`` (no file is there until ``selfrag calibrate`` writes its bars beside it). A local
        GGUF asked this way is named apart from the file, whose own sidecar belongs to its other uses."""
        from ..bundled.cache import cache_dir

        folder = self._calibration_dir or cache_dir() / "chat-models"
        return folder / chat_model_key(self._model)

    @property
    def closed(self) -> bool:
        """A local model of this one was closed (``close()``): it cannot answer again."""
        return any(isinstance(t, BackendTransport) and getattr(unwrap(t.lm), "closed", False) for t in (self.asked, self.writer))

    def close(self) -> None:
        """Close local models (their schedulers); a LangChain chat model has nothing to close."""
        for side in {id(t): t for t in (self.asked, self.writer)}.values():
            if isinstance(side, BackendTransport):
                side.lm.close(close_model=True)

    # -- the reflection groups -------------------------------------------------------------------------
    def _ask(self, asks: Sequence[tuple[T.Kind, Conversation]]) -> list[dict[str, float]]:
        """One batch of questions; each answer as its group's reflection-token probabilities."""
        if not asks:
            return []
        words = [self.questions.words(kind) for kind, _ in asks]
        probs = self.asked.word_probs([conv for _, conv in asks], words)
        return [self.questions.tokens_of(kind, p) for (kind, _), p in zip(asks, probs)]

    def candidate_probs(self, prompts: Sequence[str], candidates: Sequence[str]) -> list[dict[str, float]]:
        """The probabilities of one reflection group's tokens after each Self-RAG prompt, each from a question."""
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, not a single string")
        kinds = {T.KIND_OF.get(c) for c in candidates}
        if len(kinds) != 1 or None in kinds or T.Kind.EVIDENCE in kinds:
            raise ReflectionLMError(f"a chat model answers one reflection group at a time, not {list(candidates)}")
        kind = kinds.pop()
        asks: list[tuple[T.Kind, Conversation]] = []
        for prompt in prompts:
            turn, answer = read_turn(prompt, critique=True)
            if kind is T.Kind.RETRIEVE:
                asks.append((kind, self.questions.ask(kind, read_turn(prompt))))
            elif kind in (T.Kind.ISREL, T.Kind.ISSUP) and turn.passage is None:
                raise ReflectionLMError(f"{kind.value} is asked about a passage: this prompt holds none")
            else:
                asks.append((kind, self.questions.ask(kind, turn, answer)))
        return [{c: p.get(c, 0.0) for c in candidates} for p in self._ask(asks)]

    # -- answers ---------------------------------------------------------------------------------------
    def _chosen(self, turns: Sequence[Turn], isrel: dict[int, dict[str, float]]) -> list[int]:
        """The prompts whose answers are written: every one without a passage, and for each question (a call
        may hold several: the scheduler merges concurrent runs) the ``write_top`` passages judged most relevant."""
        chosen = [i for i, t in enumerate(turns) if t.passage is None]
        by_question: dict[tuple[str, str], list[int]] = {}
        for i in isrel:
            by_question.setdefault((turns[i].instruction, turns[i].written), []).append(i)
        for group in by_question.values():
            ranked = sorted(group, key=lambda i: -isrel[i].get(T.RELEVANT, 0.0))
            chosen += ranked if self.write_top is None else ranked[: self.write_top]
        return sorted(chosen)

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int = 100,
        first_candidates: Sequence[str] = (),
        stop_at_retrieval: bool = True,
        guard: bool | Sequence[bool] = False,
        stop_at_segment: bool = False,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        on_token: TokenCallback | None = None,
    ) -> list[Generation]:
        """An answer to each prompt that can still win, with IsRel, IsSup and IsUse asked of the model
        (see the module docstring). ``guard``, ``stop_at_*`` and ``top_p`` do not apply to a chat model's
        whole answers."""
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, not a single string")
        if not prompts:
            return []
        unique = list(dict.fromkeys(prompts))
        if len(unique) < len(prompts):  # the same question from concurrent runs: asked once, answered to each
            at = {p: [i for i, q in enumerate(prompts) if q == p] for p in unique}
            stream = (lambda j, text: [on_token(i, text) for i in at[unique[j]]]) if on_token is not None else None
            gens = self.generate(unique, max_new_tokens=max_new_tokens, first_candidates=first_candidates,
                                 temperature=temperature, seed=seed, on_token=stream)
            by_prompt = dict(zip(unique, gens))
            return [copy.deepcopy(by_prompt[p]) for p in prompts]
        turns = [read_turn(p) for p in prompts]
        evidence = [i for i, t in enumerate(turns) if t.passage is not None]
        isrel = dict(zip(evidence, self._ask([(T.Kind.ISREL, self.questions.ask(T.Kind.ISREL, turns[i]))
                                              for i in evidence])))
        chosen = self._chosen(turns, isrel)
        written: dict[int, Written] = dict(zip(chosen, self.writer.write(
            [self.questions.answer(turns[i]) for i in chosen], max_new_tokens=max_new_tokens,
            temperature=temperature, seed=seed,
            on_text=(lambda j, text: on_token(chosen[j], text)) if on_token is not None else None)))
        said = [i for i in chosen if written[i].text]
        asks = [(T.Kind.ISSUP, i) for i in said if i in isrel] + [(T.Kind.ISUSE, i) for i in said]
        critique = self._ask([(kind, self.questions.ask(kind, turns[i], written[i].text)) for kind, i in asks])
        by_kind = {(kind, i): probs for (kind, i), probs in zip(asks, critique)}
        first_kind = {T.KIND_OF.get(c) for c in first_candidates}
        if first_candidates and first_kind != {T.Kind.ISREL}:
            first = self.candidate_probs(prompts, first_candidates)
        else:
            first = [{c: isrel.get(i, {}).get(c, 0.0) for c in first_candidates} if i in isrel else {}
                     for i in range(len(prompts))]
        return [self._generation(i, written.get(i), isrel.get(i), by_kind.get((T.Kind.ISSUP, i)),
                                 by_kind.get((T.Kind.ISUSE, i)), first[i]) for i in range(len(prompts))]

    @staticmethod
    def _generation(i: int, written: Written | None, isrel: dict[str, float] | None, issup: dict[str, float] | None,
                    isuse: dict[str, float] | None, first: dict[str, float]) -> Generation:
        points = [(T.Kind.ISREL, isrel), (T.Kind.ISSUP, issup), (T.Kind.ISUSE, isuse)]
        reflections = [ReflectionPoint(-1, _best(probs), kind, dict(probs)) for kind, probs in points if probs]
        tokens = {p.kind: p.token for p in reflections}
        answer = written.text if written is not None else ""
        text = "".join((tokens.get(T.Kind.ISREL, ""), answer, tokens.get(T.Kind.ISSUP, ""), tokens.get(T.Kind.ISUSE, "")))
        mean = written.logprob / written.n_tokens if written is not None and written.logprob is not None \
            and written.n_tokens else 0.0
        stop = written.stop_reason if written is not None else "eos"
        return Generation(text, [], mean, reflections, dict(first), stop)  # type: ignore[arg-type]
