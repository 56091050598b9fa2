"""ReSearch data generation ("LLMs can learn self-restraint through iterative self-reflection", section 3.2 and
Algorithm 1): samples with expected utilities.

For each question: K iterations of J samples from a policy, the first with P_write, later ones with
P_rewrite listing the claims believed true so far (p > rho) as "Facts"; every sample is split into
claims (a :class:`~langchain_selfrag.restraint.claims.ClaimSplitter`), each claim gets a probability
from a pluggable :class:`~langchain_selfrag.restraint.scoring.ClaimScorer` given all the answers so
far, and once all rounds are done E[U] (Eq. 4) of every sample uses each claim's latest
probability; an abstention in the policy's style closes the record
with E[U] = 0. The paper's "search" baseline is one round of K*J samples with P_write, ranked by
average accuracy and declining below 0.5 (:mod:`langchain_selfrag.restraint.ranking`).

One JSONL record per question (the "ReSearch data" format read by :mod:`training.restraint.pairs`)::

    {"id", "question", "entity", "rho", "method", "prompt", "samples": [
        {"iteration", "prompt_kind": "write"|"rewrite", "completion", "text", "claims": [{"text", "p", "kept"}],
         "expected_utility", "abstain": false}, ...,
        {"iteration": -1, "completion", "text", "claims": [], "expected_utility": 0.0, "abstain": true}],
     "passages": [{"title", "text"}]   # only when the caller supplied some}

``prompt`` is the policy's prompt for P_write(x): training prompts on x whatever prompt a sample was
drawn with, as in the paper. ``python -m training.research`` is the command line.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from langchain_selfrag import tokens as T
from langchain_selfrag.lm.sampling import stream_seed
from langchain_selfrag.prompts import build_instruction, format_prompt, without_retrieval
from langchain_selfrag.restraint.claims import ClaimSplitter, model_texts
from langchain_selfrag.restraint.prompts import ABSTENTION, P_REWRITE, P_WRITE, format_facts
from langchain_selfrag.restraint.scoring import ClaimScorer
from langchain_selfrag.restraint.utility import check_rho, claim_records, expected_utility

from .questions import Question

Method = Literal["research", "search"]


@dataclass(frozen=True)
class Sample:
    """One answer: ``completion`` is the exact string to train on, ``text`` the plain answer."""

    completion: str
    text: str


class Policy(Protocol):
    """A sampler of answers: the model being trained (or any model whose answers we collect)."""

    def prompt_for(self, instruction: str) -> str:
        """The exact prompt string the model sees for a user instruction (P_write / P_rewrite text)."""
        ...

    def sample(self, prompts: list[str], n: int, *, temperature: float, top_p: float,
               seed: int | None) -> list[list[Sample]]:
        """``n`` samples for each instruction of ``prompts`` (seeded: the same seed, the same samples)."""
        ...

    def abstention(self, entity: str) -> Sample:
        """The answer that says nothing (E[U] = 0), written as this policy writes answers."""
        ...


class ReflectionLMPolicy:
    """A Self-RAG reflection LM writing from its own knowledge: ``[No Retrieval]`` forced after the prompt.

    Completions are ``[No Retrieval]`` plus the raw generated text (reflection tokens kept, e.g. the
    closing ``[Utility:k]``), as in the generator's training data; ``text`` drops the reflection
    tokens. The decoding guard is on (no empty answers). The abstention is
    :data:`~langchain_selfrag.restraint.prompts.ABSTENTION` closed by the utility token this model
    itself finds most probable after it.
    """

    def __init__(self, lm: Any, *, max_new_tokens: int = 160, guard: bool = True) -> None:
        self.lm = lm
        self.max_new_tokens = max_new_tokens
        self.guard = guard

    def prompt_for(self, instruction: str) -> str:
        return format_prompt(build_instruction(instruction))

    def sample(self, prompts: list[str], n: int, *, temperature: float, top_p: float,
               seed: int | None) -> list[list[Sample]]:
        flat = [without_retrieval(self.prompt_for(p)) for p in prompts for _ in range(n)]
        gens = self.lm.generate(flat, max_new_tokens=self.max_new_tokens, stop_at_retrieval=False, guard=self.guard,
                                temperature=temperature, top_p=top_p, seed=seed)
        samples = [Sample(T.NO_RETRIEVAL + g.text, g.answer.strip()) for g in gens]
        return [samples[i * n:(i + 1) * n] for i in range(len(prompts))]

    def abstention(self, entity: str) -> Sample:
        text = ABSTENTION.format(entity=entity)
        head = without_retrieval(self.prompt_for(P_WRITE.format(entity=entity))) + T.neutralise(text)
        probs = self.lm.candidate_probs([head], T.UTILITY)[0]
        closing = max(T.UTILITY, key=lambda tok: (probs.get(tok, 0.0), tok))
        return Sample(T.NO_RETRIEVAL + T.neutralise(text) + closing, text)


class ChatModelPolicy:
    """Any LangChain chat model or LLM; the prompt is the instruction itself.

    Sample ``j`` of a call goes through a copy of the model with ``temperature``, ``top_p`` and
    ``seed`` set (seed ``stream_seed(seed, j)``) where the model has such fields (ChatOpenAI,
    ChatOllama, ...); prompts go in one ``batch`` per sample index.
    """

    def __init__(self, model: Any) -> None:
        self.model = model

    def prompt_for(self, instruction: str) -> str:
        return instruction

    def configured(self, temperature: float, top_p: float, seed: int | None) -> Any:
        """The model with the sampling fields it has set (itself when it has none)."""
        fields = getattr(type(self.model), "model_fields", {})
        wanted = {"temperature": temperature, "top_p": top_p, "seed": seed}
        update = {k: v for k, v in wanted.items() if k in fields and v is not None}
        return self.model.model_copy(update=update) if update else self.model

    def sample(self, prompts: list[str], n: int, *, temperature: float, top_p: float,
               seed: int | None) -> list[list[Sample]]:
        out: list[list[Sample]] = [[] for _ in prompts]
        for j in range(n):
            model = self.configured(temperature, top_p, stream_seed(seed, j) & 0x7FFFFFFF if seed is not None else None)
            for i, text in enumerate(model_texts(model, list(prompts))):
                out[i].append(Sample(text, T.strip_reflection_tokens(text).strip()))
        return out

    def abstention(self, entity: str) -> Sample:
        text = ABSTENTION.format(entity=entity)
        return Sample(text, text)


@dataclass
class ResearchConfig:
    """Algorithm 1's settings (paper: K = 3, J = 16, rho = 0.5)."""

    iterations: int = 3
    samples: int = 16
    rho: float = 0.5
    temperature: float = 1.0
    top_p: float = 0.9
    seed: int = 0
    method: Method = "research"
    #: At most this many facts in P_rewrite, the most probable first (None: all, as in the paper).
    max_facts: int | None = None

    def __post_init__(self) -> None:
        check_rho(self.rho)
        if self.iterations < 1 or self.samples < 1:
            raise ValueError("iterations and samples must be at least 1")
        if self.method not in ("research", "search"):
            raise ValueError(f"method must be 'research' or 'search', not {self.method!r}")


