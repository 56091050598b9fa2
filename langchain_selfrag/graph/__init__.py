"""Self-RAG as a LangGraph state machine: typed state, composable nodes, knobs in the context.

* :mod:`.state`: what goes in, what comes out, the working state;
* :mod:`.context`: the run-time context (model, retriever, knobs);
* :mod:`.nodes`: the nodes, one module each;
* :mod:`.routes`: the conditional edges;
* :mod:`.builder`: the graph, wired.

>>> from langchain_selfrag.graph import compile_graph, SelfRAGContext
>>> graph = compile_graph()
>>> out = graph.invoke({"question": "..."}, context=SelfRAGContext(lm=lm, retriever=retriever),
...                    config={"recursion_limit": 64})
"""

from .builder import build_graph, compile_graph
from .context import SelfRAGContext, default_lm, default_model_path, resolve_context
from .nodes.abstain import ABSTAIN_ANSWER, abstain
from .nodes.corrective import correct
from .nodes.critique import grade_relevance, grade_support, grade_utility
from .nodes.decide import decide_retrieval
from .nodes.generate import generate
from .nodes.prepare import prepare
from .nodes.rank import rank
from .nodes.restrain import restrain
from .nodes.retrieve import retrieve
from .nodes.select import closed_set_key, select
from .routes import route_after_correct, route_after_decision, route_after_rank, route_after_select
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
    "restrain",
    "retrieve",
    "route_after_correct",
    "route_after_decision",
    "route_after_rank",
    "route_after_select",
    "select",
]
