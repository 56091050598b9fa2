"""The ``restrain`` node (self-restraint at inference): in SelfRAGChain, in the compiled graph, in a user's own
StateGraph, through the LangGraph server's JSON context and the ``selfrag ask --rho`` command."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langchain_selfrag import tokens as T
from langchain_selfrag.chain import OUTPUT_KEYS, SelfRAGChain
from langchain_selfrag.config import ConfigError, SelfRAGConfig
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment
from langchain_selfrag.graph import ABSTAIN_ANSWER, SelfRAGContext, compile_graph, restrain, route_after_select
from langchain_selfrag.restraint import (
    P_REWRITE,
    IsSupScorer,
    LLMClaimSplitter,
    SelfConsistencyScorer,
    SentenceSplitter,
)

ISSUP = T.GROUPS[T.Kind.ISSUP]
PARIS = Document("Paris is the capital of France. It lies on the Seine.", metadata={"source": "france.md",
                                                                                     "title": "France"})
LYON = Document("Lyon is a large French city.", metadata={"source": "lyon.md", "title": "Lyon"})
ANSWER = "Paris is the capital. It has ten moons."
# FakeSegment confidence 0.8: IsSup "full" -> 0.8 + 0.5 * 0.1, "none" -> 0.1 + 0.5 * 0.1.
P_FULL, P_NONE = 0.85, 0.15


class JudgingLM(FakeReflectionLM):
    """The fake reflection LM, also judging IsSup of a claim after evidence: "full" when every word of the
    claim is in the passage, else "none"."""

    def candidate_probs(self, prompts, candidates):
        if tuple(candidates) != ISSUP:
            return super().candidate_probs(prompts, candidates)
        self.calls.append(("candidate_probs", (list(prompts), list(candidates))))
        out = []
        for prompt in prompts:
            words = {w.strip(".").lower() for w in prompt.rsplit(T.RELEVANT, 1)[1].split()}
            evidence = (self.evidence_of(prompt) or "").lower()
            out.append(FakeSegment(issup="full" if all(w in evidence for w in words) else "none").issup_probs())
        return out

    def issup_prompts(self) -> list[str]:
        return [p for prompts, cands in self.calls_of("candidate_probs") if tuple(cands) == ISSUP for p in prompts]


def judging_lm(text: str = "Paris is the capital. It has ten moons.", **kw: Any) -> JudgingLM:
    kw.setdefault("retrieve", 0.9)
    return JudgingLM(passages={"Paris": FakeSegment(text, isrel=0.95), "Lyon": FakeSegment("Lyon.", isrel=0.1)},
                     no_retrieval=FakeSegment("Paris is the capital. It has ten moons.", isrel=None), **kw)


def chain(lm: Any = None, retriever: Any = None, **settings: Any) -> SelfRAGChain:
    return SelfRAGChain.from_retriever(lm or judging_lm(), retriever or (lambda q: [PARIS, LYON]), **settings)


# -- config ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rho", [1.0, -0.2, 1.5, True, "0.5", float("nan")])
def test_rho_must_lie_in_0_1(rho: Any) -> None:
    with pytest.raises(ConfigError, match="rho"):
        SelfRAGConfig(rho=rho)
    assert SelfRAGConfig().rho is None and SelfRAGConfig.from_mapping({"rho": 0.0}).rho == 0.0


# -- in SelfRAGChain -------------------------------------------------------------------------------------
def test_restrain_keeps_the_supported_sentence_in_the_chain() -> None:
    lm = judging_lm()
    out = chain(lm, rho=0.5).invoke("What is the capital of France?")
    assert tuple(out) == OUTPUT_KEYS
    assert out["answer"] == "Paris is the capital." and out["citations"] == [PARIS]
    assert out["claims"] == [{"text": "Paris is the capital.", "p": pytest.approx(P_FULL), "kept": True},
                             {"text": "It has ten moons.", "p": pytest.approx(P_NONE), "kept": False}]
    assert out["expected_utility"] == pytest.approx(P_FULL - 1.0 * (1 - P_FULL))
    assert out["abstained"] is False and out["abstain_reason"] is None
    assert out["restraint"]["evidence"] == "citations" and out["restraint"]["lambda"] == pytest.approx(1.0)
    assert out["restraint"]["note"] is None
    # One batched IsSup call over the cited passage, as the graph's own evidence prompt plus the claim.
    prompts = lm.issup_prompts()
    assert len(prompts) == 2 and all(p.startswith(lm.calls_of("generate")[0][0][0]) for p in prompts)
    assert prompts[0].endswith("</paragraph>" + T.RELEVANT + "Paris is the capital.")


def test_restrain_abstains_when_every_claim_is_below_rho() -> None:
    out = chain(rho=0.9).invoke("What is the capital of France?")
    assert out["abstained"] is True and out["answer"] == ABSTAIN_ANSWER and out["citations"] == []
    assert out["abstain_reason"].startswith("restraint: ") and "rho = 0.9" in out["abstain_reason"]
    assert [c["kept"] for c in out["claims"]] == [False, False] and out["expected_utility"] == 0.0
    assert not any(t["selected"] for t in out["trace"])


def test_outputs_are_unchanged_without_rho() -> None:
    lm = judging_lm()
    out = chain(lm).invoke("What is the capital of France?")
    assert out["answer"] == ANSWER and out["abstained"] is False
    assert out["claims"] == [] and out["expected_utility"] is None and out["restraint"] is None
    assert lm.issup_prompts() == []
    nodes = [next(iter(u)) for u in compile_graph().stream(
        {"question": "q"}, context=SelfRAGContext(lm=judging_lm(), retriever=lambda q: [PARIS]),
        stream_mode="updates")]
    assert nodes[-1] == "select" and "restrain" not in nodes
    assert "restrain" in compile_graph().get_graph().nodes


def test_rho_per_call_async_and_stream() -> None:
    c = chain()
    out = c.invoke("What is the capital of France?", config={"configurable": {"rho": 0.5}})
    assert out["answer"] == "Paris is the capital."
    assert asyncio.run(c.ainvoke("What is the capital of France?", config={"configurable": {"rho": 0.5}})) == out
    chunks = list(c.stream("What is the capital of France?", config={"configurable": {"rho": 0.5}}))
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert dict(total) == out
    assert c.invoke("What is the capital of France?")["answer"] == ANSWER


def test_restraint_event_is_streamed_after_selection() -> None:
    ctx = SelfRAGContext(lm=judging_lm(), retriever=lambda q: [PARIS], config=SelfRAGConfig(rho=0.5))
    events = list(compile_graph().stream({"question": "q"}, context=ctx, stream_mode="custom"))
    kinds = [e["event"] for e in events]
    assert kinds[-2:] == ["selection", "restraint"]
    assert [c["kept"] for c in events[-1]["claims"]] == [True, False] and events[-1]["rho"] == 0.5


def test_long_form_keeps_the_original_sentences_with_their_citation_markers() -> None:
    eiffel = Document("The Eiffel tower is 330 metres tall.", metadata={"source": "eiffel.md", "title": "Eiffel"})
    lm = JudgingLM(retrieve=0.9, passages={
        "Paris": FakeSegment("Paris is the capital.", isrel=0.9, then_retrieve=True),
        "Eiffel": FakeSegment("The Eiffel tower is there.", isrel=0.9)})

    def retriever(q: str) -> list[Document]:
        return [eiffel] if "Paris is the capital." in q else [PARIS]

    settings = {"long_form": True, "k": 1, "beam_width": 1, "max_segments": 2}
    full = chain(lm, retriever, **settings).invoke("Tell me about Paris.")
    assert full["answer"] == "Paris is the capital. [1] The Eiffel tower is there. [2]"
    out = chain(lm, retriever, rho=0.5, **settings).invoke("Tell me about Paris.")
    assert [c["text"] for c in out["claims"]] == ["Paris is the capital.", "The Eiffel tower is there."]
    assert out["answer"] == "Paris is the capital. [1]" and out["citations"] == [PARIS]
    assert out["restraint"]["n_evidence"] == 2


def test_renumber_citations() -> None:
    from langchain_selfrag.restraint.answer import renumber_citations

    docs = [PARIS, LYON, Document("c")]
    assert renumber_citations("B. [2] C. [3] B again. [2]", docs) == ("B. [1] C. [2] B again. [1]", docs[1:])
    assert renumber_citations("A. [1] Odd [7].", docs) == ("A. [1] Odd [7].", docs[:1])
    assert renumber_citations("Nothing cited.", docs) == ("Nothing cited.", [])


# -- evidence when the answer cites nothing -------------------------------------------------------------
def test_no_retrieval_answer_is_judged_against_passages_fetched_for_the_question() -> None:
    queries: list[str] = []

    def retriever(q: str) -> list[Document]:
        queries.append(q)
        return [PARIS]

    out = chain(retriever=retriever, mode="never", rho=0.5, k=3).invoke("What is the capital of France?")
    assert queries == ["What is the capital of France?"] and out["passages"] == []
    assert out["restraint"]["evidence"] == "retrieved" and out["restraint"]["n_evidence"] == 1
    assert out["answer"] == "Paris is the capital."


def test_without_any_passage_the_scorer_fallback_decides_and_the_output_says_so() -> None:
    lm = judging_lm()
    # the default scorer: no evidence is no support (p = 0.0, not a coin flip), so even rho = 0.3 says nothing
    ctx = SelfRAGContext(lm=lm, retriever=None, config=SelfRAGConfig(rho=0.3))
    out = compile_graph().invoke({"question": "What is the capital of France?"}, context=ctx)
    assert out["restraint"]["evidence"] == "none" and "fallback p = 0.0" in out["restraint"]["note"]
    assert [c["p"] for c in out["claims"]] == [0.0, 0.0] and out["abstained"]
    assert lm.issup_prompts() == []
    # a scorer with an explicit fallback: the fallback decides, and the output says so
    lenient = SelfRAGContext(lm=judging_lm(), retriever=None, config=SelfRAGConfig(rho=0.3),
                             claim_scorer=IsSupScorer(judging_lm(), fallback=0.5))
    out = compile_graph().invoke({"question": "What is the capital of France?"}, context=lenient)
    assert "fallback p = 0.5" in out["restraint"]["note"] and [c["p"] for c in out["claims"]] == [0.5, 0.5]
    assert out["answer"] == "Paris is the capital. It has ten moons."
    strict = compile_graph().invoke({"question": "q"}, context=SelfRAGContext(lm=judging_lm(), retriever=None,
                                                                              config=SelfRAGConfig(rho=0.5)))
    assert strict["abstained"] and "no passage" in strict["restraint"]["note"]


def test_given_passages_are_the_evidence_of_an_answer_without_retrieval() -> None:
    lm = judging_lm(retrieve=0.0)
    # The closed-book answer is given (not abstain_closed_book), so restraint judges it.
    out = chain(lm, rho=0.5, abstain_closed_book=False).invoke(
        {"question": "What is the capital of France?", "passages": [LYON, PARIS]})
    assert out["retrieved"] is False and out["restraint"]["evidence"] == "given"
    assert out["answer"] == "Paris is the capital."


# -- pluggable splitter and scorer ------------------------------------------------------------------------
def test_llm_splitter_and_self_consistency_scorer_in_the_context() -> None:
    def split(prompt: str) -> str:
        return "- Paris is the capital of France.\n- Paris has ten moons." if "Sentence: Paris" in prompt else ""

    def judge(prompt: str) -> str:
        return "95" if "Claim: Paris is the capital" in prompt else "20"

    ctx = SelfRAGContext(lm=judging_lm(), retriever=lambda q: [PARIS], config=SelfRAGConfig(rho=0.5),
                         claim_splitter=LLMClaimSplitter(RunnableLambda(split)),
                         claim_scorer=SelfConsistencyScorer(RunnableLambda(judge)))
    out = compile_graph().invoke({"question": "Tell me about Paris."}, context=ctx)
    assert [(c["text"], c["kept"]) for c in out["claims"]] == [
        ("Paris is the capital of France.", True), ("Paris has ten moons.", False), ("It has ten moons.", False)]
    assert out["answer"] == "Paris is the capital of France."
    assert out["expected_utility"] == pytest.approx(0.95 - 0.05)
    assert out["restraint"]["scorer"] == "SelfConsistencyScorer"
    same = chain(rho=0.5, claim_splitter=ctx.claim_splitter, claim_scorer=ctx.claim_scorer).invoke(
        "Tell me about Paris.")
    assert same["answer"] == out["answer"] and same["claims"] == out["claims"]
    assert out["restraint"]["rewriter"] == "LLMRewriter"  # its reply to P_rewrite was empty: sentences joined


def test_kept_claims_are_rewritten_with_p_rewrite_by_the_splitters_chat_model() -> None:
    prompts: list[str] = []

    def model(prompt: str) -> str:
        prompts.append(prompt)
        if "Sentence: Paris" in prompt:
            return "- Paris is the capital of France.\n- Paris has ten moons."
        if "Facts:" in prompt:
            return "  Paris is the capital\nof France.  "
        return ""

    ctx = SelfRAGContext(lm=judging_lm(), retriever=lambda q: [PARIS], config=SelfRAGConfig(rho=0.5),
                         claim_splitter=LLMClaimSplitter(RunnableLambda(model)),
                         claim_scorer=SelfConsistencyScorer(RunnableLambda(
                             lambda p: "95" if "Claim: Paris is the capital" in p else "20")))
    out = compile_graph().invoke({"question": "Tell me about Paris."}, context=ctx)
    rewrite = [p for p in prompts if "Facts:" in p]
    assert rewrite == [P_REWRITE.format(entity="Paris", facts="- Paris is the capital of France.")]
    assert out["answer"] == "Paris is the capital of France." and not out.get("abstained")
    assert out["restraint"]["rewriter"] == "LLMRewriter"


# -- as a node of another graph ----------------------------------------------------------------------------
class MyState(TypedDict, total=False):
    question: str
    answer: str
    passages: list[Document]
    claims: list[dict]
    expected_utility: float | None
    abstained: bool
    abstain_reason: str | None


def draft(state: MyState) -> dict:
    return {"answer": "Lyon is a large French city. Lyon is the capital of Mars.", "passages": [LYON]}


def my_graph() -> Any:
    g = StateGraph(MyState, context_schema=SelfRAGContext)
    g.add_node("draft", draft)
    g.add_node("restrain", restrain)
    g.add_edge(START, "draft")
    g.add_edge("draft", "restrain")
    g.add_edge("restrain", END)
    return g.compile()


def test_restrain_is_a_node_of_a_users_graph() -> None:
    out = my_graph().invoke({"question": "Tell me about Lyon."},
                            context=SelfRAGContext(lm=judging_lm(), config=SelfRAGConfig(rho=0.5)))
    assert out["answer"] == "Lyon is a large French city."
    assert [c["kept"] for c in out["claims"]] == [True, False]
    assert out["expected_utility"] == pytest.approx(P_FULL - (1 - P_FULL))
    off = my_graph().invoke({"question": "Tell me about Lyon."}, context=SelfRAGContext(lm=judging_lm()))
    assert off["answer"] == draft({})["answer"] and "claims" not in off
    gone = my_graph().invoke({"question": "Tell me about Lyon."},
                             context=SelfRAGContext(lm=judging_lm(), config=SelfRAGConfig(rho=0.9)))
    assert gone["abstained"] and gone["answer"] == ABSTAIN_ANSWER and gone["abstain_reason"].startswith("restraint:")


def test_a_users_graph_with_its_own_scorer_needs_no_reflection_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_selfrag.graph import context

    def no_model(model: Any = None) -> Any:
        raise AssertionError("the reflection model was loaded")

    monkeypatch.setattr(context, "default_lm", no_model)
    scorer = SelfConsistencyScorer(RunnableLambda(lambda p: "70" if "large French city" in p.split("Claim:")[1]
                                                   else "5"))
    out = my_graph().invoke({"question": "Tell me about Lyon."},
                            context=SelfRAGContext(config=SelfRAGConfig(rho=0.5), claim_scorer=scorer))
    assert out["answer"] == "Lyon is a large French city." and out["expected_utility"] == pytest.approx(0.4)


def test_route_after_select_knows_rho() -> None:
    class RT:
        def __init__(self, context: Any) -> None:
            self.context = context

    on = RT(SelfRAGContext(lm=object(), config=SelfRAGConfig(rho=0.5)))
    assert route_after_select({"pending_abstain": "why"}, on) == "abstain"
    assert route_after_select({"pending_abstain": None}, on) == "restrain"
    assert route_after_select({}, RT({"rho": 0.2})) == "restrain"
    assert route_after_select({}, RT(SelfRAGContext(lm=object()))) == END
    assert route_after_select({}, None) == END


def test_langgraph_server_json_context_takes_rho() -> None:
    from graphs.selfrag_graph import graph

    context = {"lm": judging_lm(), "retriever": lambda q: [PARIS], "mode": "always", "k": 1, "rho": 0.5}
    out = graph.invoke({"question": "What is the capital of France?"}, context=context)
    assert out["answer"] == "Paris is the capital." and out["claims"][1]["kept"] is False


# -- selfrag ask --rho ------------------------------------------------------------------------------------
@pytest.fixture
def fake_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    from langchain_selfrag import retrieval
    from langchain_selfrag.graph import context

    monkeypatch.setattr(context, "default_lm", lambda model=None: judging_lm())
    monkeypatch.setattr(retrieval, "open_store", lambda path, chroma_url=None: (lambda q: [PARIS]))
    store = tmp_path / "store"
    store.mkdir()
    return store


def test_cli_rho_prints_kept_and_dropped_claims(fake_cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from langchain_selfrag.cli import build_parser, main

    assert build_parser().parse_args(["ask", "q", "--rho", "0.5"]).rho == 0.5
    assert main(["ask", "What is the capital of France?", "--store", str(fake_cli), "--model", "m",
                 "--rho", "0.5"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == "Paris is the capital."
    assert "kept     p = 0.85  Paris is the capital." in text
    assert "dropped  p = 0.15  It has ten moons." in text and "E[U] = 0.70" in text
    assert main(["ask", "What is the capital of France?", "--store", str(fake_cli), "--model", "m", "--rho", "0.5",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["expected_utility"] == pytest.approx(0.7) and [c["kept"] for c in data["claims"]] == [True, False]
    assert main(["ask", "What is the capital of France?", "--store", str(fake_cli), "--model", "m"]) == 0
    plain = capsys.readouterr().out
    assert "E[U]" not in plain and "It has ten moons." in plain.splitlines()[0]


def test_cli_rejects_rho_out_of_range(fake_cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from langchain_selfrag.cli import main

    assert main(["ask", "q", "--store", str(fake_cli), "--model", "m", "--rho", "1.5"]) == 2
    assert "rho" in capsys.readouterr().err


def test_sentence_splitter_is_the_default() -> None:
    from langchain_selfrag.graph.nodes.restrain import claim_scorer, claim_splitter

    ctx = SelfRAGContext(lm=judging_lm(), config=SelfRAGConfig(rho=0.5))
    assert isinstance(claim_splitter(ctx), SentenceSplitter) and claim_scorer(ctx).lm is ctx.lm
