"""Streaming: answer text leaves the graph while it is decoded, and the chunks add up to ``invoke``.

Short-form answers without retrieval stream token by token (``token`` events), long-form segments
as soon as every beam shares them (``segment`` events); nothing streams while the run could still
abstain. Real backends (tiny llama.cpp GGUF, tiny transformers model) pass pieces that add up to
each generation's answer and decode the same ids as without a callback.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain_core.documents import Document

from langchain_selfrag import tokens as T
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.chat_models import ChatSelfRAG, StopCutter
from langchain_selfrag.config import SelfRAGConfig
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment
from langchain_selfrag.graph import ABSTAIN_ANSWER, SelfRAGContext
from langchain_selfrag.graph.nodes.generate import _streams_tokens
from langchain_selfrag.lm.streaming import AnswerStream, settled_answer

PARIS = Document("Paris is the capital of France.", metadata={"source": "france.md", "title": "France"})
LYON = Document("Lyon is a large French city.", metadata={"source": "lyon.md", "title": "Lyon"})
ANSWER = "Paris is the capital of France. It lies on the Seine."


def added(chunks: list[dict]) -> dict:
    total = chunks[0]
    for ch in chunks[1:]:
        total = total + ch
    return dict(total)


def answer_chunks(chunks: list[dict]) -> list[str]:
    return [ch["answer"] for ch in chunks if "answer" in ch]


def astream(chain: SelfRAGChain, question: Any) -> list[dict]:
    async def collect() -> list[dict]:
        return [ch async for ch in chain.astream(question)]

    return asyncio.run(collect())


def pieces_of(stream_texts: list[str]) -> tuple[list[str], str]:
    """The pieces an AnswerStream sends for successive texts, and the answer they finish with."""
    got: list[str] = []
    stream = AnswerStream(lambda i, piece: got.append(piece), 0)
    for text in stream_texts:
        stream.update(text)
    before_finish = list(got)
    stream.finish(T.strip_reflection_tokens(stream_texts[-1]))
    return before_finish, "".join(got)


# -- the pure parts -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "settled"),
    [
        ("Paris is", "Paris is"),
        ("Paris [Util", "Paris"),  # may still become [Utility:k]
        ("Paris[Utility:5]", "Paris"),
        ("Paris <paragraph>Some evidence", "Paris"),  # an evidence paragraph still open
        ("Paris <paragraph>x</paragraph> is", "Paris is"),
        ("caf\ufffd", "caf"),  # a character whose bytes are not all decoded
        ("a </", "a"),
        ("see [1", "see [1"),  # not the start of a reflection token
    ],
)
def test_settled_answer_holds_back_what_later_tokens_may_change(text: str, settled: str) -> None:
    assert settled_answer(text) == settled


def test_answer_stream_sends_only_certain_text_and_adds_up() -> None:
    texts = ["[No Retrieval]", "[No Retrieval]Par", "[No Retrieval]Paris", "[No Retrieval]Paris [",
             "[No Retrieval]Paris [Fully", "[No Retrieval]Paris [Fully supported]", "[No Retrieval]Paris [Fully supported] is",
             "[No Retrieval]Paris [Fully supported] is caf\ufffd", "[No Retrieval]Paris [Fully supported] is café",
             "[No Retrieval]Paris [Fully supported] is café.[Utility:5]"]
    early, total = pieces_of(texts)
    assert total == "Paris is café."
    assert "".join(early) == "Paris is café"  # one token behind; the last piece comes with finish
    assert not any("[" in p or "\ufffd" in p for p in early)


def test_answer_stream_is_a_token_late_when_the_tokenizer_rewrites_the_end() -> None:
    """A decoder that rewrites ``"do n"`` into ``"don't"`` once ``'t`` comes cannot make it send ``" n"``."""
    early, total = pieces_of(["I do", "I do n", "I don't", "I don't know"])
    assert early == ["I do", "n't"] and total == "I don't know"


