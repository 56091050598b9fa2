"""Long-form Self-RAG as the paper specifies, and the decoding-guard wiring, driven by a scripted LM.

``ScriptLM`` answers every prompt through a test-supplied function and records each call, so the
tests can check which prompts the graph built, which options it passed, and what it did with the
generations it got back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain_core.documents import Document

from langchain_selfrag import scoring as S
from langchain_selfrag import tokens as T
from langchain_selfrag.cli import _settings, build_parser
from langchain_selfrag.config import ConfigError, SelfRAGConfig
from langchain_selfrag.graph import SelfRAGContext, compile_graph
from langchain_selfrag.lm.protocol import Generation, ReflectionPoint
from langchain_selfrag.retrieval.rerank import bm25_scores, rerank

ISREL = T.GROUPS[T.Kind.ISREL]
RESPONSE = "### Response:\n"


# -- a scripted reflection LM ---------------------------------------------------------------------
def peaked(tok: str, top: float = 0.9) -> dict[str, float]:
    group = T.GROUPS[T.KIND_OF[tok]]
    return {t: (top if t == tok else (1.0 - top) / (len(group) - 1)) for t in group}


def gen(*pieces: str | tuple[str, dict[str, float]], stop: str = "eos", first: dict[str, float] | None = None,
        guarded: int = 0) -> Generation:
    """A generation of ``pieces`` (one token each): text, a reflection token, or (token, its group probs).

    ``first`` defaults to the probabilities of a leading IsRel token (what ``first_candidates`` scores).
    """
    text, points = [], []
    for pos, piece in enumerate(pieces):
        tok, probs = piece if isinstance(piece, tuple) else (piece, None)
        if tok in T.KIND_OF:
            points.append(ReflectionPoint(pos, tok, T.KIND_OF[tok], dict(probs or peaked(tok))))
        text.append(tok)
    if first is None and points and points[0].position == 0 and points[0].kind is T.Kind.ISREL:
        first = {t: points[0].probs.get(t, 0.0) for t in ISREL}
    return Generation(text="".join(text), token_ids=list(range(len(pieces))), cumulative_logprob=-0.1 * len(pieces),
                      reflections=points, first_probs=dict(first or {}), stop_reason=stop, guarded=guarded)


class ScriptLM:
    """``respond(prompt)`` makes each generation; ``retrieve(prompt)`` is p([Retrieval]) there."""

    has_reflection_vocab = True

    def __init__(self, respond: Callable[[str], Generation], retrieve: Callable[[str], float] = lambda p: 0.0):
        self.respond = respond
        self.retrieve = retrieve
        self.generate_calls: list[dict[str, Any]] = []
        self.prob_calls: list[tuple[list[str], list[str]]] = []

    def candidate_probs(self, prompts: Sequence[str], candidates: Sequence[str]) -> list[dict[str, float]]:
        self.prob_calls.append((list(prompts), list(candidates)))
        if set(candidates) <= set(T.GROUPS[T.Kind.RETRIEVE]):
            return [{T.RETRIEVAL: self.retrieve(p), T.NO_RETRIEVAL: 1.0 - self.retrieve(p)} for p in prompts]
        return [{c: 0.0 for c in candidates} for _ in prompts]

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 100, first_candidates: Sequence[str] = (),
                 stop_at_retrieval: bool = True, guard: bool | Sequence[bool] = False,
                 stop_at_segment: bool = False) -> list[Generation]:
        flags = [guard] * len(prompts) if isinstance(guard, bool) else list(guard)
        assert len(flags) == len(prompts)
        self.generate_calls.append({"prompts": list(prompts), "first": tuple(first_candidates), "guard": flags,
                                    "stop_at_retrieval": stop_at_retrieval, "stop_at_segment": stop_at_segment})
        return [self.respond(p) for p in prompts]

    def retrieve_prompts(self) -> list[list[str]]:
        return [p for p, c in self.prob_calls if set(c) == {T.NO_RETRIEVAL, T.RETRIEVAL}]


def run(lm: ScriptLM, state: dict[str, Any], retriever: Any = None, **settings: Any) -> tuple[dict, list[dict]]:
    """The graph's output and its custom stream events, with the paper's settings (these tests are
    about search, ranking and citing; abstention has its own tests) unless ``settings`` say otherwise."""
    ctx = SelfRAGContext(lm=lm, retriever=retriever, config=SelfRAGConfig.paper(**settings))
    out: dict[str, Any] = {}
    events: list[dict] = []
    for mode, chunk in compile_graph().stream(state, context=ctx, config={"recursion_limit": ctx.config.step_budget},
                                              stream_mode=["custom", "values"]):
        if mode == "custom":
            events.append(chunk)
        else:
            out = chunk
    return out, events


def doc(text: str, title: str) -> Document:
    return Document(text, metadata={"title": title, "source": f"{title.lower()}.md"})


def evidence_of(prompt: str) -> str:
    return prompt.rsplit(T.PARAGRAPH_START, 1)[-1] if prompt.endswith(T.PARAGRAPH_END) else ""


def by_depth(trace: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for t in trace:
        out.setdefault(t["depth"], []).append(t)
    return out


# -- decoding guard wiring ------------------------------------------------------------------------
def test_decoding_guard_is_asked_per_prompt_and_recorded_in_the_trace() -> None:
    def respond(prompt: str) -> Generation:
        if "Zero-doc" in evidence_of(prompt):
            return gen(T.RELEVANT, "Zero.", T.FULLY_SUPPORTED, T.NO_RETRIEVAL, stop="segment", guarded=2)
        if "One-doc" in evidence_of(prompt):
            return gen(T.IRRELEVANT, "One.", T.NO_RETRIEVAL, stop="segment")
        return gen("End.", T.UTILITY[4])

    passages = [doc("Zero-doc text.", "Zero"), doc("One-doc text.", "One")]

    def retrieve(p: str) -> float:
        return 0.9 if p.endswith(RESPONSE) else 0.0

    lm = ScriptLM(respond, retrieve)
    out, _ = run(lm, {"question": "q", "passages": passages}, long_form=True, k=2, beam_width=1, max_segments=2)
    # evidence prompts: guarded; the plain continuation of a beam that already has text: not guarded
    assert [c["guard"] for c in lm.generate_calls] == [[True, True], [False]]
    assert lm.generate_calls[1]["prompts"][0].endswith("Zero." + T.FULLY_SUPPORTED + T.NO_RETRIEVAL)
    trace = by_depth(out["trace"])
    assert [(t["decoding_guard"], t["guarded"]) for t in trace[0]] == [(True, 2), (True, 0)]
    assert [(t["decoding_guard"], t["guarded"]) for t in trace[1]] == [(False, 0)]

    off = ScriptLM(respond, retrieve)
    out, _ = run(off, {"question": "q", "passages": passages}, long_form=True, k=2, beam_width=1, max_segments=2,
                 decoding_guard=False)
    assert [c["guard"] for c in off.generate_calls] == [[False, False], [False]]
    assert not any(t["decoding_guard"] for t in out["trace"])


def test_decoding_guard_on_plain_prompts_until_the_beam_has_answer_text() -> None:
    script = iter([
        gen(stop="length"),  # nothing written yet: the beam stays alive without text
        gen("Answer.", T.NO_RETRIEVAL, stop="segment"),
        gen("More.", T.UTILITY[3]),
    ])
    lm = ScriptLM(lambda prompt: next(script))
    out, _ = run(lm, {"question": "q"}, mode="never", long_form=True, max_segments=3)
    assert [c["guard"] for c in lm.generate_calls] == [[True], [True], [False]]
    assert [t["decoding_guard"] for t in out["trace"]] == [True, True, False]
    assert out["answer"] == "Answer. More."
    short = ScriptLM(lambda p: gen("Short.", T.UTILITY[4]))
    run(short, {"question": "q"}, mode="never")
    assert short.generate_calls[0]["guard"] == [True] and short.generate_calls[0]["stop_at_segment"] is False


def test_decoding_guard_knob_config_and_cli() -> None:
    assert SelfRAGConfig().decoding_guard is True
    with pytest.raises(ConfigError, match="decoding_guard"):
        SelfRAGConfig(decoding_guard="no")  # type: ignore[arg-type]
    parser = build_parser()
    assert _settings(parser.parse_args(["ask", "q", "--no-decoding-guard"])) == {"decoding_guard": False}
    assert "decoding_guard" not in _settings(parser.parse_args(["ask", "q"]))


# -- a. the retrieve threshold at every segment ---------------------------------------------------
ALPHA, BETA, GAMMA = doc("Alpha facts.", "Alpha"), doc("Beta facts.", "Beta"), doc("Gamma facts.", "Gamma")


def threshold_lm() -> ScriptLM:
    def respond(prompt: str) -> Generation:
        if " one." in prompt:  # the second segment
            if prompt.endswith(T.PARAGRAPH_END):
                return gen(T.RELEVANT, "Fin.", T.UTILITY[4])
            return gen("Fin.", T.UTILITY[4])
        ev = evidence_of(prompt)
        if "Alpha" in ev:
            return gen(T.RELEVANT, "Alpha one.", T.FULLY_SUPPORTED, T.NO_RETRIEVAL, stop="segment")
        if "Beta" in ev:
            return gen(T.RELEVANT, "Beta one.", T.FULLY_SUPPORTED, T.NO_RETRIEVAL, stop="segment")
        return gen(T.RELEVANT, "Gamma one.", T.FULLY_SUPPORTED, T.RETRIEVAL, stop="retrieval")

    def retrieve(prompt: str) -> float:
        if prompt.endswith(RESPONSE):
            return 0.9
        return 0.5 if prompt.endswith("Alpha one." + T.FULLY_SUPPORTED) else 0.1

    return ScriptLM(respond, retrieve)


def test_retrieve_threshold_applies_at_every_segment() -> None:
    lm = threshold_lm()
    queries: list[str] = []

    def retriever(q: str) -> list[Document]:
        queries.append(q)
        return [ALPHA, BETA, GAMMA]

    out, events = run(lm, {"question": "Tell me."}, retriever=retriever, long_form=True, k=3, beam_width=3,
                      max_segments=2, threshold=0.2)
    asked = lm.retrieve_prompts()
    assert len(asked) == 2 and len(asked[0]) == 1  # the first segment, then ONE batched call for the later ones
    # read at each beam's continuation point (before the token that ended its segment); the beam
    # that stopped at its own [Retrieval] is not asked
    ends = ["Alpha one." + T.FULLY_SUPPORTED, "Beta one." + T.FULLY_SUPPORTED]
    assert len(asked[1]) == 2 and all(any(p.endswith(e) for p in asked[1]) for e in ends)
    decisions = {(e["retrieve"], e["probability"], e["trigger"]) for e in events
                 if e["event"] == "retrieve_decision" and e["depth"] == 1}
    assert decisions == {(True, 0.5, "threshold"), (False, 0.1, "threshold"), (True, None, "token")}
    second = lm.generate_calls[1:]
    evidence = [p for c in second for p in c["prompts"] if p.endswith(T.PARAGRAPH_END)]
    plain = [p for c in second for p in c["prompts"] if not p.endswith(T.PARAGRAPH_END)]
    assert len(evidence) == 6 and all(("Alpha one." in p) != ("Gamma one." in p) for p in evidence)
    assert len(plain) == 1 and plain[0].endswith("Beta one." + T.FULLY_SUPPORTED + T.NO_RETRIEVAL)
    assert sorted(queries) == sorted(["Tell me.", "Tell me.\nAlpha one.", "Tell me.\nGamma one."])
    assert out["retrieve_probability"] == pytest.approx(0.9)


@pytest.mark.parametrize("mode", ["always", "never"])
def test_always_and_never_decide_every_segment_without_asking(mode: str) -> None:
    lm = threshold_lm()
    run(lm, {"question": "Tell me."}, retriever=lambda q: [ALPHA, BETA, GAMMA], mode=mode, long_form=True, k=3,
        beam_width=3, max_segments=2)
    assert lm.retrieve_prompts() == []
    second = [p for c in lm.generate_calls[1:] for p in c["prompts"]]
    assert second and all(p.endswith(T.PARAGRAPH_END) is (mode == "always") for p in second)


# -- b. segments end at the next Retrieve token; [Continue to Use Evidence] keeps the passage ----
def test_segments_end_at_retrieve_tokens_and_continue_keeps_the_passage() -> None:
    def respond(prompt: str) -> Generation:
        if prompt.endswith(T.PARAGRAPH_END):
            return gen(T.RELEVANT, "Alpha one.", T.FULLY_SUPPORTED, T.CONTINUE, stop="segment")
        if prompt.endswith(T.CONTINUE):
            return gen("Alpha two.", T.PARTIALLY_SUPPORTED, T.NO_RETRIEVAL, stop="segment")
        if prompt.endswith(T.NO_RETRIEVAL):
            return gen("Done", stop="length")
        return gen(" more.", T.UTILITY[3])

    lm = ScriptLM(respond, lambda p: 0.9 if p.endswith(RESPONSE) else 0.0)
    out, _ = run(lm, {"question": "q", "passages": [ALPHA]}, long_form=True, k=1, max_segments=6)
    calls = lm.generate_calls
    assert len(calls) == 4  # "segment" and "length" keep the beam alive, "eos" ends it
    assert all(c["stop_at_segment"] and c["stop_at_retrieval"] for c in calls)
    second, third, fourth = (c["prompts"][0] for c in calls[1:])
    # the marker that ended a segment is re-appended once, after the evidence already in the prefix
    assert second.endswith("Alpha one." + T.FULLY_SUPPORTED + T.CONTINUE) and second.count(T.CONTINUE) == 1
    assert second.count(T.PARAGRAPH_START) == 1 and "Alpha facts." in second
    assert third.endswith("Alpha two." + T.PARTIALLY_SUPPORTED + T.NO_RETRIEVAL) and third.count(T.NO_RETRIEVAL) == 1
    assert fourth.endswith("Done")  # a length stop continues where it was cut
    trace = out["trace"]
    assert [t["stop_reason"] for t in trace] == ["segment", "segment", "length", "eos"]
    assert [t["passage"] for t in trace] == [0, 0, None, None]  # the continued segment keeps the passage
    assert trace[1]["isrel"] == pytest.approx(0.9)  # ... and the relevance judgement of its retrieval
    assert trace[1]["issup"] == pytest.approx(S.issup_score(peaked(T.PARTIALLY_SUPPORTED)))
    assert out["answer"] == "Alpha one. [1] Alpha two. [1] Done more."
    assert out["citations"] == [ALPHA]


# -- c. IsSup and IsUse where the tokens are generated, per segment -----------------------------
def test_issup_and_isuse_are_read_at_their_own_positions_in_their_own_segment() -> None:
    decoy_rel = {T.RELEVANT: 0.9, T.IRRELEVANT: 0.1, T.FULLY_SUPPORTED: 0.99, T.UTILITY[4]: 0.99}
    partial = {T.FULLY_SUPPORTED: 0.1, T.PARTIALLY_SUPPORTED: 0.8, T.NO_SUPPORT: 0.1}
    utility = {T.UTILITY[0]: 0.3, T.UTILITY[4]: 0.7, T.NO_SUPPORT: 0.99}  # a decoy IsSup value at the IsUse position
    marker = {T.NO_RETRIEVAL: 0.9, T.RETRIEVAL: 0.1, T.UTILITY[0]: 0.99, T.NO_SUPPORT: 0.99}  # decoys at the marker

    def respond(prompt: str) -> Generation:
        if "One." not in prompt:
            return gen((T.RELEVANT, decoy_rel), "One.", (T.PARTIALLY_SUPPORTED, partial), (T.NO_RETRIEVAL, marker),
                       stop="segment")
        return gen((T.RELEVANT, decoy_rel), "Two.", (T.UTILITY[4], utility))

    lm = ScriptLM(respond)
    out, _ = run(lm, {"question": "q", "passages": [ALPHA]}, mode="always", long_form=True, k=1, max_segments=2,
                 hard_constraints=True)
    first, second = out["trace"]
    assert first["issup"] == pytest.approx(0.5)  # (0.1 + 0.5 * 0.8) / 1.0 at the IsSup token
    assert first["isuse"] == 0.0  # no utility token in this segment
    assert second["issup"] == 0.0 and not second["dropped"]  # no IsSup token in this segment
    assert second["isuse"] == pytest.approx(0.4)  # (-1 * 0.3 + 1 * 0.7) / 1.0 at the utility token
    for t in (first, second):
        assert t["score"] == pytest.approx(t["seq_prob"] + 0.9 + t["issup"] + 0.5 * t["isuse"])


# -- d. citations need [Relevant] and not [No support / Contradictory] --------------------------
def test_short_form_cites_only_passages_judged_relevant_and_supported() -> None:
    scripts = {
        "P0": gen(T.RELEVANT, "Paris", T.FULLY_SUPPORTED),  # cited
        "P1": gen(T.IRRELEVANT, "Paris", T.FULLY_SUPPORTED,  # the generated token decides
                  first={T.RELEVANT: 0.6, T.IRRELEVANT: 0.4}),
        "P2": gen("Paris", T.FULLY_SUPPORTED, first={T.RELEVANT: 0.7, T.IRRELEVANT: 0.3}),  # cited
        "P3": gen("Paris", T.FULLY_SUPPORTED, first={T.RELEVANT: 0.3, T.IRRELEVANT: 0.7}),
        "P4": gen(T.RELEVANT, "Paris", T.NO_SUPPORT),
    }
    docs = [doc(f"{key} text.", key) for key in scripts]
    lm = ScriptLM(lambda p: scripts[evidence_of(p).split("\n")[0]], lambda p: 1.0)
    out, _ = run(lm, {"question": "q", "passages": docs}, k=5, closed_set=True)
    assert out["answer"] == "Paris" and all(t["selected"] for t in out["trace"])
    assert sorted(d.page_content for d in out["citations"]) == ["P0 text.", "P2 text."]


def test_long_form_does_not_cite_an_irrelevant_passage_nor_its_continuation() -> None:
    def respond(prompt: str) -> Generation:
        if prompt.endswith(T.PARAGRAPH_END):
            return gen(T.IRRELEVANT, "Guess.", T.CONTINUE, stop="segment", first={T.RELEVANT: 0.6, T.IRRELEVANT: 0.4})
        return gen("More.", T.FULLY_SUPPORTED, T.UTILITY[3])

    lm = ScriptLM(respond, lambda p: 0.9 if p.endswith(RESPONSE) else 0.0)
    out, _ = run(lm, {"question": "q", "passages": [ALPHA]}, long_form=True, k=1, max_segments=3)
    assert [t["passage"] for t in out["trace"]] == [0, 0]
    assert out["answer"] == "Guess. More." and out["citations"] == []


# -- e. given passages are re-ranked for every later segment ------------------------------------
def test_given_passages_are_reranked_per_segment() -> None:
    given = [doc("Apples grow on trees.", "Apples"), doc("Bridges span rivers.", "Bridges"),
             doc("Cats chase mice.", "Cats"), doc("Dogs cross bridges.", "Dogs")]

    def respond(prompt: str) -> Generation:
        if "Rivers have bridges." in prompt:
            return gen(T.RELEVANT, "Fin.", T.FULLY_SUPPORTED, T.UTILITY[4])
        if "Apples" in evidence_of(prompt):
            return gen(T.RELEVANT, "Rivers have bridges.", T.FULLY_SUPPORTED, T.NO_RETRIEVAL, stop="segment")
        return gen(T.IRRELEVANT, "No.", T.NO_SUPPORT, T.NO_RETRIEVAL, stop="segment")

    lm = ScriptLM(respond)
    _, events = run(lm, {"question": "Tell me about cats.", "passages": given}, mode="always", long_form=True,
                    k=2, beam_width=1, max_segments=2)
    titles = [[evidence_of(p).split("\n")[0] for p in c["prompts"]] for c in lm.generate_calls]
    assert titles[0] == ["Apples", "Bridges"]  # first segment: the caller's order, though Cats matches the question
    # then the best BM25 matches for question + previous segment: "rivers", "bridges" (x2), then "cats" (x2)
    # ahead of one "bridges" in Dogs
    assert titles[1] == ["Bridges", "Cats"]
    queries = [e["query"] for e in events if e["event"] == "retrieval"]
    assert queries == ["Tell me about cats.", "Tell me about cats.\nRivers have bridges."]


def test_rerank_is_bm25_with_ties_in_the_given_order() -> None:
    texts = ["the cat", "a dog and a cat", "the bridge", "cat cat cat", "nothing here"]
    scores = bm25_scores("cat bridge", texts)
    assert scores[4] == 0.0 and scores[2] > scores[0] > 0.0  # the rarer term weighs more
    assert scores[3] > scores[0]  # term frequency counts
    assert rerank("cat bridge", texts, 3) == [2, 3, 0]
    assert rerank("zebra", texts, 2) == [0, 1]  # all tied: the given order
    assert rerank("CAT", ["dog", "Cat!"], 5) == [1, 0]
    assert rerank("cat", [], 3) == [] and bm25_scores("cat", []) == []
