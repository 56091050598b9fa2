"""Each public package's ``__all__`` is pinned: a name added or dropped is a deliberate change here too.

As in the LangChain partner packages, every name must also import.
"""

from __future__ import annotations

import importlib

import pytest

EXPECTED_ALL = {
    "langchain_selfrag": [
        "ChatSelfRAG", "ReflectionLM", "SelfRAGChain", "SelfRAGConfig", "__version__", "build_graph",
        "compile_graph", "load_reflection_lm",
    ],
    "langchain_selfrag.lm": [
        "ChatModelError", "ChatReflectionLM", "Generation", "ReflectionLM", "ReflectionLMBase", "ReflectionLMError",
        "ReflectionPoint", "load_reflection_lm",
    ],
    "langchain_selfrag.graph": [
        "ABSTAIN_ANSWER", "Beam", "Candidate", "InputState", "OutputState", "SelfRAGContext", "SelfRAGState",
        "abstain", "build_graph", "closed_set_key", "compile_graph", "correct", "decide_retrieval",
        "default_lm", "default_model_path", "generate", "grade_relevance", "grade_support", "grade_utility",
        "prepare", "rank", "resolve_context", "restrain", "retrieve", "route_after_correct",
        "route_after_decision", "route_after_rank", "route_after_select", "select",
    ],
    "langchain_selfrag.restraint": [
        "ABSTENTION", "ClaimRecord", "ClaimRewriter", "ClaimScorer", "ClaimSplitter", "IsSupConsistencyScorer",
        "IsSupScorer", "LLMClaimSplitter", "LLMRewriter", "P_EVAL", "P_REWRITE", "P_SAFE_WRITE", "P_SPLITTER",
        "P_WRITE", "REASON_PREFIX", "RestraintResult", "SPLITTER_EXAMPLE", "SelfConsistencyScorer",
        "SentenceSplitter", "check_rho", "claim_records", "expected_utility", "format_facts", "format_sources",
        "guess_entity", "join_kept", "keep_claims", "kept_expected_utility", "lam", "model_texts",
        "name_the_subject", "parse_claims", "parse_probability", "restrain_answer", "sentence_pool",
        "split_answer", "split_sentences", "splitter_prompt", "strip_citations", "utility", "without_own",
    ],
    "langchain_selfrag.retrieval": [
        "CHROMA_TIMEOUT", "DEFAULT_COLLECTION", "DEFAULT_STORE", "FusionRetriever", "IndexReport", "JSONL_SUFFIXES",
        "MARKDOWN_SUFFIXES", "RECORDS_FILE", "RETRIEVER_THREADS", "SQLiteRecordManager", "SUPPORTED_SUFFIXES", "SyncPlan",
        "TEXT_SUFFIXES", "afetch_documents", "as_source", "chroma_http_client", "chroma_timeout", "chunk_id",
        "default_embeddings", "document_title", "fetch_documents", "format_plan", "format_skipped", "index_path",
        "iter_files", "load_file", "minilm_path", "open_store", "passage_heading", "reciprocal_rank_fusion", "records_path",
        "scan_folder", "split_documents", "store_size", "with_k",
    ],
    "langchain_selfrag.evaluation": [
        "DEFAULT_SYSTEMS", "Dataset", "DatasetError", "EvalError", "EvalOptions", "Example", "FORMATS",
        "Passage", "SYSTEMS", "SystemSpec", "detect_format", "exact_match", "f1", "load_corpus",
        "load_dataset", "match", "normalize_answer", "resolve_systems", "run_evaluation", "select_examples",
    ],
    "langchain_selfrag.bundled": [
        "ADAPTER_FILE", "BUNDLED", "BundleError", "BundledModel", "CONFIG_FILE", "DEFAULT_MODEL", "INSTALL_HINT",
        "META_FILE", "MODEL_NAME", "OUTTYPE", "build_gguf", "build_model", "bundle_available", "bundle_dir",
        "bundled_model", "cache_dir", "cached_gguf_path", "default_model_path", "shipped_files",
    ],
    "langchain_selfrag.export": [
        "ExportError",
    ],
}


@pytest.mark.parametrize("module", sorted(EXPECTED_ALL))
def test_all_is_pinned(module: str) -> None:
    assert sorted(importlib.import_module(module).__all__) == sorted(EXPECTED_ALL[module])


@pytest.mark.parametrize("module", sorted(EXPECTED_ALL))
def test_every_public_name_imports(module: str) -> None:
    package = importlib.import_module(module)
    missing = [name for name in EXPECTED_ALL[module] if not hasattr(package, name)]
    assert missing == []
