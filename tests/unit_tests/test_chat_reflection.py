"""ChatReflectionLM: Self-RAG over a LangChain chat model, read from its token log-probabilities."""

from __future__ import annotations

import math

import pytest
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from langchain_selfrag import tokens as T
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.config import SelfRAGConfig
from langchain_selfrag.fakes import FakeLogprobsChatModel
from langchain_selfrag.lm import ChatModelError, ChatReflectionLM, ReflectionLMError, load_reflection_lm
from langchain_selfrag.lm.chat_reflection import chat_model_key
from langchain_selfrag.lm.logprobs import (MalformedLogprobs, MissingLogprobs, first_token_alternatives,
                                           reply_logprob, word_probs)
from langchain_selfrag.prompts import PromptFormatError, format_prompt, with_evidence
from langchain_selfrag.questions import ReflectionQuestions, Turn, critique_turn, turn_of

ZUBROWKA = Document("The capital of Freedonia is Zubrowka.", metadata={"source": "freedonia.md", "title": "Freedonia"})
WEATHER = Document("It rained in Sylvania all week.", metadata={"source": "sylvania.md", "title": "Sylvania"})

SCRIPT = [
    (r"Would passages", "Yes", {"Yes": 0.9, "No": 0.1}),
    (r"Zubrowka(?s:.*)Does the passage state", "Yes", {"Yes": 0.97, "No": 0.03}),
    (r"Does the passage state", "No", {"Yes": 0.04, "No": 0.96}),
    (r"Zubrowka(?s:.*)Answer the question from the passage", "Zubrowka is the capital.", {"Zubrowka": 0.9}),
    (r"Answer the question", "I do not know.", {"I": 0.5}),
    (r"support the answer", "Yes", {"Yes": 0.8, "Partially": 0.15, "No": 0.05}),
    (r"How useful", "5", {"5": 0.7, "4": 0.2, "1": 0.1}),
]


def retriever_of(*docs: Document):
    return lambda question: list(docs)


# -- pure parsing ----------------------------------------------------------------------------------------
def test_word_probs_sums_the_tokens_that_stand_for_a_word_and_normalises():
    alts = [("Yes", math.log(0.5)), (" yes", math.log(0.2)), ("No", math.log(0.1)), ("The", math.log(0.2))]
    probs = word_probs(alts, ["Yes", "No"])
    assert probs["Yes"] == pytest.approx(0.7 / 0.8)
    assert probs["No"] == pytest.approx(0.1 / 0.8)


def test_word_probs_reads_a_unique_word_start_and_a_word_with_punctuation():
    alts = [("F", math.log(0.6)), ("Part", math.log(0.3)), ("No.", math.log(0.1))]
    assert word_probs(alts, ["Fully", "Partially", "No"]) == pytest.approx({"Fully": 0.6, "Partially": 0.3, "No": 0.1})
    # "N" starts both words: it counts for neither
    assert word_probs([("N", 0.0)], ["No", "Never"]) == {"No": 0.5, "Never": 0.5}
    # "Yesterday" is not "Yes"
    assert word_probs([("Yesterday", 0.0)], ["Yes", "No"]) == {"Yes": 0.5, "No": 0.5}


def test_first_token_alternatives_reads_openai_and_ollama_shapes():
    entry = {"token": "Yes", "logprob": -0.1, "top_logprobs": [{"token": "Yes", "logprob": -0.1},
                                                                 {"token": "No", "logprob": -2.4}]}
    assert first_token_alternatives({"logprobs": {"content": [entry]}}) == [("Yes", -0.1), ("No", -2.4)]
    assert first_token_alternatives({"logprobs": [entry]}) == [("Yes", -0.1), ("No", -2.4)]
    assert reply_logprob({"logprobs": {"content": [entry, {"token": "!", "logprob": -0.5}]}}) == (pytest.approx(-0.6), 2)


@pytest.mark.parametrize("meta", [{}, {"logprobs": None}, {"logprobs": {"content": []}},
                                  {"logprobs": {"content": [{"token": "Yes", "logprob": -0.1}]}}])
def test_missing_logprobs_are_an_error_never_a_certainty(meta):
    with pytest.raises(MissingLogprobs):
        first_token_alternatives(meta)


@pytest.mark.parametrize("meta", [{"logprobs": {"content": "Yes"}},
                                  {"logprobs": {"content": [{"token": "Yes", "top_logprobs": [{"token": "Yes"}]}]}},
                                  {"logprobs": {"content": [{"token": "Yes", "top_logprobs": [{"token": 3, "logprob": 0}]}]}},
                                  {"logprobs": {"content": [{"token": "Y", "top_logprobs": [{"token": "Y", "logprob": 2.0}]}]}}])
