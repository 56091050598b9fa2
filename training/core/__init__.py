"""What every training recipe shares.

* :mod:`~training.core.config` — run configs (:class:`SFTRunConfig`, :class:`ResearchRunConfig`) and ``TrainingError``;
* :mod:`~training.core.args` — command-line options shared by the training commands;
* :mod:`~training.core.jsonl` — reading and writing the recipes' JSONL files;
* :mod:`~training.core.records` — SFT records: prompt, token encoding, loading;
* :mod:`~training.core.collate` — SFT and preference collators with evidence spans masked;
* :mod:`~training.core.callbacks` — loss / reward curves and a wall-clock budget;
* :mod:`~training.core.adapters` — base model with reflection tokens, LoRA adapters, trained-model loading;
* :mod:`~training.core.export` — merged HF directory, packed adapter, backend comparison;
* :mod:`~training.core.text`, :mod:`~training.core.metrics` — text helpers and evaluation metrics.
"""
