"""The remote backend itself: :class:`RemoteReflectionLM` (requests, primitives, the decode loop).

See :mod:`langchain_selfrag.lm.remote` for the two modes, what is exact and what is approximate.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path

from ...prompt_layouts import PromptLayout, PromptLayoutError, layout_named
from ..base import ReflectionLMBase
from ...layout_record import path_record
from ..protocol import Generation, ReflectionLMError, TokenCallback
from ..stopping import stop_hooks
from .guard import GuardedHead, GuardMixin, sampling_fields
from .http import HttpClient, response_field
from .probe import ProbeMixin
from .text_mode import UNKNOWN_EOS, TextModeMixin
from .token_mode import TokenModeMixin
from .tokenizer import LruCache, TokenizerMixin


class RemoteReflectionLM(ProbeMixin, TokenizerMixin, TokenModeMixin, TextModeMixin, GuardMixin, ReflectionLMBase):
    """A Self-RAG model behind an OpenAI-compatible completions server (vLLM, llama-cpp-python).

    ``base_url`` is the API root, e.g. ``http://127.0.0.1:8000/v1``. ``model`` defaults to the
    first model the server lists. The model's prompt layout is read from its own record when the
    server names a file or folder on this machine (llama-cpp-python's ``--model`` path, the folder
    ``vllm serve`` was given); ``prompt_layout`` names it for a model served from elsewhere. See
    :mod:`langchain_selfrag.lm.remote` for what is exact and what is not.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 2,
        backoff: float = 0.25,
        api_key: str | None = None,
        top_k: int = 20,
        prompt_layout: str | None = None,
    ) -> None:
        base = base_url.rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ReflectionLMError(f"base_url must start with http:// or https://, not {base_url!r}")
        self.base_url = base
        root = base.removesuffix("/v1")
        self._http = HttpClient(root, timeout, max_retries, backoff, api_key)
        self._api = "/v1" if base.endswith("/v1") else ""
        self.approximate = False
        self.approximate_reason: str | None = None
        self._approximate_why: list[str] = []
        self._warned = False
        self._tok_cache: dict[tuple[str, bool], list[int]] = LruCache(4096)
        self._texts: dict[tuple[int, ...], str] = LruCache(1024)
        self._pieces: dict[int, str] = {}
        self._synthetic: dict[str, int] = {}
        self._bos: list[int] | None = None
        self._splice_specials = True
        self._stop_at_retrieval = True
        self._sampling = False
        self._top_k = top_k
        self._eos_found: set[int] | None = None
        self.reflection_ids: dict[str, int] = {}
        self.id_to_reflection: dict[int, str] = {}
        try:
            self.capabilities = self._probe(model)
            self.prompt_layout = served_layout(self.capabilities.model, prompt_layout)
            self._init_reflection_vocab()
        except BaseException:
            self._http.close()
            raise
        self._groups = self._group_ids()
        self._critique_ids = sorted(self._groups)
        if self.capabilities.token_prompts and self.reflection_ids:
            # vLLM's /detokenize keeps special tokens: decode whole sequences there (SentencePiece
            # spaces depend on their neighbours). llama-cpp-python's drops them: splice them in.
            tok, tid = next(iter(self.reflection_ids.items()))
            self._splice_specials = self._remote_decode([tid]) != tok

    @property
    def model_path(self) -> str | None:
        """The served model file when the server names one (llama-cpp-python lists its ``--model`` path), so
        that the file's abstention calibration applies as it does locally (:mod:`langchain_selfrag.abstention`);
        None for a server that names its model otherwise (vLLM's ``--served-model-name``)."""
        name = self.capabilities.model
        return name if name.lower().endswith(".gguf") else None

    # -- requests -------------------------------------------------------------------------------
    def _complete(self, body: dict, *, retries: int | None = None) -> dict:
        payload = {"model": self.capabilities.model, "temperature": 0.0, **body}
        if not self.capabilities.token_prompts:
            payload.setdefault("repeat_penalty", 1.0)  # llama-cpp-python's default is 1.1
        else:
            payload.setdefault("skip_special_tokens", False)
            payload.setdefault("spaces_between_special_tokens", False)
        if not self.capabilities.token_prompts and payload["temperature"] > 0:
            payload.setdefault("top_k", 0)  # llama-cpp-python samples from its top 40 by default
            payload.setdefault("min_p", 0.0)  # ... above 0.05 of the best
        out = self._http.request("POST", f"{self._api}/completions", payload, retries=retries)
        if not isinstance(out, dict) or not isinstance(out.get("choices"), list) or not out["choices"]:
            raise ReflectionLMError(f"malformed response from {self.base_url}/completions: {str(out)[:200]}")
        return out

    def _mark_approximate(self, why: str) -> None:
        """Set ``approximate`` and add ``why`` to ``approximate_reason`` (which the chain output and
        ``selfrag ask`` report); the warning comes once per instance."""
        if why not in self._approximate_why:
            self._approximate_why.append(why)
            self.approximate_reason = "; ".join(self._approximate_why)
        self.approximate = True
        if not self._warned:
            self._warned = True
            warnings.warn(f"RemoteReflectionLM({self.base_url}): reflection probabilities are approximate: {why}",
                          RuntimeWarning, stacklevel=3)

    # -- primitives -----------------------------------------------------------------------------
    def _first_position_probs(self, prompt_ids: list[list[int]], ids: list[int]) -> list[dict[int, float]]:
        caps = self.capabilities
        if caps.token_prompts and caps.logprob_token_ids:
            out = self._complete({"prompt": prompt_ids, "max_tokens": 1, "logprobs": 1, "logprob_token_ids": ids,
                                  "return_tokens_as_token_ids": True})
            return [self._id_probs(response_field(c, "logprobs", "top_logprobs", 0), ids, exact=True)
                    for c in self._choices(out, len(prompt_ids))]
        if not caps.token_prompts and caps.forced_logprobs:
            return [{i: math.exp(self._forced_logprob(self._context_text(p), i)) for i in ids} for p in prompt_ids]
        results = []
        for p in prompt_ids:
            prompt = p if caps.token_prompts else self._context_text(p)
            out = self._complete({"prompt": prompt, "max_tokens": 1, "logprobs": caps.max_logprobs,
                                  "return_tokens_as_token_ids": True})
            top = response_field(out, "choices", 0, "logprobs", "top_logprobs", 0)
            results.append(self._id_probs(top, ids, exact=False))
        return results

    def _continuation_logprobs(self, prompt_ids: list[list[int]], continuations: list[list[int]]) -> list[float]:
        caps = self.capabilities
        if caps.token_prompts and caps.prompt_logprobs:
            full = [p + c for p, c in zip(prompt_ids, continuations)]
            out = self._complete({"prompt": full, "max_tokens": 1, "prompt_logprobs": 0})
            return [self._prompt_tail_logprob(c, seq, len(cont))
                    for c, seq, cont in zip(self._choices(out, len(full)), full, continuations)]
        if not caps.token_prompts and caps.forced_logprobs:
            out = []
            for p, cont in zip(prompt_ids, continuations):
                text = self._context_text(p)
                if len(cont) == 1:
                    out.append(self._forced_logprob(text, cont[0]))
                    continue
                got = self._forced_sequence(text, cont) if caps.grammar else None
                if got is None:
                    raise ReflectionLMError(
                        f"{self.base_url} could not be made to generate a multi-token candidate's own tokens "
                        "(grammar plus logit_bias); use a model whose reflection tokens are single tokens"
                    )
                out.append(got)
            return out
        raise ReflectionLMError(
            f"{self.base_url} offers neither prompt_logprobs nor logit_bias forcing: multi-token candidates "
            "cannot be scored; use a model whose reflection tokens are single tokens"
        )

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 100, first_candidates: Sequence[str] = (),
                 stop_at_retrieval: bool = True, guard: bool | Sequence[bool] = False,
                 stop_at_segment: bool = False, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int | None = None, on_token: TokenCallback | None = None) -> list[Generation]:
        """See :class:`~langchain_selfrag.lm.protocol.ReflectionLM`; ``on_token`` pieces come as each
        completion is read (a completion is requested whole, not streamed from the server)."""
        self._stop_at_retrieval = stop_at_retrieval
        self._sampling = temperature > 0
        return super().generate(prompts, max_new_tokens=max_new_tokens, first_candidates=first_candidates,
                                stop_at_retrieval=stop_at_retrieval, guard=guard, stop_at_segment=stop_at_segment,
                                temperature=temperature, top_p=top_p, seed=seed, on_token=on_token)

    def _greedy(self, prompt_ids, max_new_tokens, first_seqs, stop, bans=None, *, samplers=None):
        bans = list(bans) if bans else [None] * len(prompt_ids)
        samplers = list(samplers) if samplers else [None] * len(prompt_ids)
        stops = stop_hooks(stop, len(prompt_ids))
        heads = [self._guarded_head(p, max_new_tokens, st, b, s) if b else GuardedHead()
                 for p, b, s, st in zip(prompt_ids, bans, samplers, stops)]
        todo = [i for i, h in enumerate(heads) if not h.done and len(h.ids) < max_new_tokens]
        greedy = self._greedy_tokens if self.capabilities.token_prompts else self._greedy_text
        tails: dict[int, tuple[list[int], list[float], list[dict[int, float]]]] = {}
        if todo and any(samplers):  # one request per prompt, each with its own seed
            budget = max_new_tokens - min(len(heads[i].ids) for i in todo)
            for i in todo:
                body = sampling_fields(samplers[i], len(heads[i].ids))
                tails[i] = greedy([prompt_ids[i] + heads[i].ids], budget, body)[0]
        elif todo:
            budget = max_new_tokens - min(len(heads[i].ids) for i in todo)
            tails = dict(zip(todo, greedy([prompt_ids[i] + heads[i].ids for i in todo], budget)))
        results = []
        for i, (prompt, head) in enumerate(zip(prompt_ids, heads)):
            rest = max_new_tokens - len(head.ids)
            t_ids, t_logps, t_pos = tails.get(i, ([], [], []))
            ids, logps, per_pos = head.ids + t_ids[:rest], head.logps + t_logps[:rest], head.per_pos + t_pos[:rest]
            end = next((k + 1 for k in range(len(ids)) if stops[i](ids[: k + 1])), len(ids))
            first = self._continuation_logprobs([prompt] * len(first_seqs), first_seqs) if first_seqs else []
            results.append((ids[:end], float(sum(logps[:end])), per_pos[:end], first, head.guarded))
        return results

    def _eos_ids(self) -> Sequence[int]:
        return [] if self.capabilities.token_prompts else [UNKNOWN_EOS]

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def __repr__(self) -> str:
        caps = self.capabilities
        return f"RemoteReflectionLM({self.base_url!r}, model={caps.model!r}, mode={caps.mode})"


def served_layout(served: str, named: str | None) -> PromptLayout:
    """The prompt layout of the served model: its record when ``served`` is a file or folder here, else ``named``
    (None: the paper's). A record and a different ``named`` layout raise :class:`PromptLayoutError`."""
    record = path_record(served) if served and Path(served).exists() else None
    if record is not None and named is not None and layout_named(record).name != layout_named(named).name:
        raise PromptLayoutError(f"{served} records the prompt layout {record!r}, not {named!r}: leave prompt_layout out")
    return layout_named(record if record is not None else named)
