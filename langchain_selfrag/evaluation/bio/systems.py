"""The systems compared on biographies ("LLMs can learn self-restraint through iterative self-reflection", section 4):
each turns a question into an answer text and an abstention flag.

* ``prompted``: P_write (Table 4) to the reflection LM, no retrieval (Self-RAG ``mode="never"``);
* ``safety_prompted``: P_safe write, likewise;
* ``selfrag``: Self-RAG with the entity's own passages given to the chain, prompted with P_write;
  ``mode`` "adaptive" by default (the library's default: the model decides whether to use them;
  the bundled model writes biographies from its own knowledge), or "always" (the bundled model,
  trained on SQuAD, then answers with a name or a short span);
* ``selfrag_rho<r>``: the same with self-restraint at target accuracy ``r`` (``SelfRAGConfig.rho``),
  the claims judged against the passages the answer used, else the given ones;
* ``research``: ReSearch inference, the sample of highest E[U] in a ReSearch record of the question
  (ties: fewer claims first, so the abstention wins a tie at 0), read from a JSONL file made by the
  ReSearch data generator (``selfrag eval bio ... --write-questions q.jsonl``, then
  ``python -m training.research --entities q.jsonl --out research.jsonl``); the inference
  package never imports the training code;
* any ``NAME`` given as ``--model NAME=PATH``: a trained model (a GGUF, an HF folder, or a training
  adapter folder, built into a cached GGUF first) run like ``prompted``.

An answer is an abstention when the chain abstained or when nothing but refusal sentences ("I am
sorry, ...", "I don't know ...") and questions is left of it (:func:`strip_refusals`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...jsonl import iter_jsonl
from ...restraint.claims import split_sentences
from ...restraint.prompts import P_SAFE_WRITE, P_WRITE
from ...tokens import strip_reflection_tokens
from ..common.errors import DatasetError
from .data import BioQuestion

#: A system's output on one question: ``{"answer": str, "abstained": bool, ...}`` (JSON-ready).
BioOutput = dict[str, Any]
BioRunner = Callable[[BioQuestion], BioOutput]

_REFUSAL = re.compile(
    r"^\W*(?:i'?m sorry|i am sorry|sorry\b|apologi[sz]e|unfortunately\b|i apologi[sz]e"
    r"|i (?:do not|don'?t|did not|didn'?t) (?:know|have|recogni[sz]e|find)"
    r"|i (?:cannot|can'?t|could not|couldn'?t|am unable|was unable|am not able|'?m unable|'?m not able)"
    r"|i (?:am not|'?m not) (?:aware|familiar|sure)|i have no (?:information|knowledge|record|data)"
    r"|there (?:is|are) no (?:information|record|data|known)|no (?:information|record) (?:is|was) available)",
    re.IGNORECASE,
)
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


def is_refusal(sentence: str) -> bool:
    """A sentence that declines to answer (``I am sorry, ...``, ``I don't know ...``, ``I cannot ...``)."""
    return bool(_REFUSAL.match(sentence or ""))


def strip_refusals(text: str) -> tuple[bool, str]:
    """``(abstained, rest)``: ``text`` without refusal sentences and questions; abstained when nothing
    else is left (an empty answer says nothing and counts as an abstention)."""
    clean = strip_reflection_tokens(text or "")
    kept = [s for s in split_sentences(clean) if not is_refusal(s) and not s.rstrip().endswith("?")]
    return (not kept), " ".join(kept)


@dataclass(frozen=True)
class BioSystemSpec:
    """A named system. kind: ``chain`` (SelfRAGChain on ``model``'s LM with ``settings``) or ``research``.

    template: the P_write-style prompt (``{entity}``); passages: give the entity's passages;
    model: a ``--model NAME=PATH`` name (None: the base reflection LM).
    """

    name: str
    kind: str = "chain"
    template: str = P_WRITE
    settings: Mapping[str, Any] = field(default_factory=dict)
    passages: bool = False
    model: str | None = None
    description: str = ""

    def key(self) -> dict[str, Any]:
        """What must match when a run resumes."""
        return {"kind": self.kind, "template": self.template, "settings": dict(self.settings),
                "passages": self.passages, "model": self.model}


def rho_name(rho: float) -> str:
    return f"selfrag_rho{rho:g}"


def builtin_systems(rhos: Sequence[float], selfrag_mode: str = "adaptive") -> dict[str, BioSystemSpec]:
    """The prompted, safety-prompted, Self-RAG and Self-RAG + restrain systems (one per rho)."""
    specs = [
        BioSystemSpec("prompted", settings={"mode": "never"}, description="P_write, no retrieval"),
        BioSystemSpec("safety_prompted", template=P_SAFE_WRITE, settings={"mode": "never"},
                      description="P_safe write, no retrieval"),
        BioSystemSpec("selfrag", settings={"mode": selfrag_mode}, passages=True,
                      description=f"Self-RAG given the entity's passages, mode {selfrag_mode}"),
    ]
    for rho in rhos:
        specs.append(BioSystemSpec(rho_name(rho), settings={"mode": selfrag_mode, "rho": float(rho)}, passages=True,
                                   description=f"Self-RAG + restrain, rho* = {rho:g}"))
    return {s.name: s for s in specs}


RESEARCH = BioSystemSpec("research", kind="research", description="ReSearch inference: best sample by E[U]")


def trained_system(name: str) -> BioSystemSpec:
    return BioSystemSpec(name, settings={"mode": "never"}, model=name, description=f"trained model {name}, P_write")


def parse_named_model(value: str) -> tuple[str, str] | None:
    """``"dpo=runs/dpo/adapter"`` -> ``("dpo", "runs/dpo/adapter")``; None when ``value`` is a plain path."""
    name, sep, path = value.partition("=")
    if sep and path and _NAME.match(name):
        return name, path
    return None


def resolve_systems(names: str | Sequence[str] | None, rhos: Sequence[float], *, selfrag_mode: str = "adaptive",
                    research: bool = False, trained: Sequence[str] = ()) -> list[BioSystemSpec]:
    """Systems from a comma list (None: all built-in ones, ``research`` when a file is given, every
    trained model). ``selfrag_restrain`` stands for every ``selfrag_rho<r>``."""
    builtin = builtin_systems(rhos, selfrag_mode)
    clash = sorted(set(trained) & (set(builtin) | {"research", "selfrag_restrain"}))
    if clash:
        raise ValueError(f"model name(s) {', '.join(clash)} clash with built-in systems; pick other names")
    available: dict[str, BioSystemSpec] = {**builtin, "research": RESEARCH, **{n: trained_system(n) for n in trained}}
    if names is None:
        chosen = list(builtin) + (["research"] if research else []) + list(trained)
    else:
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",") if n.strip()]
        chosen = []
        for name in names:
            chosen.extend([rho_name(r) for r in rhos] if name == "selfrag_restrain" else [name])
        unknown = [n for n in chosen if n not in available]
        if unknown:
            raise ValueError(f"unknown system(s): {', '.join(unknown)}; choose from "
                             f"{', '.join([*available, 'selfrag_restrain'])}")
        if not chosen:
            raise ValueError("no systems selected")
    if "research" in chosen and not research:
        raise ValueError("the research system needs --research FILE (ReSearch records of these questions)")
    return [available[n] for n in dict.fromkeys(chosen)]


