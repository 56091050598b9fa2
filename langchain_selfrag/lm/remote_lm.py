"""Reflection LM served over an OpenAI-compatible ``/v1/completions`` endpoint.

The server is probed once at start-up (``/v1/models``, a tokenize endpoint, a few one-token
completions) and one of two ways of talking to it is chosen:

* token mode (vLLM): prompts go as token ids and generated ids come back (``return_token_ids``);
  reflection-group log-probs are asked for by id (vLLM's ``logprob_token_ids`` request field,
  where the server has it) and multi-token candidates are scored from ``prompt_logprobs``. Exact.
* text mode (llama-cpp-python's server, which takes text prompts and returns text without control
  tokens): the server tokenizes a prompt exactly as ``/extras/tokenize`` does. The log-prob of a
  given id is read by forcing that id with ``logit_bias`` (the server reports raw log-probs), a
  multi-token candidate by forcing its ids under a one-string grammar. Exact as long as contexts
  built from generated ids re-tokenize to the same ids (checked; approximate otherwise).

Where neither is possible, group probabilities come from the top-k ``logprobs``: ids missing from
the top k count as 0 and the group is renormalised. Anything approximate sets ``approximate``, adds
its reason to ``approximate_reason`` (both reported in the chain output and by ``selfrag ask``) and
warns once per instance.

The decoding guard (``generate(guard=...)``) runs one token per request until the generation holds
content, the banned ids biased by -100 (``logit_bias``); the rest is one request as before.
End of sequence: token mode adds ``min_tokens=1`` (vLLM bans every end-of-sequence id with it);
text mode bans the ids of common end-of-sequence strings that the server verifiably ends on
(llama-cpp-python drops ``logit_bias`` when ``min_tokens`` is also sent), and a step that still
ends the sequence ends the generation. Log-probs stay those of the unmasked softmax where the
server reports raw log-probs (llama-cpp-python does; vLLM V1 by default). ``guarded`` counts the
steps whose chosen token scored below the best log-prob the server listed.
``stop_at_segment`` cuts the generation after the marker (the server may have generated further).

Sampling (``generate(temperature=..., top_p=..., seed=...)``) is the server's: each prompt goes in a
request of its own with ``temperature``, ``top_p`` and a seed derived from ``(seed, prompt index)``
(each guarded step with one of its own), and, in text mode, llama-cpp-python's extra samplers
switched off (``top_k=0``, ``min_p=0``). Servers differ in the order of their samplers
(llama-cpp-python cuts the top-p nucleus before applying the temperature, vLLM after), and under
sampling ``guarded`` counts the guarded steps whose token was not the best one listed (an upper
bound), and an end-of-sequence token the server does not report gets the best listed log-prob.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import tokens as T
from .base import (
    BanHook,
    Generation,
    ReflectionLMBase,
    ReflectionLMError,
    StopHook,
    TokenCallback,
    TokenSampler,
    stop_hooks,
    stream_seed,
)

#: ``logit_bias`` that makes greedy decoding pick an id (the OpenAI API's maximum).
FORCE_BIAS = 100.0
#: Stand-in id for an end-of-sequence token whose real id the server never reveals (text mode).
UNKNOWN_EOS = -1
#: End-of-sequence strings of common vocabularies, tried (and verified) to ban EOS in text mode.
EOS_STRINGS = ("</s>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<eos>", "<|end|>")


class _Lru(OrderedDict):
    """A dict that forgets its least recently written entries beyond ``size``.

    Writes hold a lock of their own: ``tokenize`` runs in callers' threads beside a model call
    (see :mod:`langchain_selfrag.lm.scheduler`), and a write is three steps.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self._lock = threading.Lock()

    def __setitem__(self, key, value) -> None:
        with self._lock:
            super().__setitem__(key, value)
            self.move_to_end(key)
            if len(self) > self.size:
                self.popitem(last=False)


class ServerRejected(ReflectionLMError):
    """The server answered a request with a client error (4xx) or refused a feature."""