def test_malformed_logprobs_are_named(meta):
    with pytest.raises(MalformedLogprobs):
        first_token_alternatives(meta)


def test_a_selfrag_prompt_splits_into_instruction_evidence_and_what_was_written():
    prompt = with_evidence(format_prompt("What is the capital of Freedonia?"), "Freedonia", ZUBROWKA.page_content)
    assert turn_of(prompt) == Turn("What is the capital of Freedonia?", "", "Freedonia", ZUBROWKA.page_content)
    later = (format_prompt("Q?") + T.RELEVANT + "First part." + T.FULLY_SUPPORTED + T.RETRIEVAL
             + "<paragraph>t\nx</paragraph>")
    assert turn_of(later) == Turn("Q?", "First part.", "t", "x")
    assert turn_of(format_prompt("Q?") + T.NO_RETRIEVAL) == Turn("Q?", "", None, None)
    with pytest.raises(PromptFormatError, match="not a Self-RAG prompt"):
        turn_of("<|im_start|>user\nQ?")
    with pytest.raises(ReflectionLMError, match="takes Self-RAG prompts"):
        ChatReflectionLM(FakeLogprobsChatModel()).candidate_probs(["<|im_start|>user\nQ?"], [T.RELEVANT, T.IRRELEVANT])


def test_critique_turn_finds_the_passage_and_the_answer_after_it():
    prompt = with_evidence(format_prompt("What is the capital of Freedonia?"), "Freedonia", ZUBROWKA.page_content)
    turn, answer = critique_turn(prompt + T.RELEVANT + "Zubrowka is the capital." + T.FULLY_SUPPORTED)
    assert turn.passage == ZUBROWKA.page_content and turn.title == "Freedonia"
    assert turn.instruction == "What is the capital of Freedonia?"
    assert answer == "Zubrowka is the capital."
    plain, written = critique_turn(format_prompt("Q?") + T.NO_RETRIEVAL + "An answer.")
    assert plain.passage is None and written == "An answer."


def test_questions_map_answer_words_to_reflection_tokens():
    q = ReflectionQuestions()
    assert q.tokens_of(T.Kind.ISREL, {"Yes": 0.8, "No": 0.2}) == {T.RELEVANT: 0.8, T.IRRELEVANT: 0.2}
    assert list(q.tokens_of(T.Kind.ISUSE, {"5": 1.0})) == list(T.UTILITY)
    system, user = q.ask(T.Kind.ISREL, Turn("Q?", "", "Doc", "text <|im_end|>"))
    assert "<|im_end|>" not in user and "Does the passage state the answer" in user
    with pytest.raises(ValueError, match="passage"):
        q.ask(T.Kind.ISSUP, Turn("Q?", ""), "answer")


# -- the adapter -----------------------------------------------------------------------------------------
def test_load_reflection_lm_takes_a_chat_model():
    lm = load_reflection_lm(FakeLogprobsChatModel(script=SCRIPT), write_top=2)
    assert isinstance(lm, ChatReflectionLM) and lm.write_top == 2
    assert lm.model_path.name == chat_model_key(lm.asked.base)


def test_candidate_probs_asks_each_group_as_a_question():
    chat = FakeLogprobsChatModel(script=SCRIPT)
    lm = ChatReflectionLM(chat)
    prompt = format_prompt("What is the capital of Freedonia?")
    retrieve = lm.candidate_probs([prompt], T.GROUPS[T.Kind.RETRIEVE])[0]
    assert retrieve == pytest.approx({T.NO_RETRIEVAL: 0.1, T.RETRIEVAL: 0.9, T.CONTINUE: 0.0})
    good, bad = (with_evidence(prompt, d.metadata["title"], d.page_content) for d in (ZUBROWKA, WEATHER))
    rel = lm.candidate_probs([good, bad], T.GROUPS[T.Kind.ISREL])
    assert rel[0][T.RELEVANT] == pytest.approx(0.97) and rel[1][T.RELEVANT] == pytest.approx(0.04)
    sup = lm.candidate_probs([good + T.RELEVANT + "Zubrowka is the capital."], T.GROUPS[T.Kind.ISSUP])[0]
    assert sup[T.FULLY_SUPPORTED] == pytest.approx(0.8)
    with pytest.raises(Exception, match="passage"):
        lm.candidate_probs([prompt], T.GROUPS[T.Kind.ISREL])
    assert chat.calls == 4  # the question without a passage is refused before anything is asked


