"""The IsSup judge: the reflection model's own IsSup of each claim against the entity's passages.

A claim is true iff ``p(Full) + 0.5 p(Partial)`` (normalised over the three IsSup tokens, the best
passage counts; :class:`langchain_selfrag.restraint.IsSupScorer`) is above ``threshold`` (0.5).
With the bundled model this is a weak, self-graded judge: the model grades its own claims (and
its fine-tunes' claims) with the same critique it uses to write and, under ``restrain``, to
filter them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document

from ....restraint.scoring import IsSupScorer


class IsSupJudge:
    """The reflection model's IsSup of each claim against the entity's passages; true iff > ``threshold``."""

    def __init__(self, lm: Any, *, threshold: float = 0.5, max_passages: int | None = None,
                 model_name: str = "") -> None:
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"threshold must lie in [0, 1), not {threshold!r}")
        if max_passages is not None and max_passages < 1:
            raise ValueError("max_passages must be at least 1")
        self.lm = lm
        self.threshold = float(threshold)
        self.max_passages = max_passages
        self.model_name = model_name
        self.scorer = IsSupScorer(lm, aggregate="max", fallback=0.0)

    @property
    def name(self) -> str:
        limit = f"-top{self.max_passages}" if self.max_passages else ""
        return f"issup{limit}-gt{self.threshold:g}"

    @property
    def description(self) -> str:
        which = f"the first {self.max_passages}" if self.max_passages else "all"
        model = f" of {self.model_name}" if self.model_name else ""
        return (f"IsSup{model}: a claim is true iff max over {which} of the entity's passages of "
                f"p(Full) + 0.5 p(Partial) > {self.threshold:g}; no passages: false")

    def scores(self, entity: str, claims: Sequence[str], passages: Sequence[Document]) -> list[float]:
        """The IsSup score of each claim (max over the passages); 0.0 without passages."""
        docs = list(passages)[: self.max_passages] if self.max_passages else list(passages)
        if not claims or not docs:
            return [0.0] * len(claims)
        return self.scorer.score(list(claims), question=f"Who is {entity}?", evidence=docs)

    def __call__(self, entity: str, claims: Sequence[str], passages: Sequence[Document]) -> list[bool | None]:
        return [score > self.threshold for score in self.scores(entity, claims, passages)]
