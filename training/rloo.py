"""RLOO on ReSearch prompts (seed 004): TRL's ``RLOOTrainer`` + PEFT LoRA, reward = expected utility.

The reward of a sampled completion is its E[U] at rho* (Eq. 4) under a FROZEN evaluator: a
``ClaimSplitter`` breaks the answer into claims and a ``ClaimScorer`` gives each a probability of
being true; an abstention (empty, the record's own abstention, or a one-sentence refusal) scores 0.
The online reward is computed on the sampled completion itself. Command line: claims are sentences
(:class:`~langchain_selfrag.restraint.claims.SentenceSplitter`), scored by the
``--evaluator-model`` reflection model with ``--evaluator passages`` (default:
:class:`~langchain_selfrag.restraint.scoring.IsSupScorer` over the passages each record carries,
``"passages": [{"title", "text"}]``) or ``--evaluator consistency``
(:class:`~langchain_selfrag.restraint.consistency.IsSupConsistencyScorer` against the record's
stored samples: the paper's self-consistency, for data made without passages). A scorer that needs
passages refuses records without them (:func:`check_evidence`) instead of scoring every claim 0.5.

``--offline`` rewards from the fixed ReSearch data instead: a completion equal to one of the
question's samples gets that sample's E[U]; otherwise each claim's probability is looked up among
the question's scored claims, and a claim not found there is scored by the evaluator when one is
given, else gets ``--unknown-p`` (default: the mean probability of the question's claims). TRL
samples new completions, so most claims may miss and the reward then measures little more than
length: the hit / miss / fallback counts (:meth:`UtilityReward.counts`) go into the training
metadata (``reward_counts``), and a claim miss rate above :data:`MISS_RATE_WARN` is warned about.

Defaults follow Table 17 (RLOO: 600 steps, lr 1e-6, batch 512 = 8 x 64 accumulation, KL 0.1);
advantages are normalised to standard deviation 1, as in the paper. Writes what ``training.dpo``
writes, plus ``reward_curve.png``.

Example::

    python -m training.rloo --data runs/research.jsonl --output-dir runs/rloo --offline \\
        --base-model SmolLM2-135M-Instruct.Q4_1.gguf --init-adapter langchain_selfrag/models/selfrag-smollm2-135m \\
        --max-steps 30 --batch-size 8 --grad-accum 1 --num-generations 4 --max-completion-length 96 --lr 2e-5
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from langchain_selfrag.restraint.utility import expected_utility
from langchain_selfrag.tokens import strip_reflection_tokens

from .cli_common import parse
from .dpo import (
    ResearchRunConfig,
    RunResult,
    add_research_arguments,
    expose_head_bias,
    prepare_policy,
    research_config,
    run_callbacks,
    set_threads,
    sync_ref_adapter,
    train_and_save,
)
from .research_pairs import (
    ResearchDataError,
    abstention_texts,
    find_sample,
    is_abstention,
    normalise_answer,
    read_research,
    record_id,
    rloo_prompts,
    sample_utility,
)
from .sft import META_FILE, TrainingError, trainer_arguments

DEFAULT_RHO = 0.5
#: Offline rewards: warn when more than this share of the sampled claims is not in the data.
MISS_RATE_WARN = 0.5


def question_of(record: Mapping[str, Any]) -> str:
    """The record's question (its prompt when it has none)."""
    return str(record.get("question") or record["prompt"])


def evidence_of(record: Mapping[str, Any]) -> list:
    """The record's ``passages`` as LangChain documents (title in metadata)."""
    from langchain_core.documents import Document

    return [Document(page_content=str(p.get("text", "")), metadata={"title": str(p.get("title", ""))})
            for p in record.get("passages") or () if isinstance(p, Mapping)]