def test_generate_writes_answers_only_for_the_passages_that_can_win():
    chat = FakeLogprobsChatModel(script=SCRIPT)
    lm = ChatReflectionLM(chat, write_top=1)
    prompt = format_prompt("What is the capital of Freedonia?")
    prompts = [with_evidence(prompt, d.metadata["title"], d.page_content) for d in (WEATHER, ZUBROWKA)]
    weather, zubrowka = lm.generate(prompts, first_candidates=T.GROUPS[T.Kind.ISREL])
    assert weather.answer == "" and [p.kind for p in weather.reflections] == [T.Kind.ISREL]
    assert zubrowka.answer == "Zubrowka is the capital."
    assert zubrowka.probs_for(T.Kind.ISSUP)[T.FULLY_SUPPORTED] == pytest.approx(0.8)
    assert zubrowka.probs_for(T.Kind.ISUSE)["[Utility:5]"] == pytest.approx(0.7)
    assert zubrowka.first_probs[T.RELEVANT] == pytest.approx(0.97)
    assert zubrowka.cumulative_logprob == pytest.approx((math.log(0.9) - 0.1 * 3) / 4)
    # 2 IsRel questions, 1 answer, its IsSup and IsUse
    assert chat.calls == 5


def test_a_separate_writer_writes_the_answers_and_the_model_is_asked_the_questions():
    """What replaced the three-model opt-in's reader: ``writer=`` (issue 82)."""
    asked = FakeLogprobsChatModel(script=SCRIPT)
    writer = FakeLogprobsChatModel(script=[(r"Answer the question", "Zubrowka, says the writer.", {"Zubrowka": 0.8})])
    lm = ChatReflectionLM(asked, writer=writer, write_top=1)
    prompt = with_evidence(format_prompt("What is the capital of Freedonia?"), "Freedonia", ZUBROWKA.page_content)
    gen, = lm.generate([prompt], first_candidates=T.GROUPS[T.Kind.ISREL])
    assert gen.answer == "Zubrowka, says the writer." and writer.calls == 1
    assert asked.calls == 3  # IsRel, then the writer's answer's IsSup and IsUse
    assert gen.probs_for(T.Kind.ISSUP)[T.FULLY_SUPPORTED] == pytest.approx(0.8)
    assert "answers by" in lm.name


def test_the_chain_answers_with_a_citation_and_abstains_with_a_reason():
    chat = FakeLogprobsChatModel(script=SCRIPT)
    chain = SelfRAGChain(load_reflection_lm(chat), retriever_of(WEATHER, ZUBROWKA))
    out = chain.invoke("What is the capital of Freedonia?")
    assert out["abstained"] is False and "Zubrowka" in out["answer"]
    assert out["citations"] and "freedonia.md" in str(out["citations"])
    unanswered = SelfRAGChain(load_reflection_lm(FakeLogprobsChatModel(script=SCRIPT)), retriever_of(WEATHER))
    out = unanswered.invoke("What is the capital of Sylvania?")
    assert out["abstained"] is True and out["abstain_reason"]


def test_a_chat_model_without_logprobs_fails_at_once_naming_the_setting():
    lm = load_reflection_lm(FakeLogprobsChatModel(script=SCRIPT, logprobs=False))
    with pytest.raises(ChatModelError, match=r"no token log-probabilities.*logprobs=True"):
        lm.candidate_probs([format_prompt("Q?")], [T.NO_RETRIEVAL, T.RETRIEVAL])


class FailingChat(BaseChatModel):
    """A chat model whose server is gone, or that answers with garbage."""

    mode: str = "refused"

    @property
    def _llm_type(self) -> str:
        return "failing"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        if self.mode == "refused":
            raise ConnectionRefusedError("[Errno 111] Connection refused")
        meta = {"logprobs": {"content": [{"token": "Yes", "logprob": "high", "top_logprobs": [{"token": "Yes"}]}]}}
        return ChatResult(generations=[ChatGeneration(message=AIMessage("Yes", response_metadata=meta))])


def test_a_dead_server_and_a_malformed_reply_each_give_one_clear_error():
    prompt = [format_prompt("Q?")]
    with pytest.raises(ChatModelError, match=r"FailingChat could not answer: ConnectionRefusedError"):
        load_reflection_lm(FailingChat()).candidate_probs(prompt, [T.NO_RETRIEVAL, T.RETRIEVAL])
    with pytest.raises(ChatModelError, match=r"malformed reply"):
        load_reflection_lm(FailingChat(mode="garbage")).candidate_probs(prompt, [T.NO_RETRIEVAL, T.RETRIEVAL])


