"""The Self-RAG graph driven by FakeReflectionLM: every conditional edge, every mode, the scores."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from pydantic import Field
from typing_extensions import TypedDict

from langchain_selfrag import scoring as S
from langchain_selfrag import tokens as T
from langchain_selfrag.config import SelfRAGConfig
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment
from langchain_selfrag.graph import (
    ABSTAIN_ANSWER,
    SelfRAGContext,
    closed_set_key,
    compile_graph,
    decide_retrieval,
    generate,
    grade_relevance,
    prepare,
    route_after_decision,
    route_after_rank,
    route_after_select,
)
from langchain_selfrag.graph.nodes.retrieve import aretrieve, retrieve

PARIS = Document("Paris is the capital of France.", metadata={"source": "france.md", "title": "France"})
LYON = Document("Lyon is a large French city.", metadata={"source": "lyon.md", "title": "Lyon"})
BANANA = Document("Bananas are yellow fruit.", metadata={"source": "fruit.md", "title": "Fruit"})
DOCS = [PARIS, LYON, BANANA]


def run(lm: Any, question: Any = "What is the capital of France?", retriever: Any = None, **settings: Any) -> dict:
    """The graph under the paper's knobs (no abstention unless a test sets a bar; the default
    abstention is tested in test_abstention.py)."""
    ctx = SelfRAGContext(lm=lm, retriever=retriever if retriever is not None else (lambda q: DOCS),
                         config=SelfRAGConfig.paper(**settings))
    state = question if isinstance(question, dict) else {"question": question}
    return compile_graph().invoke(state, context=ctx, config={"recursion_limit": ctx.config.step_budget})


def paris_lm(**kw: Any) -> FakeReflectionLM:
    kw.setdefault("retrieve", 0.9)
    return FakeReflectionLM(
        passages={"Paris": FakeSegment("Paris.", isrel=0.95), "Lyon": FakeSegment("Lyon.", isrel=0.6, issup="partial")},
        default=FakeSegment("Bananas.", isrel=0.05, issup="none", isuse=1),
        no_retrieval=FakeSegment("I think Paris.", isrel=None, isuse=3),
        **kw,
    )


def selected(out: dict) -> list[dict]:
    return [t for t in out["trace"] if t["selected"]]


# -- decide-retrieval edge ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mode", "p", "threshold", "expect"),
    [
        ("adaptive", 0.9, 0.2, True),
        ("adaptive", 0.25, 0.2, True),  # p > delta retrieves even below 0.5 (the authors' inverted test fails here)
        ("adaptive", 0.1, 0.2, False),
        ("adaptive", 0.2, 0.2, False),  # strictly greater
        ("always", 0.0, 0.2, True),
        ("never", 1.0, 0.2, False),
    ],
)
def test_decide_retrieval_edge(mode: str, p: float, threshold: float, expect: bool) -> None:
    lm = paris_lm(retrieve=p)
    out = run(lm, mode=mode, threshold=threshold)
    assert out["retrieved"] is expect
    assert bool(out["passages"]) is expect
    assert out["retrieve_probability"] == (pytest.approx(p) if mode == "adaptive" else None)
    asked = lm.calls_of("candidate_probs")
    assert len(asked) == (1 if mode == "adaptive" else 0)
    if asked:
        assert asked[0][1] == [T.NO_RETRIEVAL, T.RETRIEVAL]
    if not expect:
        assert out["answer"] == "I think Paris."
        assert selected(out)[0]["passage"] is None and selected(out)[0]["isrel"] is None
        gen_prompts = lm.calls_of("generate")[0][0]
        assert len(gen_prompts) == 1 and gen_prompts[0].endswith("### Response:\n" + T.NO_RETRIEVAL)


def test_route_after_decision_function() -> None:
    assert route_after_decision({"beams": [{"id": 1, "need_retrieval": True}]}) == "retrieve"
    assert route_after_decision({"beams": [{"id": 1, "need_retrieval": False}]}) == "generate"
    assert route_after_decision({"beams": [{"id": 1, "need_retrieval": True, "done": True}]}) == "generate"


def test_no_retriever_means_no_retrieval_even_when_the_model_asks() -> None:
    ctx = SelfRAGContext(lm=paris_lm(retrieve=1.0), retriever=None)
    out = compile_graph().invoke({"question": "q"}, context=ctx)
    assert out["retrieved"] is False and out["answer"] == "I think Paris."


# -- short form: batching, scores, ranking -------------------------------------------------------
def test_short_form_one_batched_call_and_segment_score() -> None:
    lm = paris_lm()
    out = run(lm, k=3)
    generate_calls = lm.calls_of("generate")
    assert len(generate_calls) == 1
    prompts, first, stop = generate_calls[0]
    assert len(prompts) == 3 and first == T.GROUPS[T.Kind.ISREL] and stop is False
    assert all(T.RETRIEVAL + T.PARAGRAPH_START in p for p in prompts)
    assert out["answer"] == "Paris."
    assert out["citations"] == [PARIS]
    best = selected(out)[0]
    assert best["passage"] == 0
    issup = S.issup_score(FakeSegment().issup_probs())
    isuse = S.isuse_score(FakeSegment().isuse_probs())
    seq = S.sequence_probability(-0.1 * 4, 4)  # [Relevant] Paris. [Fully supported] [Utility:5]
    assert best["isrel"] == pytest.approx(0.95)
    assert best["issup"] == pytest.approx(issup)
    assert best["isuse"] == pytest.approx(isuse)
    assert best["score"] == pytest.approx(seq + 0.95 + issup + 0.5 * isuse)
    assert [t["passage"] for t in out["trace"]] == [0, 1, 2]
    assert len(selected(out)) == 1


def test_weights_change_the_ranking() -> None:
    lm = FakeReflectionLM(retrieve=0.9, passages={
        "Paris": FakeSegment("Paris.", isrel=0.99, issup="none", isuse=3),
        "Lyon": FakeSegment("Lyon.", isrel=0.40, issup="full", isuse=3),
    })
    assert run(lm, k=2)["answer"] == "Lyon."  # IsSup dominates with the default weights
    assert run(lm, k=2, w_sup=0.0)["answer"] == "Paris."  # ... and IsRel without it


def test_hard_constraints_drop_unsupported() -> None:
    lm = FakeReflectionLM(retrieve=0.9, passages={
        "Paris": FakeSegment("Paris.", isrel=0.99, issup="none", isuse=5),
        "Lyon": FakeSegment("Lyon.", isrel=0.2, issup="partial", isuse=1),
    })
    soft = run(lm, k=2, w_sup=0.0)
    assert soft["answer"] == "Paris." and not any(t["dropped"] for t in soft["trace"])
    hard = run(lm, k=2, w_sup=0.0, hard_constraints=True)
    assert hard["answer"] == "Lyon."
    assert [t["dropped"] for t in hard["trace"]] == [True, False]


def test_closed_set_aggregates_identical_answers() -> None:
    lm = FakeReflectionLM(retrieve=0.9, passages={
        "Paris": FakeSegment("False", isrel=0.9),
        "Lyon": FakeSegment("true.", isrel=0.6, issup="partial"),
        "Banana": FakeSegment("True", isrel=0.6, issup="partial"),
    })
    assert run(lm, k=3)["answer"] == "False"  # best single candidate
    out = run(lm, k=3, closed_set=True)
    assert out["answer"].lower().strip(".") == "true"
    assert [t["selected"] for t in out["trace"]] == [False, True, True]
    assert out["citations"] == [LYON, BANANA] or out["citations"] == [BANANA, LYON]


def test_closed_set_key_maps_options() -> None:
    opts = ["Paris", "Lyon"]
    assert closed_set_key("B: Lyon", opts) == "B"
    assert closed_set_key("The answer is Paris.", opts) == "A"
    assert closed_set_key("b", opts) == "B"
    assert closed_set_key(" True. ") == "true"


def test_given_passages_replace_the_retriever() -> None:
    def boom(q: str) -> list[Document]:
        raise AssertionError("the retriever must not be called")

    out = run(paris_lm(), {"question": "q", "passages": [LYON]}, retriever=boom)
    assert out["passages"] == [LYON] and out["answer"] == "Lyon."


# -- missing / malformed reflection tokens --------------------------------------------------------
def test_missing_isrel_falls_back_to_candidate_probs_then_zero() -> None:
    class NoFirstProbs(FakeReflectionLM):
        def generate(self, prompts, **kw):
            gens = super().generate(prompts, **kw)
            for g in gens:
                g.first_probs = {}
            return gens

    lm = NoFirstProbs(retrieve=0.9, passages={"Paris": FakeSegment("Paris.", isrel=0.8),
                                              "Lyon": FakeSegment("Lyon.", isrel=None)})
    out = run(lm, k=2)
    isrel_calls = [c for c in lm.calls_of("candidate_probs") if c[1] == list(T.GROUPS[T.Kind.ISREL])]
    assert len(isrel_calls) == 1 and len(isrel_calls[0][0]) == 2
    assert [t["isrel"] for t in out["trace"]] == [pytest.approx(0.8), 0.0]


def test_missing_issup_and_isuse_count_as_zero_and_are_not_dropped() -> None:
    lm = FakeReflectionLM(retrieve=0.9, default=FakeSegment("x", isrel=0.5, issup=None, isuse=None))
    out = run(lm, k=1, hard_constraints=True)
    t = out["trace"][0]
    assert t["issup"] == 0.0 and t["isuse"] == 0.0 and not t["dropped"]
    assert out["answer"] == "x"


def test_empty_answer_text_is_not_selected_and_all_empty_abstains() -> None:
    lm = FakeReflectionLM(retrieve=0.9, passages={"Paris": FakeSegment("", isrel=0.99), "Lyon": FakeSegment("Lyon.", isrel=0.1)})
    assert run(lm, k=2)["answer"] == "Lyon."
    empty = FakeReflectionLM(retrieve=0.9, default=FakeSegment(""))
    out = run(empty, k=2)
    assert out["abstained"] and "no answer text" in out["abstain_reason"]


# -- select -> abstain edge ------------------------------------------------------------------------
def test_abstains_when_no_passage_reaches_the_bar() -> None:
    lm = FakeReflectionLM(retrieve=0.9, default=FakeSegment("Guess.", isrel=0.3, issup="partial"))
    answered = run(lm, k=2, abstain_isrel=0.3)
    assert not answered["abstained"] and answered["answer"] == "Guess."
    out = run(lm, k=2, abstain_isrel=0.5)
    assert out["abstained"] and out["answer"] == ABSTAIN_ANSWER
    assert "IsRel >= 0.5" in out["abstain_reason"]
    assert out["citations"] == [] and not selected(out)
    out = run(lm, k=2, abstain_issup=0.9)
    assert out["abstained"] and "IsSup >= 0.9" in out["abstain_reason"]


def test_abstains_when_hard_constraints_drop_everything() -> None:
    lm = FakeReflectionLM(retrieve=0.9, default=FakeSegment("Wrong.", issup="none"))
    out = run(lm, k=2, hard_constraints=True)
    assert out["abstained"] and "hard constraint" in out["abstain_reason"]


def test_abstains_when_retrieval_finds_nothing_and_bars_are_set() -> None:
    lm = paris_lm()
    out = run(lm, retriever=lambda q: [], abstain_isrel=0.5)
    assert out["abstained"] and "no passages" in out["abstain_reason"]
    fallback = run(lm, retriever=lambda q: [])
    assert fallback["retrieved"] is True and fallback["passages"] == []
    assert fallback["answer"] == "I think Paris." and not fallback["abstained"]


def test_route_after_select_function() -> None:
    assert route_after_select({"pending_abstain": "why"}) == "abstain"
    assert route_after_select({"pending_abstain": None}) == END


# -- long form ------------------------------------------------------------------------------------
def long_lm() -> FakeReflectionLM:
    return FakeReflectionLM(
        retrieve=0.9,
        passages={
            "Paris": FakeSegment("Paris is the capital.", isrel=0.9, then_retrieve=True),
            "Eiffel": FakeSegment("The Eiffel tower is there.", isrel=0.9, isuse=5),
            "Banana": FakeSegment("Bananas.", isrel=0.05, issup="none", isuse=1),
        },
    )


EIFFEL = Document("The Eiffel tower is 330 metres tall.", metadata={"source": "eiffel.md", "title": "Eiffel"})


def long_retriever(queries: list[str]):
    def retrieve(q: str) -> list[Document]:
        queries.append(q)
        return [EIFFEL, BANANA] if "Paris is the capital." in q else [PARIS, BANANA]

    return retrieve


def test_long_form_retrieves_per_segment_with_previous_segment_and_cites() -> None:
    queries: list[str] = []
    lm = long_lm()
    out = run(lm, "Tell me about Paris.", retriever=long_retriever(queries), long_form=True, k=2)
    assert queries == ["Tell me about Paris.", "Tell me about Paris.\nParis is the capital."]
    assert out["answer"] == "Paris is the capital. [1] The Eiffel tower is there. [2]"
    assert out["citations"] == [PARIS, EIFFEL]
    assert out["passages"] == [PARIS, BANANA, EIFFEL]
    gen_calls = lm.calls_of("generate")
    assert all(stop is True for _, _, stop in gen_calls)
    # depth 2 prompts continue the first segment, then add new evidence
    second = [p for p in gen_calls[1][0] if "Eiffel" in p][0]
    assert "Paris is the capital." in second and second.endswith(T.PARAGRAPH_END)
    assert "Paris is the capital." + T.FULLY_SUPPORTED + T.RETRIEVAL + T.PARAGRAPH_START in second
    assert second.count(T.RETRIEVAL) == 2 and "Paris is the capital of France." in second  # earlier evidence kept
    depths = [t["depth"] for t in selected(out)]
    assert depths == [0, 1]


def test_long_form_beam_width_and_max_segments_bound_the_search() -> None:
    lm = FakeReflectionLM(retrieve=0.9, default=FakeSegment("More.", isrel=0.8, then_retrieve=True))
    out = run(lm, long_form=True, k=3, beam_width=2, max_segments=3)
    calls = lm.calls_of("generate")
    assert len(calls) == 3  # one batched call per depth, never more than max_segments
    assert [len(c[0]) for c in calls] == [3, 6, 6]  # depth 1 and 2: beam_width beams x k passages
    assert out["answer"].count("More.") == 3


def test_long_form_never_mode_continues_without_evidence() -> None:
    lm = FakeReflectionLM(retrieve=0.9, no_retrieval=FakeSegment("Step.", then_retrieve=True))
    out = run(lm, long_form=True, mode="never", max_segments=2)
    assert out["retrieved"] is False and out["answer"] == "Step. Step."
    second = lm.calls_of("generate")[1][0][0]
    assert second.endswith("Step." + T.NO_RETRIEVAL)


def test_long_form_eos_ends_the_beam() -> None:
    lm = FakeReflectionLM(retrieve=0.9, default=FakeSegment("Done.", isrel=0.8))
    out = run(lm, long_form=True, k=2, max_segments=5)
    assert len(lm.calls_of("generate")) == 1 and out["answer"] == "Done. [1]"


def test_route_after_rank_function() -> None:
    ctx = SelfRAGContext(lm=object(), config=SelfRAGConfig(long_form=True, max_segments=3))
    rt = Runtime(context=ctx)
    alive = {"beams": [{"id": 1, "done": False}], "depth": 1, "remaining_steps": 50}
    assert route_after_rank(alive, rt) == "decide_retrieval"
    assert route_after_rank({**alive, "depth": 3}, rt) == "select"
    assert route_after_rank({**alive, "beams": [{"id": 1, "done": True}]}, rt) == "select"
    assert route_after_rank({**alive, "remaining_steps": 5}, rt) == "select"
    short = Runtime(context=SelfRAGContext(lm=object()))
    assert route_after_rank(alive, short) == "select"


def test_step_budget_stops_the_search_gracefully() -> None:
    lm = FakeReflectionLM(retrieve=0.9, default=FakeSegment("More.", isrel=0.8, then_retrieve=True))
    out = run(lm, long_form=True, k=1, beam_width=1, max_segments=50, step_budget=30)
    rounds = len(lm.calls_of("generate"))
    assert 1 <= rounds < 50 and out["answer"].count("More.") == rounds


# -- the nodes on their own, as a subgraph, streaming -------------------------------------------
def test_nodes_are_usable_on_their_own() -> None:
    lm = paris_lm()
    rt = Runtime(context=SelfRAGContext(lm=lm, retriever=lambda q: DOCS, config=SelfRAGConfig(k=2)))
    state: dict[str, Any] = {"question": "capital?"}
    state.update(prepare(state, rt))
    state.update(decide_retrieval(state, rt))
    assert state["beams"][0]["need_retrieval"] and state["retrieve_probability"] == pytest.approx(0.9)
    state["beams"][0]["evidence"] = [0, 1]
    state["passages"] = [PARIS, LYON]
    state.update(generate(state, rt))
    state.update(grade_relevance(state, rt))
    assert [c["isrel"] for c in state["candidates"]] == [pytest.approx(0.95), pytest.approx(0.6)]


def test_prepare_rejects_bad_input() -> None:
    from langchain_selfrag.errors import EmptyQuestionError, InvalidInputError, QuestionTooLongError

    rt = Runtime(context=SelfRAGContext(lm=paris_lm(), max_question_chars=10))
    with pytest.raises(EmptyQuestionError):
        prepare({"question": "  "}, rt)
    with pytest.raises(QuestionTooLongError):
        prepare({"question": "x" * 11}, rt)
    with pytest.raises(InvalidInputError):
        prepare({"question": 3}, rt)
    with pytest.raises(InvalidInputError):
        prepare({"question": "q", "passages": ["not a document"]}, rt)


def test_compiled_graph_works_as_a_subgraph() -> None:
    class Outer(TypedDict, total=False):
        question: str
        answer: str
        abstained: bool
        shout: str

    selfrag = compile_graph()
    outer = StateGraph(Outer, context_schema=SelfRAGContext)
    outer.add_node("selfrag", selfrag)
    outer.add_node("shout", lambda s: {"shout": s["answer"].upper()})
    outer.add_edge(START, "selfrag")
    outer.add_edge("selfrag", "shout")
    outer.add_edge("shout", END)
    out = outer.compile().invoke({"question": "capital?"},
                                 context=SelfRAGContext(lm=paris_lm(), retriever=lambda q: DOCS))
    assert out["shout"] == "PARIS." and out["abstained"] is False


def test_custom_stream_events_carry_the_critiques() -> None:
    ctx = SelfRAGContext(lm=paris_lm(), retriever=lambda q: DOCS, config=SelfRAGConfig(k=2))
    events = [e for e in compile_graph().stream({"question": "q"}, context=ctx, stream_mode="custom")]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "retrieve_decision" and "retrieval" in kinds and kinds[-1] == "selection"
    isrel = [e for e in events if e["event"] == "critique" and e["aspect"] == "isrel"]
    assert [e["value"] for e in isrel] == [pytest.approx(0.95), pytest.approx(0.6)]


def test_graph_has_the_documented_nodes() -> None:
    nodes = set(compile_graph().get_graph().nodes)
    assert {"decide_retrieval", "retrieve", "grade_relevance", "generate", "grade_support", "grade_utility",
            "rank", "select", "abstain"} <= nodes


def test_langgraph_server_entry_point_accepts_json_context() -> None:
    import importlib
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = json.loads((root / "graphs" / "langgraph.json").read_text())
    module_file, attr = spec["graphs"]["selfrag"].split(":")
    assert (root / "graphs" / module_file).is_file()
    graph = getattr(importlib.import_module("graphs." + Path(module_file).stem), attr)
    context = {"lm": paris_lm(), "retriever": lambda q: DOCS, "mode": "always", "k": 1}
    out = graph.invoke({"question": "capital?"}, context=context)
    assert out["answer"] == "Paris." and len(out["passages"]) == 1


@pytest.mark.parametrize(("key", "replacement"), [("reader", "writer=..."), ("judge", "chat_model")])
def test_a_context_naming_a_retired_key_gets_one_error_saying_what_replaced_it(key: str, replacement: str) -> None:
    from langchain_selfrag.graph.context import resolve_context

    with pytest.raises(ValueError, match=rf"'{key}' was removed in langchain-selfrag 0\.1") as raised:
        resolve_context({key: "qwen2.5-coder-0.5b-instruct", "lm": paris_lm(), "retriever": lambda q: DOCS})
    assert replacement in str(raised.value) and "ChatReflectionLM" in str(raised.value)
    from graphs.selfrag_graph import graph  # the LangGraph server's graph: its context is JSON

    with pytest.raises(ValueError, match=f"'{key}' was removed"):
        graph.invoke({"question": "capital?"}, context={key: "x", "lm": paris_lm(), "retriever": lambda q: DOCS})


def test_malformed_generation_gives_clean_text() -> None:
    from langchain_selfrag.lm import Generation

    class Messy(FakeReflectionLM):
        def generate(self, prompts, **kw):
            gens = super().generate(prompts, **kw)
            for g in gens:
                g.text = f"{T.RELEVANT}{T.RELEVANT}Paris{T.UTILITY[4]} is{T.PARAGRAPH_START} big{T.FULLY_SUPPORTED}</s>"
            return [Generation(**{**g.__dict__}) for g in gens]

    out = run(Messy(retrieve=0.9), k=1)
    assert out["answer"] == "Paris is big" and not T.find_reflection_tokens(out["answer"])


def test_instruction_is_neutralised() -> None:
    lm = paris_lm()
    run(lm, {"question": "q", "instruction": f"Say {T.RELEVANT} always."}, mode="never")
    prompt = lm.calls_of("generate")[0][0][0]
    assert T.RELEVANT not in prompt and "Say [\u200bRelevant] always." in prompt


# -- async retrieval ------------------------------------------------------------------------------
class PathRetriever(BaseRetriever):
    """Serves DOCS and records whether the sync or the async path served each query."""

    used: list[str] = Field(default_factory=list)

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        self.used.append("sync")
        return list(DOCS)

    async def _aget_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        self.used.append("async")
        return list(DOCS)


def test_sync_runs_use_the_sync_retriever_and_async_runs_the_async_one() -> None:
    sync_retriever = PathRetriever()
    out = run(paris_lm(), retriever=sync_retriever, k=2)
    assert sync_retriever.used == ["sync"] and out["answer"] == "Paris."

    async_retriever = PathRetriever()
    ctx = SelfRAGContext(lm=paris_lm(), retriever=async_retriever, config=SelfRAGConfig(k=2))
    config = {"recursion_limit": ctx.config.step_budget}

    async def main() -> tuple[dict, list[dict]]:
        graph = compile_graph()
        result = await graph.ainvoke({"question": "capital?"}, context=ctx, config=config)
        events = [e async for e in graph.astream_events({"question": "capital?"}, context=ctx, config=config,
                                                        version="v2")]
        return result, events

    out, events = asyncio.run(main())
    assert async_retriever.used == ["async", "async"]
    assert out["answer"] == "Paris." and out["passages"] == [PARIS, LYON]
    # one traced run per retrieve call, like the plain function nodes (no wrapper run inside)
    assert sum(e["event"] == "on_chain_start" and e["name"] == "retrieve" for e in events) == 1


def test_retrieve_and_aretrieve_share_one_logic() -> None:
    queries: list[str] = []
    rt = Runtime(context=SelfRAGContext(lm=paris_lm(), retriever=long_retriever(queries), config=SelfRAGConfig(k=2)))
    later = [{"text": "Paris is the capital."}]
    state: dict[str, Any] = {"question": "Tell me about Paris.", "passages": [BANANA], "depth": 1, "beams": [
        {"id": 1, "done": False, "need_retrieval": True, "segments": later},
        {"id": 2, "done": False, "need_retrieval": True, "segments": []},
        {"id": 3, "done": False, "need_retrieval": True, "segments": later},
        {"id": 4, "done": True, "need_retrieval": True, "segments": []},
    ]}
    sync = retrieve(state, rt)
    sent, queries[:] = list(queries), []
    assert asyncio.run(aretrieve(state, rt)) == sync
    assert sorted(queries) == sorted(sent) and len(sent) == 2  # each distinct query is sent once
    assert sync["passages"] == [BANANA, EIFFEL, PARIS]
    assert [b.get("evidence") for b in sync["beams"]] == [[1, 0], [2, 0], [1, 0], None]
    assert "evidence" not in state["beams"][0]  # the input state is not modified