@dataclass
class ServerCapabilities:
    """What the probe found the server able to do."""

    model: str
    owned_by: str = ""
    tokenize_path: str = ""
    detokenize_path: str = ""
    token_prompts: bool = False
    logprob_token_ids: bool = False
    prompt_logprobs: bool = False
    forced_logprobs: bool = False
    grammar: bool = False
    max_logprobs: int = 5

    @property
    def mode(self) -> str:
        return "token" if self.token_prompts else "text"


@dataclass
class _Head:
    """The tokens decoded one by one under the guard, before the rest goes in one request."""

    ids: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    per_pos: list[dict[int, float]] = field(default_factory=list)
    guarded: int = 0
    done: bool = False


def _sampling_fields(sampler: TokenSampler | None, step: int) -> dict[str, Any]:
    """Request fields for a sampled request starting at generated token ``step`` ({} when greedy)."""
    if sampler is None:
        return {}
    fields: dict[str, Any] = {"temperature": sampler.temperature, "top_p": sampler.top_p}
    if sampler.seed is not None:
        fields["seed"] = stream_seed(sampler.seed, step) & 0x7FFFFFFF
    return fields


def _grammar_literal(text: str) -> str:
    """A GBNF grammar accepting exactly ``text``."""
    out = []
    for ch in text:
        if ch in '"\\[]':
            out.append("\\" + ch)
        elif ch.isprintable() and ord(ch) < 0x10000:
            out.append(ch)
        else:
            out.append(f"\\U{ord(ch):08X}")
    return 'root ::= "' + "".join(out) + '"'


class _Http:
    """JSON over httpx with timeouts, retries with exponential backoff and clear errors."""

    def __init__(self, root: str, timeout: float, max_retries: int, backoff: float, api_key: str | None) -> None:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ReflectionLMError("httpx is not installed: pip install 'langchain-selfrag[server]'") from exc
        self._httpx = httpx
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.root = root
        self.client = httpx.Client(
            base_url=root, headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0))
        )
        self.max_retries = max_retries
        self.backoff = backoff

    def request(self, method: str, path: str, body: dict | None = None, *, retries: int | None = None) -> Any:
        httpx = self._httpx
        attempts = 1 + (self.max_retries if retries is None else retries)
        last = ""
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                resp = self.client.request(method, path, json=body)
            except (httpx.TransportError, OSError) as exc:
                last = f"cannot reach {self.root}{path}: {type(exc).__name__}: {exc}"
                continue
            if resp.status_code >= 500:
                last = f"{self.root}{path} answered HTTP {resp.status_code}: {resp.text[:300]}"
                continue
            if resp.status_code >= 400:
                raise ServerRejected(f"{self.root}{path} rejected the request (HTTP {resp.status_code}): {resp.text[:300]}")
            try:
                return resp.json()
            except ValueError as exc:
                raise ReflectionLMError(f"malformed response from {self.root}{path}: not JSON: {resp.text[:200]!r}") from exc
        raise ReflectionLMError(f"{last} (after {attempts} attempt{'s' if attempts > 1 else ''})")

    def close(self) -> None:
        self.client.close()


def _field(obj: Any, *keys: Any) -> Any:
    """``obj[k1][k2]...`` or a ReflectionLMError naming the missing field."""
    for key in keys:
        try:
            obj = obj[key]
        except (KeyError, IndexError, TypeError):
            raise ReflectionLMError(f"malformed response: missing field {'.'.join(map(str, keys))}") from None
    return obj


