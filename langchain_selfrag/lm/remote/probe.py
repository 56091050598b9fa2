"""What the server can do, found once at start-up: tokenize endpoint, token prompts, log-prob fields, forcing."""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol import ReflectionLMError
from .http import response_field
from .text_mode import FORCE_BIAS


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


class ProbeMixin:
    """The start-up probe of :class:`~.model.RemoteReflectionLM` (mixed into it)."""

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
            choice = response_field(out, "choices", 0)
            caps.token_prompts = isinstance(choice.get("token_ids"), list)
            top = (choice.get("logprobs") or {}).get("top_logprobs") or [{}]
            caps.logprob_token_ids = all(f"token_id:{i}" in (top[0] or {}) for i in asked)
        except ReflectionLMError:
            caps.token_prompts = False
        if caps.token_prompts:
            caps.max_logprobs = self._probe_max_logprobs(hello)
            try:
                out = self._complete({"prompt": hello, "max_tokens": 1, "prompt_logprobs": 0}, retries=0)
                caps.prompt_logprobs = isinstance(response_field(out, "choices", 0).get("prompt_logprobs"), list)
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
            top = response_field(free, "choices", 0, "logprobs", "top_logprobs", 0)
            # Runner-up strings that are one token each; force the second best of them.
            ranked = sorted(top.items(), key=lambda kv: -kv[1])
            single = [(s, lp) for s, lp in ranked if s and len(self.tokenize(s, add_bos=False)) == 1]
            if len(single) < 2:
                return
            text, want = single[1]
            tid = self.tokenize(text, add_bos=False)[0]
            forced = self._complete({"prompt": "The", "max_tokens": 1, "logprobs": 0,
                                     "logit_bias": {str(tid): FORCE_BIAS}}, retries=0)
            lp = response_field(forced, "choices", 0, "logprobs", "token_logprobs", 0)
            caps.forced_logprobs = response_field(forced, "choices", 0, "text") == text and abs(lp - want) < 1e-3
            if not caps.forced_logprobs:
                return
            seq = self.tokenize(" quick brown fox", add_bos=False)
            got = self._forced_sequence("The", seq, retries=0)
            caps.grammar = got is not None
        except ReflectionLMError:
            caps.forced_logprobs = caps.grammar = False
