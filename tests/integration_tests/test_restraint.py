"""Self-restraint ("LLMs can learn self-restraint through iterative self-reflection"): the utility by hand, Table 4's
prompts, claim splitting and parsing of bad model output, and both claim scorers (self-consistency through LangChain
fakes, IsSup through the fake and the bundled reflection model)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.documents import Document

from langchain_selfrag.restraint import (
    IsSupScorer,
)


@pytest.fixture(scope="module")
def bundled_lm(bundled_gguf: Any) -> Any:
    from langchain_selfrag.lm import load_reflection_lm

    return load_reflection_lm(str(bundled_gguf))


def test_bundled_model_issup_prefers_a_copied_claim_over_an_invented_one(bundled_lm: Any) -> None:
    doc = Document("The Zorblatt Bridge is a stone arch bridge in the market town of Quillmere. It crosses the "
                   "River Fennow in seven low arches. The Zorblatt Bridge opened to traffic in 1873.",
                   metadata={"title": "The Zorblatt Bridge"})
    claims = ["The Zorblatt Bridge opened to traffic in 1873.",
              "The Zorblatt Bridge was built by pirates from the moon in 2091."]
    scorer = IsSupScorer(bundled_lm, aggregate="max")
    copied, invented = scorer.score(claims, question="Tell me about the Zorblatt Bridge.", evidence=[doc])
    assert copied > 0.5 > invented
    assert copied - invented > 0.3


def test_bundled_model_joint_support_ignores_a_passage_about_somebody_else(bundled_lm: Any) -> None:
    """IsSup alone ("max") believes a claim about another entity worded like the passage; the joint
    IsRel x IsSup of the shipped calibration does not, because the passage is irrelevant to the question."""
    doc = Document("The Zorblatt Bridge is a stone arch bridge in the market town of Quillmere. It crosses the "
                   "River Fennow in seven low arches. The Zorblatt Bridge opened to traffic in 1873.",
                   metadata={"title": "The Zorblatt Bridge"})
    own = ("The Zorblatt Bridge opened to traffic in 1873.", "Tell me about the Zorblatt Bridge.")
    other = ("The Quenby Tower opened to traffic in 1873.", "Tell me about the Quenby Tower.")
    for how in ("max", "joint"):
        scorer = IsSupScorer(bundled_lm, aggregate=how)
        (p_own,), (p_other,) = (scorer.score([c], question=q, evidence=[doc]) for c, q in (own, other))
        if how == "max":
            assert p_other > 0.5  # the wording matches, whoever it is about
        else:
            assert p_own > 0.5 and p_other < 0.3
