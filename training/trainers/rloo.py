"""RLOO on ReSearch prompts ("LLMs can learn self-restraint through iterative self-reflection"): TRL's ``RLOOTrainer``
+ PEFT LoRA, reward = expected utility (:class:`~training.restraint.reward.UtilityReward`). Writes what
:func:`~training.trainers.dpo.train_dpo` writes, plus the reward curve and the reward's counts in the metadata."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.adapters import expose_head_bias, prepare_policy, sync_ref_adapter
from ..core.callbacks import reward_callback, write_reward_curve
from ..core.config import ResearchRunConfig, TrainingError
from ..restraint.pairs import read_research, rloo_prompts
from ..restraint.reward import UtilityReward, check_evidence, record_reward_counts
from .common import RunResult, run_callbacks, set_threads, train_and_save, trainer_arguments


def train_rloo(cfg: ResearchRunConfig, reward: UtilityReward | None = None, *, splitter: Any = None, scorer: Any = None,
               offline: bool = False, num_generations: int = 4, max_completion_length: int = 256,
               temperature: float = 1.0, top_p: float = 1.0, normalize_advantages: bool = True,
               records: Sequence[Mapping[str, Any]] | None = None, callbacks=()) -> RunResult:
    """RLOO of ``cfg.base_model`` (or ``cfg.init_adapter``) on the prompts of ``cfg.train_file``.

    Pass a ready ``reward``, or the frozen ``splitter`` and ``scorer`` to build a
    :class:`UtilityReward` over the records (``cfg.rho`` overrides their rho*).
    """
    from datasets import Dataset
    from trl import RLOOConfig, RLOOTrainer

    if cfg.eval_file:
        raise TrainingError("RLOO takes no --eval-file: evaluate the saved adapter separately")
    set_threads(cfg.threads)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = list(records) if records is not None else read_research(cfg.train_file, cfg.limit)
    rows = rows[: cfg.limit] if cfg.limit else rows
    if reward is None and (splitter is None or scorer is None):
        raise TrainingError("train_rloo needs a reward, or a splitter and a scorer")
    check_evidence(rows, reward.scorer if reward is not None else scorer)
    model, tokenizer, ids, peft_cfg = prepare_policy(cfg)
    if reward is None:
        reward = UtilityReward(rows, splitter, scorer, rho=cfg.rho, tokenizer=tokenizer, offline=offline)
    args = RLOOConfig(
        **trainer_arguments(cfg, RLOOConfig, out),
        beta=cfg.beta,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        temperature=temperature,
        top_p=top_p,
        normalize_advantages=normalize_advantages,
    )
    trainer = RLOOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=Dataset.from_list(rloo_prompts(rows)),
        processing_class=tokenizer,
        peft_config=peft_cfg,
        callbacks=run_callbacks(cfg, out, [reward_callback(out), *callbacks]),
    )
    sync_ref_adapter(trainer.model)
    expose_head_bias(trainer.model)
    meta = {"method": "rloo", "research_data": str(cfg.train_file), "examples": len(rows), "offline": bool(offline),
            "num_generations": num_generations, "max_completion_length": max_completion_length,
            "temperature": temperature, "top_p": top_p, "normalize_advantages": normalize_advantages,
            "evaluator": {"splitter": type(reward.splitter).__name__, "scorer": type(reward.scorer).__name__}}
    result = train_and_save(trainer, tokenizer, cfg, ids, out, meta)
    write_reward_curve(result.log_history, out)
    record_reward_counts(reward, result.adapter_dir)
    return result