class RemoteReflectionLM(ReflectionLMBase):
    """A Self-RAG model behind an OpenAI-compatible completions server (vLLM, llama-cpp-python).

    ``base_url`` is the API root, e.g. ``http://127.0.0.1:8000/v1``. ``model`` defaults to the
    first model the server lists. See the module docstring for what is exact and what is not.
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
    ) -> None:
        base = base_url.rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ReflectionLMError(f"base_url must start with http:// or https://, not {base_url!r}")
        self.base_url = base
        root = base.removesuffix("/v1")
        self._http = _Http(root, timeout, max_retries, backoff, api_key)
        self._api = "/v1" if base.endswith("/v1") else ""
        self.approximate = False
        self.approximate_reason: str | None = None
        self._approximate_why: list[str] = []
        self._warned = False
        self._tok_cache: dict[tuple[str, bool], list[int]] = _Lru(4096)
        self._texts: dict[tuple[int, ...], str] = _Lru(1024)
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

    # -- probing ------------------------------------------------------------------------------
    def _probe(self, model: str | None) -> ServerCapabilities:
        listing = self._http.request("GET", f"{self._api}/models")
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list) or not data or not all(isinstance(m, dict) and "id" in m for m in data):
            raise ReflectionLMError(f"malformed response from {self.base_url}/models: {str(listing)[:200]}")
        ids = [m["id"] for m in data]
        if model is not None and model not in ids:
            raise ReflectionLMError(f"model {model!r} is not served by {self.base_url} (it serves {ids})")
        chosen = model or ids[0]
        caps = ServerCapabilities(model=chosen, owned_by=str(data[ids.index(chosen)].get("owned_by", "")))
        self.capabilities = caps
        self._find_tokenizer(caps)
        hello = self.tokenize("Hello world", add_bos=True)
        asked = sorted(set(self.tokenize("Hello world", add_bos=False)))[:2]
        try:
            out = self._complete({"prompt": hello, "max_tokens": 1, "logprobs": 1, "return_token_ids": True,
                                  "logprob_token_ids": asked, "return_tokens_as_token_ids": True}, retries=0)
            choice = _field(out, "choices", 0)
            caps.token_prompts = isinstance(choice.get("token_ids"), list)
            top = (choice.get("logprobs") or {}).get("top_logprobs") or [{}]
            caps.logprob_token_ids = all(f"token_id:{i}" in (top[0] or {}) for i in asked)
        except ReflectionLMError:
            caps.token_prompts = False
        if caps.token_prompts:
            caps.max_logprobs = self._probe_max_logprobs(hello)
            try:
                out = self._complete({"prompt": hello, "max_tokens": 1, "prompt_logprobs": 0}, retries=0)
                caps.prompt_logprobs = isinstance(_field(out, "choices", 0).get("prompt_logprobs"), list)
            except ReflectionLMError:
                caps.prompt_logprobs = False
        else:
            caps.max_logprobs = self._top_k
            self._probe_forcing(caps)
        return caps

    def _find_tokenizer(self, caps: ServerCapabilities) -> None:
        for tok, detok in (("/tokenize", "/detokenize"), ("/extras/tokenize", "/extras/detokenize")):
            caps.tokenize_path, caps.detokenize_path = tok, detok
            try:
                self._remote_tokenize("a", add_bos=False, retries=0)
                return
            except ReflectionLMError:
                continue
        raise ReflectionLMError(
            f"{self.base_url} has no tokenize endpoint (/tokenize as in vLLM or /extras/tokenize as in "
            "llama-cpp-python's server); RemoteReflectionLM needs one to find the reflection-token ids"
        )

    def _probe_max_logprobs(self, prompt: list[int]) -> int:
        for k in (self._top_k, 5, 1):
            try:
                self._complete({"prompt": prompt, "max_tokens": 1, "logprobs": k}, retries=0)
                return k
            except ReflectionLMError:
                continue
        return 0

    def _probe_forcing(self, caps: ServerCapabilities) -> None:
        """Forcing works when a forced id comes back with the raw log-prob the top-k list gives it."""
        try:
            free = self._complete({"prompt": "The", "max_tokens": 1, "logprobs": 5}, retries=0)
            top = _field(free, "choices", 0, "logprobs", "top_logprobs", 0)
            # Runner-up strings that are one token each; force the second best of them.
            ranked = sorted(top.items(), key=lambda kv: -kv[1])
            single = [(s, lp) for s, lp in ranked if s and len(self.tokenize(s, add_bos=False)) == 1]
            if len(single) < 2:
                return
            text, want = single[1]
            tid = self.tokenize(text, add_bos=False)[0]
            forced = self._complete({"prompt": "The", "max_tokens": 1, "logprobs": 0,
                                     "logit_bias": {str(tid): FORCE_BIAS}}, retries=0)
            lp = _field(forced, "choices", 0, "logprobs", "token_logprobs", 0)
            caps.forced_logprobs = _field(forced, "choices", 0, "text") == text and abs(lp - want) < 1e-3
            if not caps.forced_logprobs:
                return
            seq = self.tokenize(" quick brown fox", add_bos=False)
            got = self._forced_sequence("The", seq, retries=0)
            caps.grammar = got is not None
        except ReflectionLMError:
            caps.forced_logprobs = caps.grammar = False

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

    # -- tokenizer ------------------------------------------------------------------------------
    def _remote_tokenize(self, text: str, *, add_bos: bool, retries: int | None = None) -> list[int]:
        caps = self.capabilities
        if caps.tokenize_path == "/tokenize":
            body = {"model": caps.model, "prompt": text, "add_special_tokens": add_bos}
        else:
            body = {"input": text}
        out = self._http.request("POST", caps.tokenize_path, body, retries=retries)
        ids = out.get("tokens") if isinstance(out, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise ReflectionLMError(f"malformed response from {caps.tokenize_path}: {str(out)[:200]}")
        return ids

    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        """The server's tokenization (cached); safe beside a running request (httpx's client is)."""
        key = (text, add_bos)
        ids = self._tok_cache.get(key)
        if ids is None:
            if self.capabilities.tokenize_path == "/tokenize":
                ids = self._remote_tokenize(text, add_bos=add_bos)
            else:  # /extras/tokenize adds BOS whenever the model wants one
                ids = self._remote_tokenize(text, add_bos=True)
                bos = self._bos_prefix()
                if not add_bos and bos and ids[: len(bos)] == bos:
                    ids = ids[len(bos):]
            self._tok_cache[key] = ids
            if add_bos and tuple(ids) not in self._texts:
                self._texts[tuple(ids)] = text
        return list(ids)

    def _bos_prefix(self) -> list[int]:
        """What the server's tokenizer puts before any text (BOS, or nothing)."""
        if self._bos is None:
            self._bos = self._remote_tokenize("", add_bos=True)
        return self._bos

    def decode(self, ids: Sequence[int]) -> str:
        if not self._splice_specials:
            return self._remote_decode(list(ids)) if ids else ""
        out: list[str] = []
        run: list[int] = []
        for tid in ids:
            piece = self.id_to_reflection.get(tid, self._pieces.get(tid))
            if piece is None and tid >= 0:
                run.append(tid)
                continue
            if run:
                out.append(self._remote_decode(run))
                run = []
            out.append(piece or "")
        if run:
            out.append(self._remote_decode(run))
        return "".join(out)

    def _remote_decode(self, ids: list[int]) -> str:
        caps = self.capabilities
        body: dict[str, Any] = {"tokens": ids}
        if caps.detokenize_path == "/detokenize":
            body["model"] = caps.model
        try:
            out = self._http.request("POST", caps.detokenize_path, body)
        except ReflectionLMError:
            if len(ids) == 1:  # e.g. a lone byte of a multi-byte character
                return "\ufffd"
            return "".join(self._remote_decode([i]) for i in ids)
        text = out.get("prompt", out.get("text")) if isinstance(out, dict) else None
        if not isinstance(text, str):
            raise ReflectionLMError(f"malformed response from {caps.detokenize_path}: {str(out)[:200]}")
        return text

    def _context_text(self, ids: list[int]) -> str:
        """Text whose server-side tokenization is ``ids`` (text mode); approximate if none is."""
        text = None
        for cut in range(len(ids), 0, -1):
            known = self._texts.get(tuple(ids[:cut]))
            if known is not None:
                if cut == len(ids):
                    return known
                text = known + self.decode(ids[cut:])
                break
        if text is None:
            bos = self._bos_prefix()
            text = self.decode(ids[len(bos):] if bos and ids[: len(bos)] == bos else ids)
        if self.tokenize(text, add_bos=True) != ids:
            self._mark_approximate("a context built from generated tokens re-tokenizes differently")
        return text

    # -- primitives -----------------------------------------------------------------------------
    def _first_position_probs(self, prompt_ids: list[list[int]], ids: list[int]) -> list[dict[int, float]]:
        caps = self.capabilities
        if caps.token_prompts and caps.logprob_token_ids:
            out = self._complete({"prompt": prompt_ids, "max_tokens": 1, "logprobs": 1, "logprob_token_ids": ids,
                                  "return_tokens_as_token_ids": True})
            return [self._id_probs(_field(c, "logprobs", "top_logprobs", 0), ids, exact=True)
                    for c in self._choices(out, len(prompt_ids))]
        if not caps.token_prompts and caps.forced_logprobs:
            return [{i: math.exp(self._forced_logprob(self._context_text(p), i)) for i in ids} for p in prompt_ids]
        results = []
        for p in prompt_ids:
            prompt = p if caps.token_prompts else self._context_text(p)
            out = self._complete({"prompt": prompt, "max_tokens": 1, "logprobs": caps.max_logprobs,
                                  "return_tokens_as_token_ids": True})
            results.append(self._id_probs(_field(out, "choices", 0, "logprobs", "top_logprobs", 0), ids, exact=False))
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
        """See :class:`~langchain_selfrag.lm.base.ReflectionLM`; ``on_token`` pieces come as each
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
        heads = [self._guarded_head(p, max_new_tokens, st, b, s) if b else _Head()
                 for p, b, s, st in zip(prompt_ids, bans, samplers, stops)]
        todo = [i for i, h in enumerate(heads) if not h.done and len(h.ids) < max_new_tokens]
        greedy = self._greedy_tokens if self.capabilities.token_prompts else self._greedy_text
        tails: dict[int, tuple[list[int], list[float], list[dict[int, float]]]] = {}
        if todo and any(samplers):  # one request per prompt, each with its own seed
            budget = max_new_tokens - min(len(heads[i].ids) for i in todo)
            for i in todo:
                body = _sampling_fields(samplers[i], len(heads[i].ids))
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

    def _guarded_head(self, prompt: list[int], max_new_tokens: int, stop: StopHook,
                      banned: BanHook, sampler: TokenSampler | None = None) -> _Head:
        """One token per request while ``banned`` bans anything; ``done`` when ``stop`` fired."""
        head = _Head()
        while len(head.ids) < max_new_tokens:
            ban = banned(head.ids)
            if not ban:
                return head
            tid, logp, probs, changed = self._guarded_step(prompt, head.ids, ban,
                                                           _sampling_fields(sampler, len(head.ids)))
            head.ids.append(tid)
            head.logps.append(logp)
            head.per_pos.append(probs)
            head.guarded += changed
            if stop(head.ids):
                head.done = True
                return head
        return head

    def _guarded_step(self, prompt: list[int], generated: list[int], ban,
                      sampling: dict[str, Any] | None = None) -> tuple[int, float, dict[int, float], bool]:
        """The next token with ``ban`` biased away: (id, raw log-prob, group probs, ban changed it)."""
        caps = self.capabilities
        banned = {i for i in ban if i >= 0}
        if not caps.token_prompts and UNKNOWN_EOS in ban:
            banned |= self._text_eos_ids()
        body: dict[str, Any] = {"max_tokens": 1, "logit_bias": {str(i): -FORCE_BIAS for i in sorted(banned)},
                                **(sampling or {})}
        if caps.token_prompts:
            exact = caps.logprob_token_ids
            body.update({"prompt": [prompt + generated], "min_tokens": 1, "logprobs": 1 if exact else caps.max_logprobs,
                         "return_token_ids": True, "return_tokens_as_token_ids": True})
            if exact and self._critique_ids:
                body["logprob_token_ids"] = self._critique_ids
            choice = self._choices(self._complete(body), 1)[0]
            tid = int(_field(choice, "token_ids", 0))
            top = _field(choice, "logprobs", "top_logprobs", 0) or {}
            group = self._groups.get(tid)
            probs = self._id_probs(top, group, exact=exact) if group else {}
        else:
            body.update({"prompt": self._context_text(prompt + generated), "logprobs": 1})
            choice = _field(self._complete(body), "choices", 0)
            if not _field(choice, "logprobs", "tokens"):  # ended on an end-of-sequence id it did not ban
                return UNKNOWN_EOS, self._unreported_eos_logprob(prompt + generated), {}, False
            top = _field(choice, "logprobs", "top_logprobs", 0) or {}
            tid, probs = self._identify(prompt, generated, _field(choice, "logprobs", "tokens", 0),
                                        float(_field(choice, "logprobs", "token_logprobs", 0)))
        logp = float(_field(choice, "logprobs", "token_logprobs", 0))
        best = max((float(v) for v in top.values()), default=logp)
        return tid, logp, probs, best > logp + 1e-6

    def _text_eos_ids(self) -> set[int]:
        """Ids of :data:`EOS_STRINGS` that are single tokens the server ends generation on (text mode)."""
        if self._eos_found is None:
            found = set()
            for text in EOS_STRINGS:
                ids = self.tokenize(text, add_bos=False)
                if len(ids) != 1 or ids[0] in self.id_to_reflection:
                    continue
                out = self._complete({"prompt": "The", "max_tokens": 1, "logprobs": 0,
                                      "logit_bias": {str(ids[0]): FORCE_BIAS}})
                choice = _field(out, "choices", 0)
                if choice.get("finish_reason") == "stop" and not (choice.get("logprobs") or {}).get("tokens"):
                    found.add(ids[0])
            self._eos_found = found
        return self._eos_found

    def _unreported_eos_logprob(self, ids: list[int]) -> float:
        """Log-prob of the end-of-sequence token greedy picks after ``ids``: the best one (text mode)."""
        anyid = self.tokenize("a", add_bos=False)[0]
        out = self._complete({"prompt": self._context_text(ids), "max_tokens": 1, "logprobs": 1,
                              "logit_bias": {str(anyid): FORCE_BIAS}})
        top = _field(out, "choices", 0, "logprobs", "top_logprobs", 0)
        return max(float(v) for v in top.values())

    # -- token mode -----------------------------------------------------------------------------
    def _greedy_tokens(self, prompt_ids: list[list[int]], max_new_tokens: int, sampling: dict[str, Any] | None = None):
        exact = self.capabilities.logprob_token_ids
        body: dict[str, Any] = {"prompt": prompt_ids, "max_tokens": max_new_tokens,
                                "logprobs": 1 if exact else self.capabilities.max_logprobs,
                                "return_token_ids": True, "return_tokens_as_token_ids": True, **(sampling or {})}
        if exact and self._critique_ids:
            body["logprob_token_ids"] = self._critique_ids
        if self._stop_at_retrieval and T.RETRIEVAL in self.reflection_ids:
            body["stop_token_ids"] = [self.reflection_ids[T.RETRIEVAL]]
        out = self._complete(body)
        results = []
        for choice in self._choices(out, len(prompt_ids)):
            ids = _field(choice, "token_ids")
            logps = _field(choice, "logprobs", "token_logprobs")
            tops = _field(choice, "logprobs", "top_logprobs")
            if not (len(ids) == len(logps) == len(tops)):
                raise ReflectionLMError("malformed response: token_ids and logprobs differ in length")
            if choice.get("finish_reason") == "stop" and choice.get("stop_reason") is None and ids:
                self.eos_ids.add(ids[-1])  # vLLM keeps the end-of-sequence id in token_ids
            per_pos = []
            for tid, top in zip(ids, tops):
                group = self._groups.get(tid)
                per_pos.append(self._id_probs(top or {}, group, exact=exact) if group else {})
            results.append((list(ids), [float(x) for x in logps], per_pos))
        return results

    def _choices(self, out: dict, n: int) -> list[dict]:
        choices = sorted(out["choices"], key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
        if len(choices) != n or not all(isinstance(c, dict) for c in choices):
            raise ReflectionLMError(f"malformed response: expected {n} choices, got {len(choices)}")
        return choices

    def _id_probs(self, top: dict, ids: Sequence[int], *, exact: bool) -> dict[int, float]:
        """Probabilities of ``ids`` from a ``top_logprobs`` entry keyed ``token_id:N`` or by text."""
        if not isinstance(top, dict):
            raise ReflectionLMError(f"malformed response: top_logprobs entry is {type(top).__name__}")
        by_id: dict[int, float] = {}
        for key, lp in top.items():
            if isinstance(key, str) and key.startswith("token_id:") and key[9:].lstrip("-").isdigit():
                by_id[int(key[9:])] = float(lp)
        if not by_id:  # keyed by text: map each wanted id through its piece
            for tid in ids:
                piece = self.decode([tid])
                if piece and piece in top:
                    by_id[tid] = float(top[piece])
        probs = {tid: math.exp(by_id[tid]) if tid in by_id else 0.0 for tid in ids}
        if exact and len(by_id.keys() & set(ids)) == len(ids):
            return probs
        if exact:
            raise ReflectionLMError("malformed response: requested logprob_token_ids are missing")
        if len(by_id.keys() & set(ids)) < len(ids):
            self._mark_approximate(f"read from the top-{self.capabilities.max_logprobs} log-probs; ids outside "
                                   "them count as 0 and the group is renormalised")
            total = sum(probs.values())
            return {tid: p / total if total > 0 else 0.0 for tid, p in probs.items()}
        return probs

    @staticmethod
    def _prompt_tail_logprob(choice: dict, seq: list[int], n: int) -> float:
        entries = _field(choice, "prompt_logprobs")
        if not isinstance(entries, list) or len(entries) < len(seq):
            raise ReflectionLMError("malformed response: prompt_logprobs shorter than the prompt")
        total = 0.0
        for pos in range(len(seq) - n, len(seq)):
            entry = entries[pos] or {}
            value = entry.get(str(seq[pos]), entry.get(seq[pos]))
            if isinstance(value, dict):
                value = value.get("logprob")
            if not isinstance(value, (int, float)):
                raise ReflectionLMError(f"malformed response: no prompt logprob for token {seq[pos]} at {pos}")
            total += float(value)
        return total

    # -- text mode ------------------------------------------------------------------------------
    def _forced_logprob(self, text: str, tid: int) -> float:
        out = self._complete({"prompt": text, "max_tokens": 1, "logprobs": 0, "logit_bias": {str(tid): FORCE_BIAS}})
        values = _field(out, "choices", 0, "logprobs", "token_logprobs")
        if values == [] and _field(out, "choices", 0).get("finish_reason") == "stop":
            raise ReflectionLMError(f"{self.base_url} reports no log-prob for token {tid}: it ends generation")
        value = _field(values, 0)
        if not isinstance(value, (int, float)):
            raise ReflectionLMError(f"malformed response: token_logprobs holds {value!r}")
        return float(value)

    def _forced_sequence(self, text: str, ids: list[int], *, retries: int | None = None) -> float | None:
        """log p(ids | text): the ids forced by ``logit_bias`` under a grammar that spells them."""
        pieces = [self.decode([i]) for i in ids]
        out = self._complete({"prompt": text, "max_tokens": len(ids), "logprobs": 0,
                              "logit_bias": {str(i): FORCE_BIAS for i in set(ids)},
                              "grammar": _grammar_literal("".join(pieces))}, retries=retries)
        logprobs = _field(out, "choices", 0, "logprobs")
        got, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
        if got != pieces or not isinstance(values, list) or len(values) != len(ids):
            return None
        return float(sum(values))

    def _greedy_text(self, prompt_ids: list[list[int]], max_new_tokens: int, sampling: dict[str, Any] | None = None):
        results = []
        for prompt in prompt_ids:
            text = self._context_text(prompt)
            body: dict[str, Any] = {"prompt": text, "max_tokens": max_new_tokens, "logprobs": 0, **(sampling or {})}
            if self._stop_at_retrieval:
                body["stop"] = [T.RETRIEVAL]
            choice = _field(self._complete(body), "choices", 0)
            pieces = _field(choice, "logprobs", "tokens")
            logps = _field(choice, "logprobs", "token_logprobs")
            if not isinstance(pieces, list) or not isinstance(logps, list) or len(pieces) != len(logps):
                raise ReflectionLMError("malformed response: logprobs.tokens and token_logprobs differ")
            ids: list[int] = []
            per_pos: list[dict[int, float]] = []
            for piece, lp in zip(pieces, logps):
                tid, probs = self._identify(prompt, ids, piece, lp)
                ids.append(tid)
                per_pos.append(probs)
                if tid == self.reflection_ids.get(T.RETRIEVAL) and self._stop_at_retrieval:
                    break
            logps = [float(x) for x in logps[: len(ids)]]
            joined = "".join(pieces)
            if (choice.get("finish_reason") == "stop" and len(ids) == len(pieces) and len(ids) < max_new_tokens
                    and T.RETRIEVAL not in joined):
                # The server stopped at an end-of-sequence token it does not report: add it with the
                # log-prob of the best next token, which is that end-of-sequence token.
                logps.append(self._unreported_eos_logprob(prompt + ids))
                ids.append(UNKNOWN_EOS)
                per_pos.append({})
            results.append((ids, logps, per_pos))
        return results

    def _identify(self, prompt: list[int], generated: list[int], piece: str, logprob: float) -> tuple[int, dict]:
        """The id of a generated token the server reported only as text, and its group probabilities."""
        if piece:
            ids = self.tokenize(piece, add_bos=False)
            if len(ids) == 1 and self._pieces.get(ids[0], piece) == piece:
                self._pieces[ids[0]] = piece
                return ids[0], {}
            return self._stand_in(piece), {}  # text we can reproduce but whose id we cannot name
        if self.reflection_ids:
            # A control token: greedy picked it, so among the reflection tokens it has the best
            # forced log-prob, and that log-prob is the one the server reported for it (sampling:
            # the reflection token whose forced log-prob is nearest the reported one).
            ctx = self._context_text(prompt + generated)
            lps = {tid: self._forced_logprob(ctx, tid) for tid in self.id_to_reflection}
            best = max(lps, key=lps.__getitem__)
            if self._sampling:  # a sampled token need not be the best: the one whose log-prob was reported
                best = min(lps, key=lambda tid: abs(lps[tid] - logprob))
            if abs(lps[best] - logprob) <= 0.5:
                group = self._groups.get(best)
                return best, ({i: math.exp(lps[i]) for i in group} if group else {})
        self._mark_approximate("a generated token came back without text and is no reflection token")
        return self._stand_in(""), {}

    def _stand_in(self, piece: str) -> int:
        """A negative id standing for generated text whose real id the server does not reveal."""
        if piece not in self._synthetic:
            self._synthetic[piece] = -1000 - len(self._synthetic)
            self._pieces[self._synthetic[piece]] = piece
        return self._synthetic[piece]

    def _eos_ids(self) -> Sequence[int]:
        return [] if self.capabilities.token_prompts else [UNKNOWN_EOS]

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def __repr__(self) -> str:
        caps = self.capabilities
        return f"RemoteReflectionLM({self.base_url!r}, model={caps.model!r}, mode={caps.mode})"