def test_stop_cutter_cuts_at_the_first_stop_string_across_pieces() -> None:
    cutter = StopCutter(["capital", "STOP"])
    out = [cutter.feed(p) for p in ["Paris is the ca", "pi", "tal of France"]]
    assert out == ["Paris is the ", "", ""] and cutter.finish() == ""
    cutter = StopCutter(["xyz"])
    assert [cutter.feed(p) for p in ["ab x", "y"]] + [cutter.finish()] == ["ab ", "", "xy"]


def test_fake_lm_passes_pieces_per_prompt() -> None:
    lm = FakeReflectionLM(no_retrieval=FakeSegment("One two three.", isuse=4))
    got: dict[int, list[str]] = {}
    prompts = ["### Response:\n[No Retrieval]", "### Response:\n[No Retrieval]"]
    gens = lm.generate(prompts, on_token=lambda i, piece: got.setdefault(i, []).append(piece))
    assert ["".join(got[i]) for i in range(2)] == [g.answer for g in gens] == ["One two three."] * 2
    assert len(got[0]) >= 3


# -- the chain: short form --------------------------------------------------------------------------------
@dataclass(eq=False)
class HoldingLM(FakeReflectionLM):
    """Blocks its ``generate`` after the first answer piece until the consumer says it has a chunk."""

    released: threading.Event = field(default_factory=threading.Event)
    waits: list[bool] = field(default_factory=list)
    streamed_calls: int = 0

    def generate(self, prompts, **options):
        callback = options.get("on_token")
        if callback is not None:
            self.streamed_calls += 1

            def held(i: int, piece: str) -> None:
                callback(i, piece)
                if not self.waits:
                    self.waits.append(self.released.wait(10))

            options["on_token"] = held
        return super().generate(prompts, **options)


def holding_lm(**kw: Any) -> HoldingLM:
    kw.setdefault("retrieve", 0.1)
    kw.setdefault("no_retrieval", FakeSegment(ANSWER, isuse=4))
    return HoldingLM(passages={"Paris": FakeSegment("Paris. It is the capital.", isrel=0.95)}, **kw)


def test_stream_sends_tokens_before_generation_ends_and_adds_up_to_invoke() -> None:
    lm = holding_lm()
    # A closed-book answer is streamed only when it will be given (not abstain_closed_book).
    chain = SelfRAGChain.from_retriever(lm, lambda q: [PARIS], abstain_closed_book=False)
    chunks = []
    for ch in chain.stream("capital?"):
        if ch.get("answer"):
            lm.released.set()  # generate is still blocked on its first piece when this arrives
        chunks.append(ch)
    assert lm.waits == [True]
    assert len(answer_chunks(chunks)) > 5
    assert added(chunks) == chain.invoke("capital?")
    assert added(chunks)["answer"] == ANSWER and not added(chunks)["retrieved"]


def test_astream_sends_tokens_before_generation_ends_and_adds_up_to_invoke() -> None:
    lm = holding_lm()
    # A closed-book answer is streamed only when it will be given (not abstain_closed_book).
    chain = SelfRAGChain.from_retriever(lm, lambda q: [PARIS], abstain_closed_book=False)

    async def collect() -> list[dict]:
        out = []
        async for ch in chain.astream("capital?"):
            if ch.get("answer"):
                lm.released.set()
            out.append(ch)
        return out

    chunks = asyncio.run(collect())
    assert lm.waits == [True]
    assert added(chunks) == chain.invoke("capital?")
    assert answer_chunks(chunks) == answer_chunks(list(chain.stream("capital?")))


def test_token_events_are_not_critique_callbacks() -> None:
    chain = SelfRAGChain.from_retriever(holding_lm(released=_set_event()), lambda q: [PARIS], abstain_closed_book=False)

    async def events() -> list:
        return [e async for e in chain.astream_events("capital?", version="v2")]

    evs = asyncio.run(events())
    custom = [e["data"]["event"] for e in evs if e["event"] == "on_custom_event"]
    assert "isuse" in {e["data"].get("aspect") for e in evs if e["event"] == "on_custom_event"}
    assert "token" not in custom and "segment" not in custom
    streamed = [e["data"]["chunk"].get("answer", "") for e in evs
                if e["event"] == "on_chain_stream" and e["name"] == chain.get_name()]
    assert "".join(streamed) == ANSWER and len([s for s in streamed if s]) > 5


