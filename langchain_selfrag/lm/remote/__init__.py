"""Reflection LM served over an OpenAI-compatible ``/v1/completions`` endpoint: :class:`RemoteReflectionLM`.

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
content (see :mod:`.guard`); the rest is one request as before.

Sampling (``generate(temperature=..., top_p=..., seed=...)``) is the server's: each prompt goes in a
request of its own with ``temperature``, ``top_p`` and a seed derived from ``(seed, prompt index)``
(each guarded step with one of its own), and, in text mode, llama-cpp-python's extra samplers
switched off (``top_k=0``, ``min_p=0``). Servers differ in the order of their samplers
(llama-cpp-python cuts the top-p nucleus before applying the temperature, vLLM after), and under
sampling ``guarded`` counts the guarded steps whose token was not the best one listed (an upper
bound), and an end-of-sequence token the server does not report gets the best listed log-prob.

Modules: :mod:`.model` (the LM: requests, primitives, the decode loop), :mod:`.http` (JSON over
httpx), :mod:`.probe` (what the server can do), :mod:`.tokenizer` (the server's tokenizer, cached),
:mod:`.token_mode` and :mod:`.text_mode` (the two ways of talking to it), :mod:`.guard` (the
decoding guard, one token per request).
"""

from .http import ServerRejected
from .model import RemoteReflectionLM
from .probe import ServerCapabilities

__all__ = ["RemoteReflectionLM", "ServerCapabilities", "ServerRejected"]
