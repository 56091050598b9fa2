"""Judges of biography claims: ``judge(entity, claims, passages) -> list[bool | None]``.

A judge labels each atomic claim of an answer about ``entity`` true (True), false (False) or
unknown (None: the judge could not tell; such claims are left out of accuracy and utility). An
entity without passages (an invented person) has nothing to support any claim: every judge
returns False for all its claims without asking a model.

* :class:`OverlapJudge` (:mod:`.overlap`, the default): a pure function of the claim's words and
  the passages about the entity, sharing no signal with any model (:func:`overlap_support`): a
  claim is true iff some window of passage sentences holds every number and proper noun of the
  claim and most of its other content words. Independent of the restraint scorer, but lexical: a
  rewording it cannot match counts as false, and a false claim made of true words (a role swapped
  between two names of one sentence) as true. Its agreement with hand-labelled claims is measured
  by :mod:`.agreement` (``python -m langchain_selfrag.evaluation.bio.judges``).
* :class:`IsSupJudge` (:mod:`.issup`): the reflection model's IsSup of the claim against each of
  the entity's passages (:class:`langchain_selfrag.restraint.IsSupScorer`: ``p(Full) + 0.5
  p(Partial)`` normalised over the three IsSup tokens, the best passage counts); a claim is true
  iff that score is above ``threshold`` (0.5). With the bundled model this is a weak, self-graded
  judge: the model grades its own claims (and its fine-tunes' claims) with the same critique it
  uses to write and, under ``restrain``, to filter them.
* :class:`ChatJudge` (:mod:`.chat`): any LangChain chat model or LLM (or a ``str -> str``
  callable), one prompt per claim with the passages; the first True/False-like word of the reply
  is the verdict (:func:`parse_verdict`); a reply without one gets ``fallback`` (None by default)
  and is counted in ``unparsed``.

:mod:`.base` holds the :class:`Judge` protocol and :func:`describe`.
"""

from .base import Judge, describe
from .chat import VERDICT_PROMPT, ChatJudge, format_passages, parse_verdict
from .issup import IsSupJudge
from .overlap import OverlapJudge, claim_terms, is_about, overlap_support

__all__ = [
    "VERDICT_PROMPT",
    "ChatJudge",
    "IsSupJudge",
    "Judge",
    "OverlapJudge",
    "claim_terms",
    "describe",
    "format_passages",
    "is_about",
    "overlap_support",
    "parse_verdict",
]
