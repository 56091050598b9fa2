"""Self-RAG and self-restraint training recipes, built on the inference library (never the reverse).

The commands, each ``python -m training.X`` (an argument parser and a ``main``):

* :mod:`training.critic_data` — critic examples from a teacher chat model or gold QA labels;
* :mod:`training.critic_sft` — critic fine-tuning (TRL + PEFT LoRA) and per-aspect accuracy;
* :mod:`training.generator_data` — the paper's Algorithm 3 (critic + retriever) in the published format;
* :mod:`training.generator_sft` — generator fine-tuning with the 15 reflection tokens;
* :mod:`training.export` — merged Hugging Face directory and GGUF with reflection control tokens;
* :mod:`training.research` — ReSearch data (Algorithm 1 of the self-restraint paper): samples with expected utilities;
* :mod:`training.research_sft`, :mod:`training.dpo`, :mod:`training.rloo` — SFT, DPO and RLOO on ReSearch data.

The library they share:

* :mod:`training.core` — run configs, shared options, records and collators, callbacks, adapters, export;
* :mod:`training.trainers` — the TRL trainers (SFT, DPO, RLOO);
* :mod:`training.selfrag` — Self-RAG data: QA sources, BM25, critic cases and labellers, Algorithm 3;
* :mod:`training.restraint` — self-restraint data: Algorithm 1, its questions, training pairs, the RLOO reward.
"""
