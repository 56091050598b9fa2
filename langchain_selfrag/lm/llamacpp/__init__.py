"""Reflection LM on llama.cpp (llama-cpp-python's C API): any GGUF, logits read only where needed.

The model and its context are our own, made and driven through llama.cpp's public C API as
llama-cpp-python binds it (``llama_model_load_from_file``, ``llama_init_from_model``,
``llama_batch_*``, ``llama_decode``, ``llama_memory_*``). Each decode asks for the logits of the
positions that matter only: the last prompt position, one per live sequence while generating, and
those of candidate continuations when a reflection token is spelled in several tokens (a base
vocabulary). The KV cache is unified over several sequences, so tokens shared by sequences are
stored once.

``generate`` decodes its K prompts together: their common prefix is decoded once for every
sequence, each prompt's own tail on a sequence of its own, and then one ``llama_decode`` per step
for all live sequences. ``candidate_probs`` lays out its prompts the same way and stops after
that prefill. llama.cpp quantises activations to 8 bits for quantised weights, so its
logits move slightly with the batch layout: greedy tokens equal one-at-a-time decoding except
where two top logits are within that noise, and probabilities differ by a few hundredths (see
``tests/integration_tests/test_lm_llamacpp.py``).

Modules: :mod:`.model` (:class:`LlamaCppReflectionLM`: loading, scoring, the protocol primitives),
:mod:`.native` (the llama.cpp objects and C API calls: tokenizer, KV cache, ``llama_decode``),
:mod:`.layout` (pure: how prompts and candidates are laid out on KV sequences) and
:mod:`.batching` (several prompts decoded together, one token choice per sequence).
"""

from .layout import common_prefix, continuation_tree, plan_groups
from .model import LlamaCppReflectionLM
from .native import TESTED_BINDING, check_binding_version, default_threads

__all__ = [
    "TESTED_BINDING",
    "LlamaCppReflectionLM",
    "check_binding_version",
    "common_prefix",
    "continuation_tree",
    "default_threads",
    "plan_groups",
]