def _set_event() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


def test_retrieval_answers_are_not_streamed_early() -> None:
    lm = holding_lm(retrieve=0.9, released=_set_event())
    chain = SelfRAGChain.from_retriever(lm, lambda q: [PARIS, LYON])
    chunks = list(chain.stream("capital?"))
    assert lm.streamed_calls == 0
    assert answer_chunks(chunks) == ["Paris. ", "It is the capital."]
    assert added(chunks) == chain.invoke("capital?")


@pytest.mark.parametrize(
    ("script", "settings", "retriever"),
    [
        (FakeSegment(": ...", isuse=4), {}, None),  # punctuation only: no answer
        (FakeSegment("", isuse=4), {}, None),
        (FakeSegment(ANSWER, isuse=4), {"mode": "always", "abstain_isrel": 0.5}, lambda q: []),  # found nothing
    ],
)
def test_abstentions_stream_nothing_early_and_add_up(script: FakeSegment, settings: dict, retriever: Any) -> None:
    lm = holding_lm(no_retrieval=script, released=_set_event())
    chain = SelfRAGChain.from_retriever(lm, retriever, **settings)
    expected = chain.invoke("capital?")
    assert expected["abstained"] and expected["answer"] == ABSTAIN_ANSWER
    for chunks in (list(chain.stream("capital?")), astream(chain, "capital?")):
        assert added(chunks) == expected


def test_an_answer_that_starts_with_punctuation_streams_once_it_says_something() -> None:
    lm = holding_lm(no_retrieval=FakeSegment(": Paris , capital.", isuse=4), released=_set_event())
    chain = SelfRAGChain.from_retriever(lm, None)
    chunks = list(chain.stream("q"))
    assert answer_chunks(chunks)[0].startswith(": Paris")
    assert added(chunks) == chain.invoke("q")


def test_streams_tokens_only_when_the_answer_is_sure() -> None:
    cfg = SelfRAGConfig()
    ctx = SelfRAGContext(lm=None, retriever=None, config=cfg)
    assert _streams_tokens({}, ctx, 1, 0)
    assert not _streams_tokens({}, ctx.with_config(rho=0.5), 1, 0)  # restraint may rewrite or abstain
    assert not _streams_tokens({}, ctx.with_config(long_form=True), 1, 0)
    assert not _streams_tokens({}, ctx, 1, 1) and not _streams_tokens({}, ctx, 2, 0)
    bars = ctx.with_config(abstain_issup=0.5)
    assert _streams_tokens({"retrieval_attempted": False}, bars, 1, 0)
    assert not _streams_tokens({"retrieval_attempted": True}, bars, 1, 0)
    # With a source, a closed-book answer becomes an abstention by default: nothing streams early.
    sourced = SelfRAGContext(lm=None, retriever=lambda q: [PARIS], config=cfg)
    assert not _streams_tokens({"retrieval_attempted": False}, sourced, 1, 0)
    assert not _streams_tokens({"given_passages": [PARIS]}, ctx, 1, 0)
    assert _streams_tokens({"retrieval_attempted": False}, sourced.with_config(abstain_closed_book=False), 1, 0)
    assert _streams_tokens({"retrieval_attempted": False}, sourced.with_config(mode="never"), 1, 0)


# -- the chain: long form -----------------------------------------------------------------------------------
def long_lm(**kw: Any) -> FakeReflectionLM:
    return FakeReflectionLM(
        retrieve=0.9,
        passages={"Paris": FakeSegment("Paris is the capital.[No Retrieval]", isrel=0.95),
                  "Lyon": FakeSegment("Lyon is big.[No Retrieval]", isrel=0.6, issup="partial")},
        no_retrieval=FakeSegment("It lies on the Seine.", isuse=4),
        **kw,
    )


