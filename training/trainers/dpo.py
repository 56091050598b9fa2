"""DPO on ReSearch data ("LLMs can learn self-restraint through iterative self-reflection"): TRL's ``DPOTrainer`` +
PEFT LoRA on the 2 best x 2 worst samples.

Pairs come from :func:`training.restraint.pairs.dpo_dataset`; the adapter is a fresh LoRA with
reflection-token rows or the ``init_adapter`` continued (then TRL's reference policy is that adapter
as loaded); evidence spans in a completion are not trained (:func:`~training.core.collate.preference_collator`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.adapters import expose_head_bias, prepare_policy, sync_ref_adapter
from ..core.collate import preference_collator
from ..core.config import ResearchRunConfig, TrainingError
from ..restraint.pairs import dpo_dataset, read_research, selection_rule
from .common import RunResult, run_callbacks, set_threads, train_and_save, trainer_arguments


def pair_dataset(pairs: Sequence[Mapping[str, Any]]):
    """A ``datasets.Dataset`` of TRL's ``{prompt, chosen, rejected}`` columns."""
    from datasets import Dataset

    return Dataset.from_list([{k: p[k] for k in ("prompt", "chosen", "rejected")} for p in pairs])


def train_dpo(cfg: ResearchRunConfig, *, records: Sequence[Mapping[str, Any]] | None = None, callbacks=()) -> RunResult:
    """DPO of ``cfg.base_model`` (or ``cfg.init_adapter``) on the ReSearch pairs of ``cfg.train_file``.

    ``cfg.eval_file`` (ReSearch data too): the DPO loss on its pairs every ``save_steps``.
    """
    from trl import DPOConfig, DPOTrainer

    set_threads(cfg.threads)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = list(records) if records is not None else read_research(cfg.train_file, cfg.limit)
    pairs = dpo_dataset(rows[: cfg.limit] if cfg.limit else rows, cfg.rho, cfg.n_best, cfg.n_worst)
    if not pairs:
        raise TrainingError("no preference pairs: no question has two samples of different expected utility")
    eval_pairs = dpo_dataset(read_research(cfg.eval_file), cfg.rho, cfg.n_best, cfg.n_worst) if cfg.eval_file else []
    model, tokenizer, ids, peft_cfg = prepare_policy(cfg)
    evaluate = {"eval_strategy": "steps", "eval_steps": cfg.save_steps} if eval_pairs else {}
    args = DPOConfig(**trainer_arguments(cfg, DPOConfig, out), beta=cfg.beta, max_length=cfg.max_length, **evaluate)
    trainer = DPOTrainer(
        model=model,
        args=args,
        train_dataset=pair_dataset(pairs),
        eval_dataset=pair_dataset(eval_pairs) if eval_pairs else None,
        processing_class=tokenizer,
        peft_config=peft_cfg,
        data_collator=preference_collator(tokenizer, ids, cfg.max_length),
        callbacks=run_callbacks(cfg, out, callbacks),
    )
    sync_ref_adapter(trainer.model)
    expose_head_bias(trainer.model)
    meta = {"method": "dpo", "research_data": str(cfg.train_file), "examples": len(pairs),
            "questions": len({p["id"] for p in pairs}), "eval_pairs": len(eval_pairs),
            "pair_rule": f"{cfg.n_best} best x {cfg.n_worst} worst by the ranking; pairs of equal score skipped",
            "selection": selection_rule(rows[: cfg.limit] if cfg.limit else rows)}
    return train_and_save(trainer, tokenizer, cfg, ids, out, meta)