# -- running ------------------------------------------------------------------------------------
def chain_output(out: Mapping[str, Any]) -> BioOutput:
    """A bio output from a SelfRAGChain output (refusal sentences make an abstention)."""
    answer = str(out.get("answer") or "")
    refused, _ = strip_refusals(answer)
    abstained = bool(out.get("abstained")) or refused
    record: BioOutput = {
        "answer": answer,
        "abstained": abstained,
        "abstain_reason": out.get("abstain_reason") or ("refusal" if refused and not out.get("abstained") else None),
        "retrieved": bool(out.get("retrieved")),
        "n_passages": len(out.get("passages") or []),
    }
    if out.get("restraint") is not None:
        record["restraint_claims"] = list(out.get("claims") or [])
        record["expected_utility"] = out.get("expected_utility")
    return record


def chain_runner(spec: BioSystemSpec, chain: Any, settings: Mapping[str, Any] | None = None) -> BioRunner:
    """Run ``spec`` through ``chain`` (``settings``: run-wide SelfRAGConfig values, the spec's win)."""
    configurable = {**dict(settings or {}), **dict(spec.settings)}

    def run(question: BioQuestion) -> BioOutput:
        payload: dict[str, Any] = {"question": spec.template.format(entity=question.entity)}
        if spec.passages:
            payload["passages"] = list(question.passages)
        return chain_output(chain.invoke(payload, config={"configurable": configurable}))

    return run


