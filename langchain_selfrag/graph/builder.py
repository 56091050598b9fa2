"""Assemble the Self-RAG ``StateGraph`` from the nodes in :mod:`langchain_selfrag.graph.nodes` and the
routers in :mod:`langchain_selfrag.graph.routes`.

::

    prepare -> decide_retrieval -(retrieve?)-> retrieve -> generate -> grade_relevance
            -> grade_support -> grade_utility -> rank -(another long-form round?)-> decide_retrieval
                                                      \\-(no passage relevant?)-> correct -> generate
                                                      \\-> select -(abstain?)-> abstain -> END
                                                                  \\-(rho set?)-> restrain -> END
                                                                  \\-> END

``correct`` (:mod:`langchain_selfrag.graph.nodes.corrective`) runs only when the context has a
rewriter or a fallback retriever: it rewrites the question or asks the fallback,
``max_retrieval_rounds`` rounds at most. ``restrain`` (:mod:`langchain_selfrag.graph.nodes.restrain`)
keeps the claims of the answer that are likely enough at the target accuracy ``rho``, or abstains;
without ``rho`` the graph ends after ``select``.

The compiled graph takes :class:`InputState`, returns :class:`OutputState`, reads its knobs from
the run-time context (:class:`SelfRAGContext`) and works as a subgraph of a larger graph. Run it
with ``config={"recursion_limit": context.config.step_budget}`` (``SelfRAGChain`` does).
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from .context import SelfRAGContext
from .nodes.abstain import abstain
from .nodes.corrective import correct
from .nodes.critique import grade_relevance, grade_support, grade_utility
from .nodes.decide import decide_retrieval
from .nodes.generate import generate
from .nodes.prepare import prepare
from .nodes.rank import rank
from .nodes.restrain import restrain
from .nodes.retrieve import retrieve_node
from .nodes.select import select
from .routes import route_after_correct, route_after_decision, route_after_rank, route_after_select
from .state import InputState, OutputState, SelfRAGState


def build_graph(context_schema: type = SelfRAGContext) -> StateGraph:
    """The uncompiled Self-RAG graph (add nodes or edges before compiling if you like).

    ``context_schema``: :class:`SelfRAGContext` (Python objects) or ``ServerContext`` (JSON, for a
    LangGraph server); the nodes accept either at run time.
    """
    g = StateGraph(SelfRAGState, context_schema=context_schema, input_schema=InputState, output_schema=OutputState)
    g.add_node("prepare", prepare)
    g.add_node("decide_retrieval", decide_retrieval)
    g.add_node("retrieve", retrieve_node)  # sync and async (aretrieve) variants
    g.add_node("generate", generate)
    g.add_node("grade_relevance", grade_relevance)
    g.add_node("grade_support", grade_support)
    g.add_node("grade_utility", grade_utility)
    g.add_node("rank", rank)
    g.add_node("correct", correct)
    g.add_node("select", select)
    g.add_node("abstain", abstain)
    g.add_node("restrain", restrain)
    g.add_edge(START, "prepare")
    g.add_edge("prepare", "decide_retrieval")
    g.add_conditional_edges("decide_retrieval", route_after_decision, ["retrieve", "generate"])
    g.add_edge("retrieve", "generate")
    g.add_edge("generate", "grade_relevance")
    g.add_edge("grade_relevance", "grade_support")
    g.add_edge("grade_support", "grade_utility")
    g.add_edge("grade_utility", "rank")
    g.add_conditional_edges("rank", route_after_rank, ["decide_retrieval", "correct", "select"])
    g.add_conditional_edges("correct", route_after_correct, ["generate", "correct", "select"])
    g.add_conditional_edges("select", route_after_select,
                            {"abstain": "abstain", "restrain": "restrain", "__end__": END})
    g.add_edge("abstain", END)
    g.add_edge("restrain", END)
    return g


def compile_graph(**compile_kwargs: Any):
    """The compiled Self-RAG graph (``compile_kwargs`` go to ``StateGraph.compile``, e.g. a checkpointer)."""
    return build_graph().compile(name="selfrag", **compile_kwargs)