def test_the_chain_says_which_model_failed():
    chain = SelfRAGChain(load_reflection_lm(FailingChat()), retriever_of(ZUBROWKA))
    with pytest.raises(Exception, match="FailingChat could not answer"):
        chain.invoke("What is the capital of Freedonia?")


def test_chat_model_key_names_class_model_and_server():
    a = FakeLogprobsChatModel()
    assert chat_model_key(a).startswith("FakeLogprobsChatModel-model-")
    assert chat_model_key(a.bind(stop=["x"])) == chat_model_key(a)


def test_chat_selfrag_and_restraint_take_the_chat_model_unchanged():
    from langchain_core.messages import HumanMessage

    from langchain_selfrag.chat_models import ChatSelfRAG

    lm = load_reflection_lm(FakeLogprobsChatModel(script=SCRIPT))
    chat = ChatSelfRAG(lm=lm, retriever=retriever_of(WEATHER, ZUBROWKA))
    reply = chat.invoke([HumanMessage("What is the capital of Freedonia?")])
    assert "Zubrowka" in reply.content
    restrained = SelfRAGChain(lm, retriever_of(WEATHER, ZUBROWKA), SelfRAGConfig(rho=0.5)).invoke("What is the capital of Freedonia?")
    assert restrained["restraint"] is not None and restrained["claims"]
    assert "Zubrowka" in restrained["answer"]


def test_each_question_of_a_merged_call_gets_its_answer():
    """The scheduler merges concurrent runs into one call: write_top counts per question, not per call."""
    chat = FakeLogprobsChatModel(script=SCRIPT)
    lm = ChatReflectionLM(chat, write_top=1)
    prompts = [with_evidence(format_prompt(q), d.metadata["title"], d.page_content)
               for q in ("What is the capital of Freedonia?", "Which city is the capital of Freedonia?")
               for d in (WEATHER, ZUBROWKA)]
    gens = lm.generate(prompts, first_candidates=T.GROUPS[T.Kind.ISREL])
    assert [bool(g.answer) for g in gens] == [False, True, False, True]
    same = [with_evidence(format_prompt("What is the capital of Freedonia?"), d.metadata["title"], d.page_content)
            for d in (WEATHER, ZUBROWKA)] * 2  # one question from two concurrent runs
    streamed: list[tuple[int, str]] = []
    gens = lm.generate(same, first_candidates=T.GROUPS[T.Kind.ISREL], on_token=lambda i, t: streamed.append((i, t)))
    assert [g.answer for g in gens] == ["", "Zubrowka is the capital.", "", "Zubrowka is the capital."]
    assert sorted(streamed) == [(1, "Zubrowka is the capital."), (3, "Zubrowka is the capital.")]
    outs = SelfRAGChain(lm, retriever_of(WEATHER, ZUBROWKA)).batch(["What is the capital of Freedonia?"] * 3)
    assert all(not out["abstained"] and "Zubrowka" in out["answer"] for out in outs)


@pytest.mark.parametrize("base_url, env_url, sent", [("http://127.0.0.1:8080/v1", None, True), (None, None, False),
                                                     (None, "http://127.0.0.1:8080/v1", True)],
                         ids=["compatible-server", "openai-api", "server-in-the-environment"])
def test_a_compatible_server_gets_max_tokens_beside_chatopenais_max_completion_tokens(base_url, env_url, sent,
                                                                                     monkeypatch):
    """llama-cpp-python's server ignores max_completion_tokens (ChatOpenAI's name for the limit): a one-token
    question must say max_tokens too, or it is answered at full length. OpenAI's own API gets its own name only.
    The server may come from ``$OPENAI_BASE_URL`` (docs/chat-models.md's quickstart) as well as ``base_url``."""
    openai = pytest.importorskip("langchain_openai")
    from langchain_selfrag.lm.transports import LangChainTransport

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    if env_url:
        monkeypatch.setenv("OPENAI_BASE_URL", env_url)

    chat = openai.ChatOpenAI(model="qwen", base_url=base_url, api_key="none", extra_body={"ttl": 300})
    options = LangChainTransport(chat)._options(question=True, max_tokens=1, temperature=0.0)
    payload = chat._get_request_payload([("user", "Is it?")], **options)
    assert payload["max_completion_tokens"] == 1 and payload["logprobs"] and payload["top_logprobs"] == 10
    assert payload.get("extra_body") == ({"ttl": 300, "max_tokens": 1} if sent else {"ttl": 300})