def run_events(chain: SelfRAGChain, question: str) -> tuple[list[dict], list[dict]]:
    """The chain's chunks, and the graph's own segment events for the same input."""
    ctx = chain.context_for(None)
    events = [chunk for mode, chunk in chain.graph.stream({"question": question}, context=ctx,
                                                          config={"recursion_limit": 64},
                                                          stream_mode=["custom", "values"])
              if mode == "custom" and chunk["event"] == "segment"]
    return list(chain.stream(question)), events


@pytest.mark.parametrize("beam_width", [1, 2])
def test_long_form_streams_settled_segments_with_their_citations(beam_width: int) -> None:
    # abstain_issup=0: with an IsSup bar the answer's support is known only at the end (nothing streams early).
    chain = SelfRAGChain.from_retriever(long_lm(), lambda q: [PARIS, LYON], long_form=True, max_segments=3,
                                        beam_width=beam_width, mode="adaptive", abstain_issup=0.0)
    expected = chain.invoke("Tell me about Paris.")
    assert not expected["abstained"] and "[1]" in expected["answer"]
    chunks, events = run_events(chain, "Tell me about Paris.")
    assert added(chunks) == expected
    assert [e["index"] for e in events] == list(range(len(events))) and events
    streamed = "".join(e["text"] for e in events)
    assert expected["answer"].startswith(streamed) and "[1]" in streamed
    if beam_width == 1:  # every kept segment is settled as soon as it is ranked
        assert streamed == expected["answer"]
    else:  # the two beams part at the last segment: it comes with the final answer
        assert streamed != expected["answer"] and len(events) == 2
    assert added(astream(chain, "Tell me about Paris.")) == expected


def test_long_form_streams_nothing_while_the_bars_may_still_abstain() -> None:
    chain = SelfRAGChain.from_retriever(long_lm(), lambda q: [LYON], long_form=True, beam_width=1,
                                        abstain_isrel=0.9, abstain_issup=0.0)
    expected = chain.invoke("Tell me about Lyon.")
    assert expected["abstained"]
    chunks, events = run_events(chain, "Tell me about Lyon.")
    assert events == [] and added(chunks) == expected


def test_long_form_streams_nothing_while_an_issup_bar_is_pending() -> None:
    chain = SelfRAGChain.from_retriever(long_lm(), lambda q: [PARIS], long_form=True, beam_width=1,
                                        abstain_isrel=0.9, abstain_issup=0.5)
    expected = chain.invoke("Tell me about Paris.")
    chunks, events = run_events(chain, "Tell me about Paris.")
    assert events == [] and added(chunks) == expected


def test_long_form_streams_once_a_passage_meets_the_bars() -> None:
    chain = SelfRAGChain.from_retriever(long_lm(), lambda q: [PARIS], long_form=True, beam_width=1,
                                        abstain_isrel=0.9, abstain_issup=0.0)
    expected = chain.invoke("Tell me about Paris.")
    assert not expected["abstained"]
    chunks, events = run_events(chain, "Tell me about Paris.")
    assert events and added(chunks) == expected


# -- chat model ---------------------------------------------------------------------------------------------
def test_chat_stream_yields_tokens_and_metadata_last() -> None:
    lm = holding_lm(released=_set_event())
    chat = ChatSelfRAG(lm=lm)
    chunks = list(chat.stream("capital?"))
    assert len([c for c in chunks if c.content]) > 5
    assert "".join(c.content for c in chunks) == chat.invoke("capital?").content == ANSWER
    assert chunks[-1].response_metadata["retrieved"] is False and chunks[-1].response_metadata["reflections"]
    assert all(not c.response_metadata for c in chunks[:-1])
    stopped = ChatSelfRAG(lm=lm, stop=["France"])
    assert "".join(c.content for c in stopped.stream("q")) == stopped.invoke("q").content == "Paris is the capital of "

    async def collect() -> list:
        return [c async for c in chat.astream("capital?")]

    achunks = asyncio.run(collect())
    assert "".join(c.content for c in achunks) == ANSWER and len(achunks) > 5
    assert achunks[-1].response_metadata["reflections"]


