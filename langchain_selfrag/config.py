"""Runtime knobs of Self-RAG inference (graph context, chain config, CLI flags)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal, get_args

from .scoring import Weights

RetrievalMode = Literal["adaptive", "always", "never"]
AnswerForm = Literal["generated", "sentence"]
#: The values of :data:`AnswerForm` (for validation and command-line choices).
ANSWER_FORMS: tuple[str, ...] = get_args(AnswerForm)


#: The settings in which the paper's behaviour differs from the defaults (:meth:`SelfRAGConfig.paper`).
PAPER_SETTINGS: dict[str, Any] = {"abstain_isrel": 0.0, "abstain_issup": 0.0, "abstain_closed_book": False,
                                   "answer_form": "generated"}


class ConfigError(ValueError):
    """A Self-RAG setting has a value it cannot take."""


def _knob(default: Any, help: str, **cli: Any) -> Any:
    """A config field whose ``help`` documents it (and its CLI flag; ``cli`` may name the ``flag``
    or a ``metavar``), as TRL documents its config dataclasses."""
    return field(default=default, metadata={"help": help, **cli})


@dataclass(frozen=True)
class SelfRAGConfig:
    """Knobs of one Self-RAG run; defaults are the paper's, except abstention (see :meth:`paper`), whose
    bars default to the model's own calibration (:mod:`langchain_selfrag.abstention`).

    Each field documents itself in its ``help`` metadata, which is also the help of the field's
    ``selfrag ask`` flag (:mod:`langchain_selfrag.config_flags` generates the flags from the fields):
    a new knob is added here and nowhere else.
    """

    mode: RetrievalMode = _knob("adaptive", "retrieval: adaptive (the model decides), always or never")
    threshold: float = _knob(0.2, "delta of the retrieve decision: retrieve iff normalised p([Retrieval]) > delta")
    k: int = _knob(5, "passages per retrieval")
    w_rel: float = _knob(1.0, "weight of IsRel in the segment score")
    w_sup: float = _knob(1.0, "weight of IsSup in the segment score")
    w_use: float = _knob(0.5, "weight of IsUse in the segment score")
    hard_constraints: bool = _knob(False, "drop candidates whose IsSup is [No support / Contradictory]")
    long_form: bool = _knob(
        False, "long form: segment-level beam search instead of one segment per passage", flag="--long")
    beam_width: int = _knob(2, "beam width B of long-form search")
    max_segments: int = _knob(3, "depth T (segments at most) of long-form search")
    max_new_tokens: int = _knob(100, "token budget of one generated segment")
    step_budget: int = _knob(
        64, "hard cap on graph steps (LangGraph recursion limit); never an unbounded loop")
    abstain_isrel: float | None = _knob(
        None, "abstention bar of a run that retrieved: abstain when no retrieved passage reaches this IsRel "
        "(no passage is relevant); 0 turns it off. None: the model's own bar, from the calibration it ships or "
        "was fitted with (selfrag calibrate; langchain_selfrag.abstention), else 0.5, the model's own "
        "[Relevant] vs [Irrelevant] decision")
    abstain_issup: float | None = _knob(
        None, "abstention bar of a run that retrieved: abstain when the selected answer's IsSup is below this "
        "(its passage does not support it); 0 turns it off. None: the model's own bar (see abstain_isrel), "
        "else 0.25")
    answer_form: AnswerForm | None = _knob(
        None, "short-form answer from a passage: generated (the model's words) or sentence (the sentence of the "
        "cited passage that holds the model's answer, quoted whole; the generated words when no sentence of at "
        "most 60 words holds them, or the passage is not cited; options are never quoted). None: the model's own "
        "choice, from its calibration (see abstain_isrel), else generated")
    closed_set: bool = _knob(False, "aggregate identical answers across passages (options / true-false tasks)")
    write_top: int | None = _knob(
        None, "answers written per retrieval: IsRel of every retrieved passage is read first (the prompt alone, no "
        "generation), and answers are generated only for the N passages judged most relevant (the others stay "
        "candidates without an answer, never chosen; their IsRel still counts for abstention). Saves most of "
        "the decoding of a model that reads passages slowly. None: an answer for every passage, as the paper",
        metavar="N")
    max_passage_tokens: int | None = _knob(
        None, "cap on the tokens of one passage's text in an evidence prompt; longer passages are cut with the "
        "model's own tokenizer (the title is kept) and marked truncated in the trace. None: as many as fit, i.e. "
        "the model's context length minus the prompt (question, earlier segments, markup, title), "
        "max_new_tokens and 16 reserved tokens per segment, split evenly over the segments still to come in "
        "long form. Chosen so that the paper's short passages always go in whole while no passage can "
        "overflow the context; a number only lowers that (to save time per prompt), never raises it")
    decoding_guard: bool = _knob(
        True, "while a segment has no content token yet, the model may not choose end of sequence, a "
        "[Utility:k] or an IsSup token (and an IsRel token only first), so it cannot skip the answer. Applied "
        "to every evidence prompt and to a plain prompt whose beam has no answer text yet (a continuation may "
        "legitimately end at once). Off: plain greedy decoding, which lets a segment end before it has any "
        "answer text")
    rho: float | None = _knob(
        None, "target accuracy rho* of self-restraint (ReSearch paper), 0 <= rho < 1: the restrain node runs after "
        "select, the answer is split into claims, the claims with p(true) > rho are kept and the run "
        "abstains when none is (E[U] <= 0); prints each claim and E[U]. None: no restraint",
        metavar="RHO")
    abstain_closed_book: bool = _knob(
        True, "when a retrieval source was there but the model chose not to retrieve (adaptive mode), "
        "abstain instead of giving its closed-book answer; a small model is almost always wrong closed-book "
        "on factual questions. mode=never, or no retriever and no given passages: closed-book answers are "
        "what was asked for and are given", flag="--closed-book")
    max_retrieval_rounds: int = _knob(
        3, "corrective retrieval (the chain's rewrite / fallback_retriever): retrieval rounds at most, the "
        "first included, when no passage is relevant. Without a rewriter and a fallback there is one round "
        "whatever this says")

    @classmethod
    def paper(cls, **overrides: Any) -> SelfRAGConfig:
        """The paper's abstention settings: never abstain on evidence (both bars 0), give closed-book
        answers, judge the model's own words. It differs from the paper's decoding in one knob:
        ``decoding_guard`` stays on (no empty answers); ``paper(decoding_guard=False)`` decodes as the
        paper does. The run still abstains when the model writes no answer text at all."""
        return cls.from_mapping(PAPER_SETTINGS, **overrides)

    def __post_init__(self) -> None:
        if self.mode not in ("adaptive", "always", "never"):
            raise ConfigError(f"mode must be adaptive, always or never, not {self.mode!r}")
        if self.answer_form is not None and self.answer_form not in ANSWER_FORMS:
            raise ConfigError(f"answer_form must be generated, sentence or None, not {self.answer_form!r}")
        for name in ("k", "beam_width", "max_segments", "max_new_tokens", "step_budget", "max_retrieval_rounds"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, not {value!r}")
        top = self.write_top
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
            raise ConfigError(f"write_top must be a positive integer or None, not {top!r}")
        limit = self.max_passage_tokens
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"max_passage_tokens must be a positive integer or None, not {limit!r}")
        for name in ("decoding_guard", "abstain_closed_book"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, not {getattr(self, name)!r}")
        rho = self.rho
        if rho is not None and (isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0.0 <= rho < 1.0):
            raise ConfigError(f"rho must be None or a number with 0 <= rho < 1, not {rho!r}")
        for name in ("threshold", "abstain_isrel", "abstain_issup"):
            value = getattr(self, name)
            if value is None and name != "threshold":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
                raise ConfigError(f"{name} must lie in [0, 1], not {value!r}")

    @property
    def weights(self) -> Weights:
        return Weights(rel=self.w_rel, sup=self.w_sup, use=self.w_use)

    @classmethod
    def from_mapping(cls, values: dict[str, Any] | None = None, **overrides: Any) -> SelfRAGConfig:
        """Build from a dict (unknown keys are an error, naming the key)."""
        merged = {**(values or {}), **overrides}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(merged) - known)
        if unknown:
            raise ConfigError(f"unknown Self-RAG setting(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**merged)

    def with_(self, **changes: Any) -> SelfRAGConfig:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def knob_help(name: str) -> str:
    """The documentation of the setting ``name`` (its field's ``help``)."""
    for f in fields(SelfRAGConfig):
        if f.name == name:
            return f.metadata["help"]
    raise ConfigError(f"unknown Self-RAG setting: {name}")
