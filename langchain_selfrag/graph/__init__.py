"""Self-RAG as a LangGraph state machine: typed state, composable nodes, knobs in the context.

>>> from langchain_selfrag.graph import compile_graph, SelfRAGContext
>>> graph = compile_graph()
>>> out = graph.invoke({"question": "..."}, context=SelfRAGContext(lm=lm, retriever=retriever),
...                    config={"recursion_limit": 64})
"""

from .builder import build_graph, compile_graph
from .context import SelfRAGContext, default_lm, default_model_path, resolve_context
from .corrective import correct, route_after_correct
from .nodes import (
    ABSTAIN_ANSWER,
    abstain,
    closed_set_key,
    decide_retrieval,
    generate,
    grade_relevance,
    grade_support,
    grade_utility,
    prepare,
    rank,
    retrieve,
    route_after_decision,
    route_after_rank,
    route_after_select,
    select,
)
from .state import Beam, Candidate, InputState, OutputState, SelfRAGState

__all__ = [
    "ABSTAIN_ANSWER",
    "Beam",
    "Candidate",
    "InputState",
    "OutputState",
    "SelfRAGContext",
    "SelfRAGState",
    "abstain",
    "build_graph",
    "closed_set_key",
    "compile_graph",
    "correct",
    "decide_retrieval",
    "default_lm",
    "default_model_path",
    "generate",
    "grade_relevance",
    "grade_support",
    "grade_utility",
    "prepare",
    "rank",
    "resolve_context",
    "retrieve",
    "route_after_decision",
    "route_after_correct",
    "route_after_rank",
    "route_after_select",
    "select",
]