class RecordClaimScorer:
    """An offline ``ClaimScorer``: each claim's probability from the scored claims of its question.

    A claim matches a stored claim of the record with the same question after
    :func:`~training.research_pairs.normalise_answer` (repeats averaged). Unmatched claims go to
    ``fallback`` (any ``ClaimScorer``) when given, else get ``default_p``, else the mean
    probability of the question's claims (0.5 when it has none). Counters (claims): ``hits``,
    ``misses``, and of the misses ``fallback_scored`` (by ``fallback``) and ``defaulted`` (a fixed p).
    """

    def __init__(self, records: Iterable[Mapping[str, Any]], *, fallback: Any = None, default_p: float | None = None):
        if default_p is not None and not 0.0 <= default_p <= 1.0:
            raise ValueError(f"default_p must lie in [0, 1], not {default_p!r}")
        self.table: dict[str, dict[str, list[float]]] = {}
        for record in records:
            known = self.table.setdefault(question_of(record), {})
            for sample in record["samples"]:
                for claim in sample.get("claims") or ():
                    known.setdefault(normalise_answer(str(claim["text"])), []).append(float(claim["p"]))
        self.fallback = fallback
        self.default_p = default_p
        self.hits = self.misses = self.fallback_scored = self.defaulted = 0

    @property
    def needs_evidence(self) -> bool:
        """True when the fallback scorer judges claims against passages."""
        return bool(getattr(self.fallback, "needs_evidence", False))

    def unknown_p(self, question: str) -> float:
        """The probability of a claim the data does not hold."""
        if self.default_p is not None:
            return self.default_p
        probs = [p for ps in self.table.get(question, {}).values() for p in ps]
        return fmean(probs) if probs else 0.5

    def score(self, claims: Sequence[str], *, question: str, entity: str | None = None,
              evidence: Sequence[Any] = (), samples: Sequence[str] = ()) -> list[float]:
        known = self.table.get(question, {})
        found = [known.get(normalise_answer(c)) for c in claims]
        probs: list[float | None] = [fmean(ps) if ps else None for ps in found]
        missing = [i for i, p in enumerate(probs) if p is None]
        self.hits += len(claims) - len(missing)
        self.misses += len(missing)
        if missing and self.fallback is not None:
            filled = self.fallback.score([claims[i] for i in missing], question=question, entity=entity,
                                         evidence=evidence, samples=samples)
            self.fallback_scored += len(missing)
        else:
            filled = [self.unknown_p(question)] * len(missing)
            self.defaulted += len(missing)
        for i, p in zip(missing, filled):
            probs[i] = float(p)
        return [float(p) for p in probs]  # type: ignore[arg-type]


class UtilityReward:
    """A TRL reward function: the expected utility of each completion under a frozen evaluator.

    ``records`` are the ReSearch records (the dataset's ``record_id`` column points into them);
    ``rho`` overrides each record's own rho*. With a ``tokenizer`` the completion is decoded from
    its ids with the reflection tokens kept (then stripped with any evidence span), so a generated
    ``<paragraph>`` is not taken for answer text. ``offline``: a completion equal to a stored sample
    gets that sample's E[U]. Rewards are cached per (record, completion).
    """

    __name__ = "expected_utility"

    def __init__(self, records: Sequence[Mapping[str, Any]], splitter: Any, scorer: Any, *,
                 rho: float | None = None, tokenizer: Any = None, offline: bool = False) -> None:
        self.records = {record_id(r, i): r for i, r in enumerate(records)}
        self.splitter = splitter
        self.scorer = scorer
        self.rho = rho
        self.tokenizer = tokenizer
        self.offline = offline
        self.cache: dict[tuple[str, str], float] = {}
        self.matched = self.scored = self.abstained = 0

    def counts(self) -> dict[str, Any]:
        """What the rewards were made of: completions matched to a stored sample, abstentions, scored
        completions, claims the evaluator gave its no-evidence fallback and, for an offline scorer,
        claim hits / misses / fallbacks and the miss rate."""
        out: dict[str, Any] = {"completions": len(self.cache), "matched_samples": self.matched,
                               "abstained": self.abstained, "scored": self.scored}
        judge = self.scorer.fallback if isinstance(self.scorer, RecordClaimScorer) else self.scorer
        if judge is not None and hasattr(judge, "fallbacks"):  # claims the frozen evaluator could not judge
            out["evaluator_fallbacks"] = int(judge.fallbacks)
        if isinstance(self.scorer, RecordClaimScorer):
            sc = self.scorer
            looked = sc.hits + sc.misses
            out |= {"claim_hits": sc.hits, "claim_misses": sc.misses, "claim_fallback_scored": sc.fallback_scored,
                    "claim_defaulted": sc.defaulted, "claim_miss_rate": sc.misses / looked if looked else None}
        return out

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any],
                 completion_ids: Sequence[Sequence[int]] | None = None, record_id: Sequence[str] | None = None,
                 **_: Any) -> list[float]:
        if record_id is None:
            raise TrainingError("the RLOO dataset needs a 'record_id' column")
        texts = self.texts(completions, completion_ids)
        return [self.reward(rid, text) for rid, text in zip(record_id, texts)]

    def texts(self, completions: Sequence[Any], completion_ids: Sequence[Sequence[int]] | None) -> list[str]:
        """Raw completion texts: decoded with special tokens when a tokenizer is known, else TRL's text."""
        if self.tokenizer is None or completion_ids is None:
            return [c if isinstance(c, str) else str(c) for c in completions]
        drop = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id} - {None}
        return [self.tokenizer.decode([int(t) for t in ids if int(t) not in drop], skip_special_tokens=False)
                for ids in completion_ids]

    def reward(self, rid: str, raw: str) -> float:
        """E[U] of one raw completion for record ``rid``."""
        key = (rid, raw)
        if key not in self.cache:
            self.cache[key] = self._reward(self.records[rid], raw)
        return self.cache[key]

    def _reward(self, record: Mapping[str, Any], raw: str) -> float:
        if self.offline:
            sample = find_sample(record, raw)
            if sample is not None:
                self.matched += 1
                return sample_utility(sample, self.rho)
        text = strip_reflection_tokens(raw)
        if is_abstention(text, abstention_texts(record)):
            self.abstained += 1
            return 0.0
        entity = record.get("entity")
        claims = self.splitter.split(text, entity=entity)
        if not claims:
            self.abstained += 1
            return 0.0
        samples = [str(s.get("text") or s["completion"]) for s in record["samples"] if not s.get("abstain")]
        probs = self.scorer.score(claims, question=question_of(record), entity=entity,
                                  evidence=evidence_of(record), samples=samples)
        self.scored += 1
        rho = self.rho if self.rho is not None else float(record.get("rho", DEFAULT_RHO))
        return expected_utility(probs, rho)


