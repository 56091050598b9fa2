"""What the SFT, DPO and RLOO trainers share: TRL trainer arguments, CPU threads, the token-row
learning rate, callbacks, resuming, cuDNN attention kept out of training, and saving the adapter with
its metadata."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.callbacks import checkpoint_seconds, elapsed_callback, loss_callback, time_budget_callback, write_loss_curve
from ..core.config import META_FILE, SFTRunConfig, TrainingError
from ..core.run_identity import check_resume, run_identity, write_identity


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


def set_threads(threads: int | None) -> None:
    """Limit torch's CPU threads (each trainer does this first)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # only settable once per process
            pass



def trainer_arguments(cfg: SFTRunConfig, config_cls, output_dir: Path) -> dict[str, Any]:
    """Trainer arguments shared by the SFT, DPO and RLOO configs (``config_cls``: the TRL config class)."""
    import torch

    return dict(
        output_dir=str(output_dir),
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=cfg.warmup_ratio,
        weight_decay=cfg.weight_decay,
        logging_steps=cfg.logging_steps,
        save_steps=cfg.save_steps,
        save_total_limit=2,
        bf16=_use_bf16(cfg.bf16),
        fp16=False,
        **_checkpointing_kwarg(config_cls, cfg.gradient_checkpointing),
        use_cpu=not torch.cuda.is_available(),
        report_to="none",
        seed=cfg.seed,
        dataloader_num_workers=0,
        disable_tqdm=False,
    )


def _use_bf16(flag: str) -> bool:
    import torch

    if flag in ("1", "true", "yes", "on"):
        return True
    if flag in ("0", "false", "no", "off"):
        return False
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return cpu_has_fast_bf16()


