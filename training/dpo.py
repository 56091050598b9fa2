"""DPO on ReSearch data (seed 004): TRL's ``DPOTrainer`` + PEFT LoRA on the 2 best x 2 worst samples.

Pairs come from :func:`training.research_pairs.dpo_dataset` (best by expected utility chosen,
worst rejected; pairs of equal utility skipped). The LoRA adapter and the trainable
reflection-token rows are those of ``training.sft``; ``--init-adapter`` continues an earlier adapter
(the bundled generator, say) and then the reference policy is that adapter as loaded. Evidence
spans (``<paragraph>…</paragraph>``) in a completion are not trained, as in SFT.

Defaults follow the paper's Table 17 (DPO: 400 steps, lr 1e-6, batch 64 = 8 x 8 accumulation,
beta 0.25); scale them down with the flags on a CPU. Resumable from ``--output-dir``; writes
``adapter/`` (+ ``selfrag_training.json``), ``loss_curve.png`` and ``loss_history.json``.

Example::

    python -m training.dpo --data runs/research.jsonl --output-dir runs/dpo \\
        --base-model SmolLM2-135M-Instruct.Q4_1.gguf --init-adapter langchain_selfrag/models/selfrag-smollm2-135m \\
        --max-steps 60 --batch-size 4 --grad-accum 2 --lr 5e-5 --threads 1
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from langchain_selfrag import tokens as T

from .cli_common import add_sft_arguments, config_from_args, parse
from .research_pairs import ResearchDataError, dpo_dataset, read_research, selection_rule
from .sft import (
    META_FILE,
    SFTRunConfig,
    TrainingError,
    _earlier_seconds,
    _loss_callback,
    _set_token_lr,
    _time_budget_callback,
    lora_config,
    paragraph_mask,
    prepare_model,
    trainer_arguments,
    write_loss_curve,
)


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


@dataclass
class RunResult:
    """What a DPO or RLOO run produced; ``model`` is the trained policy in memory."""

    output_dir: Path
    adapter_dir: Path
    steps: int
    train_loss: float | None
    seconds: float
    examples: int
    token_ids: dict[str, int]
    model: Any = field(default=None, repr=False)
    log_history: list[dict] = field(default_factory=list, repr=False)


# ---------------------------------------------------------------------------------------------
# shared by DPO and RLOO
# ---------------------------------------------------------------------------------------------
def set_threads(threads: int | None) -> None:
    """Limit torch's CPU threads (as ``train_sft`` does)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # only settable once per process
            pass


def prepare_policy(cfg: SFTRunConfig):
    """``(model, tokenizer, token ids, peft_config)``: a fresh LoRA config, or the init adapter loaded trainable."""
    model, tokenizer, ids = prepare_model(cfg.base_model)
    if not cfg.init_adapter:
        return model, tokenizer, ids, lora_config(model, sorted(ids.values()), cfg)
    from peft import PeftModel

    meta_path = Path(cfg.init_adapter) / META_FILE
    if meta_path.is_file():
        expected = {k: int(v) for k, v in json.loads(meta_path.read_text()).get("reflection_token_ids", {}).items()}
        if expected and expected != ids:
            raise TrainingError(
                f"reflection-token ids of {cfg.base_model} differ from those {cfg.init_adapter} was trained with")
    model = PeftModel.from_pretrained(model, str(cfg.init_adapter), is_trainable=True)
    return model, tokenizer, ids, None


def sync_ref_adapter(model) -> int:
    """Copy the trainable reflection-token rows of the ``default`` adapter into TRL's ``ref`` adapter.

    Continuing a PEFT adapter, TRL's DPO and RLOO trainers add a frozen ``ref`` copy of it, but copy
    only parameters named ``*.default.*``; the token rows end in ``.default`` and keep their initial
    values, so the reference would differ from the starting policy. Returns the tensors copied.
    """
    import torch

    if "ref" not in getattr(model, "peft_config", {}):
        return 0
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    copied = 0
    with torch.no_grad():
        for name, value in {**params, **buffers}.items():
            if not name.endswith(".default"):
                continue
            twin = name[: -len("default")] + "ref"
            target = params.get(twin, buffers.get(twin))
            if target is not None and target.shape == value.shape:
                target.copy_(value)
                copied += 1
    return copied


def expose_head_bias(model) -> bool:
    """Let TRL's fused LM head read ``bias`` through PEFT's trainable-token wrapper of the head.

    TRL's DPO and RLOO trainers compute log-probabilities from ``lm_head.weight`` and
    ``lm_head.bias`` directly. With reflection-token rows on the head (tied embeddings, or
    ``trainable_token_indices`` on it) the head is a ``TrainableTokensWrapper`` that forwards
    ``weight`` (the merged rows, differentiable) but not ``bias``. Returns True when patched.
    """
    head = model.get_output_embeddings()
    if head is None or "bias" in vars(head):
        return False
    try:
        head.bias  # noqa: B018 - a plain layer, or a wrapper that already forwards it
        return False
    except AttributeError:
        base = getattr(getattr(head, "token_adapter", None), "base_layer", None)
        object.__setattr__(head, "bias", getattr(base, "bias", None))
        return True


