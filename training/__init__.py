"""Self-RAG training recipes: critic data and SFT, generator data (Algorithm 3) and SFT, export.

Every step is an importable module with a command-line entry point (``python -m training.X``):

* :mod:`training.critic_data` — critic examples from a teacher chat model or gold QA labels;
* :mod:`training.critic_sft` — critic fine-tuning (TRL + PEFT LoRA) and per-aspect accuracy;
* :mod:`training.generator_data` — the paper's Algorithm 3 (critic + retriever) in the published format;
* :mod:`training.generator_sft` — generator fine-tuning with the 15 reflection tokens;
* :mod:`training.export` — merged Hugging Face directory and GGUF with reflection control tokens.
"""