def question_seed(seed: int, qid: str, iteration: int) -> int:
    """The policy's seed for one iteration of one question (independent of the question's position)."""
    return stream_seed(seed, zlib.crc32(qid.encode("utf-8")), iteration)


def rewrite_facts(probs: dict[str, float], rho: float, limit: int | None = None) -> list[str]:
    """The claims believed true (p > rho), in first-seen order; with ``limit``, the most probable."""
    facts = [c for c, p in probs.items() if p > rho]
    if limit is not None and len(facts) > limit:
        keep = set(sorted(facts, key=lambda c: -probs[c])[:limit])
        facts = [c for c in facts if c in keep]
    return facts


@dataclass
class ResearchRun:
    """Algorithm 1 for one policy, claim splitter and claim scorer (the evaluator)."""

    policy: Policy
    splitter: ClaimSplitter
    scorer: ClaimScorer
    config: ResearchConfig = field(default_factory=ResearchConfig)

    def rounds(self) -> list[int]:
        """Samples per iteration: K rounds of J, or one round of K*J for the search baseline."""
        cfg = self.config
        return [cfg.iterations * cfg.samples] if cfg.method == "search" else [cfg.samples] * cfg.iterations

    def sample_record(self, k: int, kind: str, sample: Sample, claims: list[str],
                      probs: dict[str, float]) -> dict[str, Any]:
        """One sample of a record, its claims scored with ``probs`` (the final probabilities)."""
        ps = [probs[c] for c in claims]
        return {"iteration": k, "prompt_kind": kind, "completion": sample.completion, "text": sample.text,
                "claims": claim_records(claims, ps, self.config.rho),
                "expected_utility": expected_utility(ps, self.config.rho), "abstain": False}

    def record(self, q: Question) -> dict[str, Any]:
        """The ReSearch record of one question.

        A claim is scored when a round brings it (against all the answers so far, so a claim said
        again later is scored again with more of them); E[U] of every sample is computed once the
        record is complete, from each claim's latest probability (the paper computes Eq. 4 once the
        dataset is produced, not with a round's earlier estimates).
        """
        cfg = self.config
        answers: list[str] = []
        probs: dict[str, float] = {}  # every claim so far -> its latest probability
        drawn_all: list[tuple[int, str, Sample, list[str]]] = []
        instruction = P_WRITE.format(entity=q.entity)
        for k, n in enumerate(self.rounds(), start=1):
            kind = "write" if k == 1 else "rewrite"
            if k > 1:
                facts = rewrite_facts(probs, cfg.rho, cfg.max_facts)
                instruction = P_REWRITE.format(entity=q.entity, facts=format_facts(facts))
            drawn = self.policy.sample([instruction], n, temperature=cfg.temperature, top_p=cfg.top_p,
                                       seed=question_seed(cfg.seed, q.id, k))[0]
            answers += [s.text for s in drawn]
            claims = [self.splitter.split(s.text, entity=q.entity) for s in drawn]
            unique = list(dict.fromkeys(c for cs in claims for c in cs))
            scores = self.scorer.score(unique, question=q.question, entity=q.entity, evidence=q.passages,
                                       samples=answers) if unique else []
            probs.update(zip(unique, (float(p) for p in scores)))
            drawn_all += [(k, kind, s, cs) for s, cs in zip(drawn, claims)]
        samples = [self.sample_record(k, kind, s, cs, probs) for k, kind, s, cs in drawn_all]
        stop = self.policy.abstention(q.entity)
        samples.append({"iteration": -1, "completion": stop.completion, "text": stop.text, "claims": [],
                        "expected_utility": 0.0, "abstain": True})
        out: dict[str, Any] = {"id": q.id, "question": q.question, "entity": q.entity, "rho": cfg.rho,
                               "method": cfg.method, "prompt": self.policy.prompt_for(P_WRITE.format(entity=q.entity)),
                               "samples": samples}
        if q.passages:
            out["passages"] = [{"title": d.metadata.get("title", ""), "text": d.page_content} for d in q.passages]
        return out