def needs_evidence(scorer: Any) -> bool:
    """True for a scorer that judges claims against passages (it declares ``needs_evidence``)."""
    return bool(getattr(scorer, "needs_evidence", False))


def check_evidence(records: Sequence[Mapping[str, Any]], scorer: Any) -> None:
    """TrainingError when ``scorer`` needs passages and some records carry none.

    Such a scorer would give every claim of those records its no-evidence fallback (a constant),
    and RLOO would train on a reward that says nothing.
    """
    if not needs_evidence(scorer):
        return
    bare = [record_id(r, i) for i, r in enumerate(records) if not evidence_of(r)]
    if bare:
        shown = ", ".join(repr(b) for b in bare[:3]) + (" ..." if len(bare) > 3 else "")
        raise TrainingError(
            f"{len(bare)} of {len(records)} records have no passages ({shown}), but the {type(scorer).__name__} "
            "evaluator judges claims against passages: make the data with passages (training.research_data "
            "--passages / --scorer passages) or use --evaluator consistency")


def record_reward_counts(reward: UtilityReward, adapter_dir: str | Path, *,
                         warn_above: float = MISS_RATE_WARN) -> dict[str, Any]:
    """Add the reward's :meth:`~UtilityReward.counts` to the adapter's metadata (``reward_counts``);
    warn when the offline claim miss rate is above ``warn_above``."""
    counts = reward.counts() | {"miss_rate_warn_above": warn_above}
    rate = counts.get("claim_miss_rate")
    counts["miss_rate_warning"] = bool(rate is not None and rate > warn_above)
    if counts["miss_rate_warning"]:
        warnings.warn(f"offline RLOO reward: {rate:.0%} of the sampled claims are not in the ReSearch data "
                      f"(above {warn_above:.0%}); they got a fallback probability, so the reward mostly counts "
                      "sentences. Use an online evaluator (--evaluator-model without --offline).", stacklevel=2)
    path = Path(adapter_dir) / META_FILE
    if path.is_file():
        meta = json.loads(path.read_text())
        path.write_text(json.dumps(meta | {"reward_counts": counts}, indent=1))
    return counts


