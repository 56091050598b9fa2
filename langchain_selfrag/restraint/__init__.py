"""Self-restraint (ReSearch, "LLMs can learn self-restraint through iterative self-reflection"):
say only what is likely true, or nothing at all.

* :mod:`.utility`: ``lam``, ``utility``, ``expected_utility`` (Eq. 1-4) and ``keep_claims``, pure;
* :mod:`.prompts`: Table 4's P_write, P_safe write, P_rewrite, P_eval and P_splitter;
* :mod:`.claims`: claim splitting (by sentence, or through any LangChain chat model or LLM);
* :mod:`.scoring`: the claim scorer protocol and claim probabilities from Self-RAG IsSup;
* :mod:`.calibration`: IsSup aggregated over passages and calibrated on labelled claims (pure);
* :mod:`.ranking`: how ReSearch and the search baseline rank samples (pure);
* :mod:`.rewrite`: the kept claims as text (P_rewrite, or whole sentences);
* :mod:`.consistency`: self-consistency (P_eval, or read by the reflection model's IsSup head);
* :mod:`.answer`: one answer restrained: its claims kept at ``rho``, or an abstention.

Nothing here needs LangGraph: the ``restrain`` graph node (knob ``rho`` of ``SelfRAGConfig``) is
:mod:`langchain_selfrag.graph.nodes.restrain`.
"""

from .answer import REASON_PREFIX, RestraintResult, restrain_answer, split_answer
from .claims import (
    ClaimSplitter,
    LLMClaimSplitter,
    SentenceSplitter,
    guess_entity,
    model_texts,
    parse_claims,
    split_sentences,
    strip_citations,
)
from .consistency import IsSupConsistencyScorer, SelfConsistencyScorer, sentence_pool, without_own
from .prompts import (
    ABSTENTION,
    P_EVAL,
    P_REWRITE,
    P_SAFE_WRITE,
    P_SPLITTER,
    P_WRITE,
    SPLITTER_EXAMPLE,
    format_facts,
    format_sources,
    splitter_prompt,
)
from .rewrite import ClaimRewriter, LLMRewriter, join_kept, name_the_subject
from .scoring import ClaimScorer, IsSupScorer, parse_probability
from .utility import (
    ClaimRecord,
    check_rho,
    claim_records,
    expected_utility,
    keep_claims,
    kept_expected_utility,
    lam,
    utility,
)

__all__ = [
    "ABSTENTION",
    "P_EVAL",
    "P_REWRITE",
    "P_SAFE_WRITE",
    "P_SPLITTER",
    "P_WRITE",
    "REASON_PREFIX",
    "SPLITTER_EXAMPLE",
    "ClaimRecord",
    "ClaimRewriter",
    "ClaimScorer",
    "ClaimSplitter",
    "IsSupConsistencyScorer",
    "IsSupScorer",
    "LLMClaimSplitter",
    "LLMRewriter",
    "RestraintResult",
    "SelfConsistencyScorer",
    "SentenceSplitter",
    "check_rho",
    "claim_records",
    "expected_utility",
    "format_facts",
    "format_sources",
    "guess_entity",
    "join_kept",
    "keep_claims",
    "kept_expected_utility",
    "lam",
    "model_texts",
    "name_the_subject",
    "parse_claims",
    "parse_probability",
    "restrain_answer",
    "sentence_pool",
    "split_answer",
    "split_sentences",
    "splitter_prompt",
    "strip_citations",
    "utility",
    "without_own",
]