# -- resumable JSONL output ----------------------------------------------------------------------
def done_ids(path: str | os.PathLike) -> set[str]:
    """Ids of the complete records in ``path``; a torn last line (a crash mid-write) is cut off.

    A malformed line anywhere else raises ValueError: the file is not this command's output.
    """
    p = Path(path)
    if not p.exists():
        return set()
    data = p.read_bytes()
    ids: set[str] = set()
    good = 0
    for line in data.splitlines(keepends=True):
        if line.strip():
            record = _parse(line) if line.endswith(b"\n") else None
            if record is None:
                if good + len(line) < len(data):
                    raise ValueError(f"{p}: malformed line at byte {good}: not a ReSearch record")
                break
            ids.add(str(record["id"]))
        good += len(line)
    if good < len(data):
        with p.open("r+b") as fh:
            fh.truncate(good)
    return ids


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) and "id" in record else None


def run(questions: Iterable[Question], research: ResearchRun, out: str | os.PathLike, *,
        progress: bool = True, on_record: Callable[[dict[str, Any]], None] | None = None) -> int:
    """Write a record per question not yet in ``out`` (appended, flushed line by line); the count written."""
    from tqdm import tqdm

    done = done_ids(out)
    todo = [q for q in questions if q.id not in done]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(out, "a", encoding="utf-8") as fh, tqdm(total=len(todo), desc=f"ReSearch ({research.config.method})",
                                                       disable=not progress, unit="q") as bar:
        for q in todo:
            record = research.record(q)
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            written += 1
            best = max(s["expected_utility"] for s in record["samples"])
            bar.set_postfix(best=f"{best:.2f}")
            bar.update(1)
            if on_record is not None:
                on_record(record)
    return written