def cpu_has_fast_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU computes bf16 in hardware (x86 ``avx512_bf16`` or ``amx_bf16``; Arm ``bf16``): bf16
    autocast is then faster (measured here: a Qwen-0.5B-sized decoder layer trained 1.7-2.4x faster on an AMD EPYC
    with avx512_bf16), and slower where it is emulated (2x slower on cores without it)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
                cpuinfo = fh.read()
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.lower().startswith(("flags", "features")):
            flags.update(line.split(":", 1)[-1].split())
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def _checkpointing_kwarg(config_cls, enabled: bool) -> dict[str, bool]:
    """``activation_checkpointing`` on recent transformers, ``gradient_checkpointing`` before."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(config_cls)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": enabled}


def freeze_below(model, layer: int) -> int:
    """Freeze the trainable parameters of decoder layers below ``layer`` and the input embedding's
    reflection-token rows; how many tensors were frozen. Nothing below ``layer`` then needs a gradient,
    so autograd's backward pass stops there. The token rows of an untied output head stay trainable:
    their gradient comes from the head alone (a tied head shares the frozen input rows)."""
    if layer <= 0:
        return 0

    def params_of(module) -> set[int]:
        return {id(p) for p in module.parameters()} if module is not None else set()

    head_only = params_of(model.get_output_embeddings()) - params_of(model.get_input_embeddings())
    index = re.compile(r"\.layers\.(\d+)\.")
    frozen = 0
    for name, param in model.named_parameters():
        found = index.search(name)
        input_rows = "trainable_tokens" in name and id(param) not in head_only
        if param.requires_grad and (input_rows or (found and int(found.group(1)) < layer)):
            param.requires_grad_(False)
            frozen += 1
    return frozen


def set_token_lr(trainer, lr: float) -> None:
    """Give the trainable reflection-token rows their own learning rate (they start from scratch)."""
    import torch

    model = trainer.model
    token_params = [p for n, p in model.named_parameters() if p.requires_grad and "trainable_tokens" in n]
    other = [p for n, p in model.named_parameters() if p.requires_grad and "trainable_tokens" not in n]
    groups = [{"params": other, "lr": trainer.args.learning_rate}, {"params": token_params, "lr": lr}]
    trainer.optimizer = torch.optim.AdamW([g for g in groups if g["params"]], weight_decay=trainer.args.weight_decay)


def cudnn_attention_off():
    """A context in which PyTorch's scaled-dot-product attention does not use its cuDNN kernel.

    From torch 2.11 cuDNN is SDPA's first choice on H100/H200 whenever a mask tensor is passed (every
    padded batch), and its backward returns NaN in ``grad_q`` when the padded length is 64 mod 128
    and a query row's logsumexp is below -ln(FLT_MAX) = -88.7 (pytorch/pytorch#196678). Qwen2.5's
    attention-sink heads (0.5B: layer 8 head 3, layer 0 head 1) have such rows in every batch, so the
    first batch padded to 64, 192 or 320 tokens makes every gradient NaN and, after the clipped
    optimizer step, every adapter weight. The memory-efficient kernel (or flash without a mask)
    takes over at about the same speed; on a CPU the switch changes nothing.
    """
    from contextlib import contextmanager

    import torch

    @contextmanager
    def off():
        was = torch.backends.cuda.cudnn_sdp_enabled()
        torch.backends.cuda.enable_cudnn_sdp(False)
        try:
            yield
        finally:
            torch.backends.cuda.enable_cudnn_sdp(was)

    return off()


def earlier_seconds(adapter_dir: Path, checkpoint: str) -> float:
    """Training seconds before ``checkpoint``: the total of the finished run whose last checkpoint it is
    (its adapter's record), else what the checkpoint recorded (an interrupted run; 0 for a checkpoint
    written before checkpoints recorded it)."""
    try:
        meta = json.loads((adapter_dir / META_FILE).read_text())
    except (OSError, ValueError):
        meta = {}
    if meta and str(meta.get("steps")) == Path(checkpoint).name.removeprefix("checkpoint-"):
        return float(meta.get("seconds_total", meta.get("seconds", 0.0)))
    return checkpoint_seconds(checkpoint)



def run_callbacks(cfg: SFTRunConfig, output_dir: Path, extra: Sequence[Any] = ()) -> list:
    """Loss curve, optional wall-clock budget, then ``extra``."""
    budget = [time_budget_callback(cfg.max_minutes)] if cfg.max_minutes else []
    return [loss_callback(output_dir), *budget, *extra]


def last_checkpoint(cfg: SFTRunConfig, output_dir: Path) -> str | None:
    """The checkpoint to resume from, if resuming and one exists."""
    from transformers.trainer_utils import get_last_checkpoint

    if cfg.resume and any(output_dir.glob("checkpoint-*")):
        return get_last_checkpoint(str(output_dir))
    return None


def train_resuming(trainer, cfg: SFTRunConfig, output_dir: Path) -> tuple[Any, float, Path, float, str | None]:
    """Train with the reflection-token learning rate, resuming from the last checkpoint when there is one
    and it belongs to this run (:mod:`training.core.run_identity`), without cuDNN attention
    (:func:`cudnn_attention_off`).

    Returns the train result, its seconds, the adapter folder, the seconds of earlier runs and the
    checkpoint resumed from (None for a fresh run).
    """
    freeze_below(trainer.model, cfg.train_from_layer)
    if cfg.train_from_layer and not any(p.requires_grad for p in trainer.model.parameters()):
        raise TrainingError(f"--train-from-layer {cfg.train_from_layer} leaves nothing to train: the model has "
                            "fewer decoder layers")
    if cfg.token_learning_rate:
        set_token_lr(trainer, cfg.token_learning_rate)
    last = last_checkpoint(cfg, output_dir)
    identity = run_identity(cfg)
    if last:
        check_resume(output_dir, identity, last)  # another run's checkpoints are not continued
    if trainer.is_world_process_zero():
        write_identity(output_dir, identity)
    adapter_dir = output_dir / "adapter"
    earlier = earlier_seconds(adapter_dir, last) if last else 0.0
    trainer.add_callback(elapsed_callback(earlier))
    start = time.time()
    with cudnn_attention_off():
        result = trainer.train(resume_from_checkpoint=last)
    seconds = time.time() - start
    return result, seconds, adapter_dir, earlier, last


def train_and_save(trainer, tokenizer, cfg: SFTRunConfig, ids: Mapping[str, int], output_dir: Path,
                   meta_extra: Mapping[str, Any]) -> RunResult:
    """Train (resuming when possible), then save the ``default`` adapter, tokenizer, metadata and loss curve."""
    result, seconds, adapter_dir, earlier, last = train_resuming(trainer, cfg, output_dir)
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