# -- ReSearch records ---------------------------------------------------------------------------
def best_sample(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """The best sample under the record's method (:mod:`langchain_selfrag.restraint.ranking`):
    highest E[U] for ReSearch, highest average accuracy (declining below 0.5) for the search baseline."""
    from ...restraint.ranking import rank_samples, record_method

    samples = list(record.get("samples") or [])
    if not samples:
        raise DatasetError(f"ReSearch record {record.get('id')!r} has no samples")
    try:
        return rank_samples(samples, record_method(record))[0]
    except (KeyError, TypeError, ValueError) as exc:
        raise DatasetError(f"ReSearch record {record.get('id')!r}: {exc}") from exc


def load_research(path: str | Path) -> dict[str, Mapping[str, Any]]:
    """ReSearch records by entity (the last record of an entity wins)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise DatasetError(f"ReSearch file not found: {file}")
    records: dict[str, Mapping[str, Any]] = {}
    for lineno, record in iter_jsonl(file, DatasetError):
        entity = record.get("entity")
        if not isinstance(entity, str) or not entity:
            raise DatasetError(f"{file}:{lineno}: a ReSearch record needs an 'entity'")
        records[entity] = record
    return records


def research_runner(records: Mapping[str, Mapping[str, Any]]) -> BioRunner:
    """ReSearch inference from precomputed records: the best sample's text."""

    def run(question: BioQuestion) -> BioOutput:
        record = records.get(question.entity)
        if record is None:
            raise LookupError(f"no ReSearch record for {question.entity!r}")
        sample = best_sample(record)
        text = str(sample.get("text") or strip_reflection_tokens(str(sample.get("completion") or "")))
        refused, _ = strip_refusals(text)
        return {"answer": text, "abstained": bool(sample.get("abstain")) or refused,
                "abstain_reason": "research abstention" if sample.get("abstain") else None,
                "expected_utility": sample.get("expected_utility"), "iteration": sample.get("iteration"),
                "research_rho": record.get("rho"), "research_method": record.get("method")}

    return run


# -- trained models -----------------------------------------------------------------------------
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json", "selfrag_training.json")


def is_adapter_dir(path: Path) -> bool:
    return path.is_dir() and all((path / name).is_file() for name in ADAPTER_FILES)


def adapter_fingerprint(adapter: Path, base: str) -> str:
    digest = hashlib.sha256()
    for name in ADAPTER_FILES[:2]:
        digest.update((adapter / name).read_bytes())
    digest.update(base.encode())
    return digest.hexdigest()[:12]


def adapter_gguf(adapter: str | Path, *, cache: Path | None = None) -> Path:
    """A training adapter folder merged onto its base model (``selfrag_training.json`` ``base_model``)
    and written as a Q8_0 GGUF into the model cache by the bundled model's writer; cached by the
    adapter's fingerprint. Needs the ``transformers`` extra."""
    from ...bundled import build_model, cache_dir
    from ...export.gguf import write_gguf

    folder = Path(adapter).expanduser().resolve()
    meta = json.loads((folder / "selfrag_training.json").read_text(encoding="utf-8"))
    base = str(meta.get("base_model") or "")
    if not base:
        raise DatasetError(f"{folder}/selfrag_training.json names no base_model")
    base_path = Path(base).expanduser()
    if not base_path.is_absolute() and not base_path.exists() and (folder / base).exists():
        base_path = folder / base
    target = (cache or cache_dir()) / f"eval-{folder.name}-{adapter_fingerprint(folder, base)}.gguf"
    if target.is_file():
        return target
    model, tokenizer = build_model(folder, base_path if base_path.exists() else base)  # type: ignore[arg-type]
    source = base_path if base_path.suffix == ".gguf" else None
    return write_gguf(model, tokenizer, target, source_gguf=source, outtype="q8_0", name=f"selfrag-{folder.name}")


def model_path(path: str) -> str:
    """A loadable reflection-LM path: adapter folders become a cached GGUF, anything else is kept."""
    local = Path(path).expanduser()
    return str(adapter_gguf(local)) if is_adapter_dir(local) else path
