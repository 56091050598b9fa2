"""benchmarks/backend_agreement.py: its prompts end where each critique group is read; its gap is the worst one."""

from __future__ import annotations

import pytest

from benchmarks.backend_agreement import CORPUS, corpus_prompts, worst_difference
from langchain_selfrag import tokens as T


def test_one_prompt_per_page_and_group_each_ending_where_its_group_is_read():
    prompts = corpus_prompts()
    pages = len(list(CORPUS.glob("*.md")))
    assert pages and {kind: len(group) for kind, group in prompts.items()} == dict.fromkeys(T.CRITIQUE_KINDS, pages)
    for asked, evidence, answered, supported in zip(*(prompts[k] for k in T.CRITIQUE_KINDS), strict=True):
        assert asked.endswith("### Response:\n") and evidence.startswith(asked)
        assert evidence.endswith("</paragraph>") and len(evidence) > len(asked) + 100  # a passage, not an empty one
        assert answered.startswith(evidence + T.RELEVANT) and supported == answered + T.FULLY_SUPPORTED
        assert not any(tok in answered[len(evidence) + len(T.RELEVANT):] for tok in T.REFLECTION_TOKENS)


def test_worst_difference_is_the_largest_gap_over_prompts_and_candidates():
    a = [{"x": 0.5, "y": 0.5}, {"x": 0.9, "y": 0.1}]
    b = [{"x": 0.45, "y": 0.55}, {"x": 0.7, "y": 0.3}]
    assert worst_difference(a, b) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        worst_difference(a, b[:1])
