"""Run configurations of the trainers and the setup error they share (no torch import)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langchain_selfrag.export.hf import ModelSetupError

#: The metadata file written beside every trained adapter.
META_FILE = "selfrag_training.json"
DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


#: Setup failures of the library (``langchain_selfrag.export.hf``) and of these recipes share one type.
TrainingError = ModelSetupError


@dataclass
class SFTRunConfig:
    """Everything one SFT run needs; the critic and generator recipes fill it from their CLIs."""

    base_model: str
    train_file: str
    output_dir: str
    eval_file: str | None = None
    max_length: int = 512
    epochs: float = 1.0
    max_steps: int = -1
    batch_size: int = 8
    grad_accum: int = 1
    learning_rate: float = 5e-4
    token_learning_rate: float | None = None
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: tuple[str, ...] = DEFAULT_TARGET_MODULES
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    bf16: str = "auto"
    seed: int = 0
    save_steps: int = 200
    logging_steps: int = 10
    threads: int | None = None
    resume: bool = True
    limit: int | None = None
    gradient_checkpointing: bool = False
    max_minutes: float | None = None
    init_adapter: str | None = None
    #: train only the LoRA weights of decoder layers from this index up, the token rows frozen (0: all)
    train_from_layer: int = 0
    #: the prompt layout trained in and recorded in the model (``langchain_selfrag.prompt_layouts``); None: the
    #: one the starting adapter or the base records (:func:`trained_layout`), else the paper's
    prompt_layout: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)



@dataclass
class ResearchRunConfig(SFTRunConfig):
    """An SFT run config plus the preference/RL knobs; ``train_file`` is the ReSearch JSONL."""

    learning_rate: float = 1e-6
    max_steps: int = 400
    batch_size: int = 8
    grad_accum: int = 8
    beta: float = 0.25
    rho: float | None = None
    n_best: int = 2
    n_worst: int = 2


def trained_layout(named: str | None, *starts: str | None) -> str:
    """The prompt layout a run trains in: ``named``, else the first record of ``starts`` (an adapter to continue,
    the base model), else ``paper``. A named layout that differs from a start's record is refused: a model
    trained in one layout and continued in another reads neither."""
    from langchain_selfrag.layout_record import path_record
    from langchain_selfrag.prompt_layouts import PromptLayoutError, layout_named

    records = [(s, r) for s in starts if s for r in [path_record(s)] if r is not None]
    try:
        if named is None:
            return layout_named(records[0][1] if records else None).name
        chosen = layout_named(named).name
        for start, record in records:
            if layout_named(record).name != chosen:
                raise TrainingError(f"{start} records the prompt layout {record!r}, not {named!r}: "
                                    "leave --prompt-layout out to train on in its layout")
        return chosen
    except PromptLayoutError as exc:
        raise TrainingError(str(exc)) from None