def write_reward_curve(log_history: Sequence[Mapping[str, Any]], output_dir: str | Path) -> Path | None:
    """Plot the mean reward against step (``reward_history.json``, ``reward_curve.png``)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    points = [(h["step"], h["reward"]) for h in log_history if "reward" in h and "step" in h]
    (out / "reward_history.json").write_text(json.dumps(points, indent=1))
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(*zip(*points), label="mean reward (E[U])")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out / "reward_curve.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _reward_callback(output_dir: Path):
    from transformers import TrainerCallback

    class RewardCurve(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            write_reward_curve(state.log_history, output_dir)

        def on_train_end(self, args, state, control, **kwargs):
            write_reward_curve(state.log_history, output_dir)

    return RewardCurve()


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
        callbacks=run_callbacks(cfg, out, [_reward_callback(out), *callbacks]),
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


EVALUATORS = ("passages", "consistency")


def default_evaluator(records: Sequence[Mapping[str, Any]], evaluator_model: str | None, *, offline: bool,
                      unknown_p: float | None = None, threads: int | None = None, evaluator: str = "passages"):
    """``(splitter, scorer)``: sentences as claims, scored by the frozen ``evaluator_model``.

    ``evaluator``: ``"passages"`` (IsSup against each record's passages) or ``"consistency"``
    (IsSup self-consistency with the record's stored samples). Offline, the data is looked up
    first and the evaluator scores only the claims it does not hold. Records a passage scorer
    cannot judge are refused (:func:`check_evidence`).
    """
    from langchain_selfrag.restraint.claims import SentenceSplitter

    if evaluator not in EVALUATORS:
        raise TrainingError(f"--evaluator must be one of {', '.join(EVALUATORS)}, not {evaluator!r}")
    scorer = None
    if evaluator_model:
        from langchain_selfrag.lm import load_reflection_lm, resolve_backend
        from langchain_selfrag.restraint.calibration import calibration_for
        from langchain_selfrag.restraint.consistency import IsSupConsistencyScorer
        from langchain_selfrag.restraint.scoring import IsSupScorer

        if evaluator == "passages":
            check_evidence(records, IsSupScorer)
        options = {"n_threads": threads} if threads and resolve_backend(evaluator_model) == "llamacpp" else {}
        lm = load_reflection_lm(evaluator_model, **options)
        scorer = (IsSupScorer(lm, calibration=calibration_for(lm)) if evaluator == "passages"
                  else IsSupConsistencyScorer(lm))
    if offline:
        scorer = RecordClaimScorer(records, fallback=scorer, default_p=unknown_p)
    if scorer is None:
        raise TrainingError("--evaluator-model (a GGUF of the frozen judge) is required unless --offline")
    return SentenceSplitter(), scorer


def build_parser() -> argparse.ArgumentParser:
    """Options of ``python -m training.rloo`` (Table 17 defaults)."""
    ap = argparse.ArgumentParser(prog="python -m training.rloo", description=__doc__.split("\n\n")[0])
    add_research_arguments(ap, lr=1e-6, steps=600, batch=8, accum=64)
    ap.add_argument("--beta", type=float, default=0.1, help="KL coefficient (Table 17 regularization: 0.1)")
    ap.add_argument("--num-generations", type=int, default=4, help="completions per prompt (the leave-one-out group)")
    ap.add_argument("--max-completion-length", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--raw-advantages", action="store_true", help="do not normalise advantages to std 1")
    ap.add_argument("--evaluator-model", help="frozen judge for IsSup claim scores (a GGUF path)")
    ap.add_argument("--evaluator", choices=EVALUATORS, default="passages",
                    help="judge claims against each record's passages, or by self-consistency with its samples")
    ap.add_argument("--offline", action="store_true", help="rewards from the fixed ReSearch data (see the module doc)")
    ap.add_argument("--unknown-p", type=float, help="offline: probability of a claim not in the data")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    from langchain_selfrag.lm import ReflectionLMError

    ap = build_parser()
    args = parse(ap, argv)
    try:
        cfg = research_config(args, beta=args.beta)
        records = read_research(cfg.train_file, cfg.limit)
        splitter, scorer = default_evaluator(records, args.evaluator_model, offline=args.offline,
                                             unknown_p=args.unknown_p, threads=args.threads,
                                             evaluator=args.evaluator)
        result = train_rloo(cfg, splitter=splitter, scorer=scorer, offline=args.offline, records=records,
                            num_generations=args.num_generations, max_completion_length=args.max_completion_length,
                            temperature=args.temperature, top_p=args.top_p,
                            normalize_advantages=not args.raw_advantages)
    except (TrainingError, ResearchDataError, ReflectionLMError) as exc:
        ap.exit(2, f"error: {exc}\n")
    counts = json.loads((result.adapter_dir / META_FILE).read_text()).get("reward_counts")
    print(json.dumps({"adapter": str(result.adapter_dir), "steps": result.steps, "train_loss": result.train_loss,
                      "prompts": result.examples, "seconds": round(result.seconds, 1), "reward_counts": counts},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
