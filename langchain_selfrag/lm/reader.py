"""``ReaderCriticLM``: Self-RAG whose answers are written by a separate reader model.

The reflection model (the *critic*) does what Self-RAG trains it for: it decides whether to retrieve,
judges each passage (IsRel), and judges the answer written from it (IsSup, Utility). A chat model
(the *reader*) writes that answer, in its own chat layout, with the passage and the question in the
user's turn: a small base reads far better there than in the Self-RAG prompt (issue 55,
``benchmarks/format_reading.py``). The critic then reads the reader's answer in the Self-RAG prompt,
teacher-forced, and its IsSup and Utility probabilities at the end of it are the answer's critique.

It is a :class:`~langchain_selfrag.lm.protocol.ReflectionLM`, so the graph, the chain, calibration and
the evaluation take it unchanged::

    critic = load_reflection_lm(model_path("selfrag-smollm2-135m"))
    reader = load_reflection_lm(model_path("qwen2.5-coder-0.5b-instruct"))
    chain = SelfRAGChain(ReaderCriticLM(critic, reader), retriever)

With ``judge`` (a :class:`~langchain_selfrag.lm.judge.RelevanceJudge`), IsRel comes from the judge, a chat
model asked whether the passage states the answer, and the critic keeps Retrieve, IsSup and Utility:
a small critic judges relevance poorly on text unlike its training data, and IsRel is what abstention
works with (issue 55).

A generation's ``cumulative_logprob`` and ``token_ids`` are the reader's (so the sequence probability
of ranking is the reader's confidence in its answer); its reflection points have position -1 (scored
after the text, as text reflections are). Each segment is the reader's whole answer (stop reason
``eos`` or ``length``): the reader does not ask for more retrieval mid-answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import tokens as T
from ..chatml import chat_safe, chatml
from .chat import ChatPrompt, ReaderTurn, split_selfrag_prompt
from .chat_questions import INSTRUCTION_FIRST_WITH_PASSAGE, ReflectionQuestions
from .judge import RelevanceJudge
from .protocol import Generation, ReflectionLMError, ReflectionPoint, TokenCallback
from .scheduler import scheduler_for, unwrap

__all__ = ["ReaderCriticLM", "ReaderPrompt", "ReaderTurn", "chat_safe", "chatml", "split_selfrag_prompt"]


@dataclass(frozen=True)
class ReaderPrompt(ChatPrompt):
    """How a turn becomes the reader's prompt: a chat layout and the words of the user's turn."""

    # the answer's request as the reader was measured with (.chat_questions)
    with_passage: str = INSTRUCTION_FIRST_WITH_PASSAGE
    without_passage: str = ReflectionQuestions.answer_without_passage

    def __call__(self, turn: ReaderTurn) -> str:
        user = self.fill(self.without_passage if turn.passage is None else self.with_passage, turn)
        return self.chat(self.system, user, chat_safe(turn.written))


def _best(probs: dict[str, float]) -> str:
    return max(probs, key=lambda tok: probs[tok])


class ReaderCriticLM:
    """A reflection LM whose answers come from ``reader`` and whose judgements come from ``critic``.

    ``critic``: a reflection LM with the reflection tokens (``has_reflection_vocab``).
    ``reader``: any LM of this package's backends (a chat model's GGUF on llama.cpp, say), prompted by
    ``reader_prompt`` (ChatML by default: Qwen2.5's layout).
    Both are called through their one scheduler (:func:`~langchain_selfrag.lm.scheduler.scheduler_for`),
    so a model that also serves elsewhere in the process is never run by two threads at once.
    """

    generates_in_batches = True

    def __init__(self, critic: Any, reader: Any, reader_prompt: ReaderPrompt | None = None,
                 judge: RelevanceJudge | None = None) -> None:
        if not getattr(critic, "has_reflection_vocab", False):
            raise ReflectionLMError("the critic of a ReaderCriticLM must be a reflection model (its vocabulary "
                                    "holds the reflection tokens)")
        if judge is not None and not isinstance(judge, RelevanceJudge):
            raise TypeError(f"judge must be a RelevanceJudge, not {type(judge).__name__}")
        self.critic, self.reader = scheduler_for(critic), scheduler_for(reader)
        self.reader_prompt = reader_prompt or ReaderPrompt()
        self.judge = judge
        self.has_reflection_vocab = True

    @property
    def model_path(self) -> Any:
        """The model whose calibration holds the abstention bars: the judge's (the IsRel bar is about its
        IsRel) when there is one, else the critic's."""
        return getattr(self.judge or self.critic, "model_path", None)

    @property
    def context_length(self) -> int | None:
        own = [getattr(m, "context_length", None) for m in (self.critic, self.reader)]
        known = [n for n in own if n]
        return min(known) if known else None

    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        return self.critic.tokenize(text, add_bos=add_bos)

    def decode(self, ids: Sequence[int]) -> str:
        return self.critic.decode(ids)

    @property
    def closed(self) -> bool:
        """A model of the pair was closed (``close()``): the pair cannot answer again."""
        models = [self.critic, self.reader] + ([self.judge.lm] if self.judge is not None else [])
        return any(getattr(unwrap(m), "closed", False) for m in models)

    def close(self) -> None:
        """Close the models (and their schedulers), each once."""
        plain_judge = self.judge is not None and self.judge.head is None
        schedulers = [self.reader, self.critic] + ([self.judge.lm] if plain_judge else [])
        for scheduler in {id(s): s for s in schedulers}.values():
            scheduler.close(close_model=True)
        if self.judge is not None and not plain_judge:
            self.judge.close()

    def candidate_probs(self, prompts: Sequence[str], candidates: Sequence[str]) -> list[dict[str, float]]:
        """The critic's probabilities; IsRel of prompts that end with a passage from the judge, when there is one."""
        if self.judge is None or set(candidates) != set(T.GROUPS[T.Kind.ISREL]):
            return self.critic.candidate_probs(prompts, candidates)
        turns = [split_selfrag_prompt(p) for p in prompts]
        evidence = [i for i, t in enumerate(turns) if t.passage is not None]
        judged = dict(zip(evidence, self.judge.isrel([turns[i] for i in evidence])))
        rest = [i for i in range(len(prompts)) if i not in judged]
        plain = dict(zip(rest, self.critic.candidate_probs([prompts[i] for i in rest], candidates) if rest else []))
        return [{c: (judged.get(i) or plain[i]).get(c, 0.0) for c in candidates} for i in range(len(prompts))]

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
        """The reader's answer to each prompt, critiqued by the critic (see the module docstring)."""
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, not a single string")
        if not prompts:
            return []
        turns = [split_selfrag_prompt(p) for p in prompts]
        extra = {"on_token": on_token} if on_token is not None else {}
        answers = self.reader.generate([self.reader_prompt(t) for t in turns], max_new_tokens=max_new_tokens,
                                       stop_at_retrieval=False, guard=guard, temperature=temperature, top_p=top_p,
                                       seed=seed, **extra)
        first = self.candidate_probs(prompts, first_candidates) if first_candidates else [{}] * len(prompts)
        isrel_group = T.GROUPS[T.Kind.ISREL]
        evidence = [i for i, t in enumerate(turns) if t.passage is not None]
        if set(first_candidates) == set(isrel_group):  # the graph asks for IsRel first: read it once
            isrel = {i: first[i] for i in evidence}
        else:
            isrel = dict(zip(evidence, self.candidate_probs([prompts[i] for i in evidence], isrel_group)
                             if evidence else []))
        heads = [prompt + (_best(isrel[i]) if i in isrel else "") + answer.answer
                 for i, (prompt, answer) in enumerate(zip(prompts, answers))]
        issup = dict(zip(evidence, self.critic.candidate_probs([heads[i] for i in evidence], T.GROUPS[T.Kind.ISSUP])
                         if evidence else []))
        ends = [head + (_best(issup[i]) if i in issup else "") for i, head in enumerate(heads)]
        isuse = self.critic.candidate_probs(ends, T.GROUPS[T.Kind.ISUSE])
        gens = []
        for i, answer in enumerate(answers):
            points = [(T.Kind.ISREL, isrel.get(i)), (T.Kind.ISSUP, issup.get(i)), (T.Kind.ISUSE, isuse[i])]
            reflections = [ReflectionPoint(-1, _best(probs), kind, dict(probs)) for kind, probs in points if probs]
            by_kind = {p.kind: p.token for p in reflections}
            text = "".join((by_kind.get(T.Kind.ISREL, ""), answer.answer, by_kind.get(T.Kind.ISSUP, ""),
                            by_kind.get(T.Kind.ISUSE, "")))
            stop = "length" if answer.stop_reason == "length" else "eos"
            gens.append(Generation(text, list(answer.token_ids), answer.cumulative_logprob, reflections,
                                   dict(first[i]), stop, answer.guarded))
        return gens