def run_callbacks(cfg: SFTRunConfig, output_dir: Path, extra: Sequence[Any] = ()) -> list:
    """Loss curve, optional wall-clock budget, then ``extra``."""
    budget = [_time_budget_callback(cfg.max_minutes)] if cfg.max_minutes else []
    return [_loss_callback(output_dir), *budget, *extra]


def last_checkpoint(cfg: SFTRunConfig, output_dir: Path) -> str | None:
    """The checkpoint to resume from, if resuming and one exists."""
    from transformers.trainer_utils import get_last_checkpoint

    if cfg.resume and any(output_dir.glob("checkpoint-*")):
        return get_last_checkpoint(str(output_dir))
    return None


def train_and_save(trainer, tokenizer, cfg: SFTRunConfig, ids: Mapping[str, int], output_dir: Path,
                   meta_extra: Mapping[str, Any]) -> RunResult:
    """Train (resuming when possible), then save the ``default`` adapter, tokenizer, metadata and loss curve."""
    if cfg.token_learning_rate:
        _set_token_lr(trainer, cfg.token_learning_rate)
    last = last_checkpoint(cfg, output_dir)
    start = time.time()
    result = trainer.train(resume_from_checkpoint=last)
    seconds = time.time() - start
    adapter_dir = output_dir / "adapter"
    earlier = _earlier_seconds(adapter_dir) if last else 0.0
    if trainer.is_world_process_zero():
        trainer.model.save_pretrained(str(adapter_dir), save_embedding_layers=False, selected_adapters=["default"])
        tokenizer.save_pretrained(str(adapter_dir))
        meta = {
            "base_model": str(cfg.base_model),
            "config": {k: v for k, v in asdict(cfg).items() if k != "extra"} | dict(cfg.extra),
            "reflection_token_ids": dict(ids),
            "steps": trainer.state.global_step,
            "train_loss": result.training_loss,
            "seconds": round(seconds, 1),
            "seconds_total": round(earlier + seconds, 1),
            "processes": max(1, int(trainer.args.world_size)),
            "bf16": bool(trainer.args.bf16),
            "resumed_from": last,
            **dict(meta_extra),
        }
        (adapter_dir / META_FILE).write_text(json.dumps(meta, indent=1))
        write_loss_curve(trainer.state.log_history, output_dir)
    # without accelerate's mixed-precision forward wrapper: the policy as saved, in its own precision
    model = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    return RunResult(output_dir, adapter_dir, trainer.state.global_step, result.training_loss, seconds,
                     int(meta_extra.get("examples", 0)), dict(ids), model, list(trainer.state.log_history))


# ---------------------------------------------------------------------------------------------
# DPO
# ---------------------------------------------------------------------------------------------
def preference_collator(tokenizer, ids: Mapping[str, int], max_length: int | None):
    """TRL's preference collator with every ``<paragraph>…</paragraph>`` span out of the completion mask."""
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    start, end = ids.get(T.PARAGRAPH_START), ids.get(T.PARAGRAPH_END)

    class EvidenceMaskedCollator(DataCollatorForPreference):
        def torch_call(self, examples):
            import torch

            out = super().torch_call(examples)
            if start is None or end is None:
                return out
            rows = [paragraph_mask(row.tolist(), start, end) for row in out["input_ids"]]
            out["completion_mask"] = out["completion_mask"].masked_fill(torch.tensor(rows, dtype=torch.bool), 0)
            return out

    return EvidenceMaskedCollator(pad_token_id=tokenizer.pad_token_id, max_length=max_length)


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


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
def add_research_arguments(ap: argparse.ArgumentParser, *, lr: float, steps: int, batch: int, accum: int) -> None:
    """The SFT options (``--data`` names the ReSearch JSONL) with Table 17 defaults, plus ``--rho``."""
    ap.add_argument("--data", dest="train_file", help="ReSearch JSONL (training.research_data); same as --train-file")
    add_sft_arguments(ap, lr=lr, max_length=512)
    ap.set_defaults(max_steps=steps, batch_size=batch, grad_accum=accum)
    ap.add_argument("--rho", type=float,
                    help="rank samples by E[U] at this rho* (default: the utilities stored in the data)")


def research_config(args: argparse.Namespace, **knobs: Any) -> ResearchRunConfig:
    """A :class:`ResearchRunConfig` from parsed options."""
    return ResearchRunConfig(**asdict(config_from_args(args)), rho=args.rho, **knobs)


def build_parser() -> argparse.ArgumentParser:
    """Options of ``python -m training.dpo`` (Table 17 defaults)."""
    ap = argparse.ArgumentParser(prog="python -m training.dpo", description=__doc__.split("\n\n")[0])
    add_research_arguments(ap, lr=1e-6, steps=400, batch=8, accum=8)
    ap.add_argument("--beta", type=float, default=0.25, help="DPO beta (Table 17: 0.25)")
    ap.add_argument("--n-best", type=int, default=2)
    ap.add_argument("--n-worst", type=int, default=2)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    ap = build_parser()
    args = parse(ap, argv)
    try:
        result = train_dpo(research_config(args, beta=args.beta, n_best=args.n_best, n_worst=args.n_worst))
    except (TrainingError, ResearchDataError) as exc:
        ap.exit(2, f"error: {exc}\n")
    print(json.dumps({"adapter": str(result.adapter_dir), "steps": result.steps, "train_loss": result.train_loss,
                      "pairs": result.examples, "seconds": round(result.seconds, 1)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
