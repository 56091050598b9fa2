"""Self-restraint ("LLMs can learn self-restraint through iterative self-reflection"): the utility by hand, Table 4's
prompts, claim splitting and parsing of bad model output, and both claim scorers (self-consistency through LangChain
fakes, IsSup through the fake and the bundled reflection model)."""

from __future__ import annotations

import json
import math
import string
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.runnables import RunnableLambda

from langchain_selfrag import prompts as SP
from langchain_selfrag import tokens as T
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment
from langchain_selfrag.restraint import (
    P_EVAL,
    P_REWRITE,
    P_SAFE_WRITE,
    P_SPLITTER,
    P_WRITE,
    IsSupScorer,
    LLMClaimSplitter,
    LLMRewriter,
    SelfConsistencyScorer,
    SentenceSplitter,
    claim_records,
    expected_utility,
    format_facts,
    guess_entity,
    join_kept,
    keep_claims,
    lam,
    name_the_subject,
    parse_claims,
    parse_probability,
    sentence_pool,
    split_sentences,
    splitter_prompt,
    utility,
    without_own,
)
from langchain_selfrag.restraint.calibration import (
    Calibration,
    aggregate,
    expected_calibration_error,
    fit_platt,
    log_loss,
    reliability,
)

ISSUP = T.GROUPS[T.Kind.ISSUP]
ISREL = T.GROUPS[T.Kind.ISREL]


# -- utility (Eq. 1-4) by hand --------------------------------------------------------------------
@pytest.mark.parametrize(("rho", "expected"), [(0.0, 0.0), (0.2, 0.25), (0.5, 1.0), (0.8, 4.0), (0.9, 9.0)])
def test_lam_by_hand(rho: float, expected: float) -> None:
    assert lam(rho) == pytest.approx(expected)


@pytest.mark.parametrize("rho", [1.0, 1.5, -0.1, math.nan, "0.5", True, None])
def test_lam_rejects_rho_outside_0_1(rho: Any) -> None:
    with pytest.raises(ValueError, match="rho"):
        lam(rho)


def test_utility_by_hand() -> None:
    assert utility([True, True, False], 0.8) == pytest.approx(2 - 4)
    assert utility([True, True, False], 0.5) == pytest.approx(1.0)
    assert utility([False], 0.2) == pytest.approx(-0.25)
    assert utility([True] * 3, 0.9) == pytest.approx(3.0)
    assert utility([], 0.8) == 0.0  # abstention


def test_expected_utility_by_hand() -> None:
    assert expected_utility([0.9, 0.6], 0.5) == pytest.approx((0.9 - 0.1) + (0.6 - 0.4))
    assert expected_utility([0.9, 0.3], 0.8) == pytest.approx((0.9 - 4 * 0.1) + (0.3 - 4 * 0.7))
    assert expected_utility([0.5], 0.5) == pytest.approx(0.0)  # accuracy exactly rho*: worth nothing
    assert expected_utility([], 0.5) == 0.0
    with pytest.raises(ValueError, match="probability"):
        expected_utility([1.2], 0.5)


def test_kept_claims_are_exactly_those_with_positive_expected_utility() -> None:
    assert keep_claims([0.5, 0.51, 0.2, 1.0], 0.5) == [False, True, False, True]
    for rho in (0.2, 0.5, 0.8):
        for p in [i / 20 for i in range(21)]:
            assert keep_claims([p], rho) == [expected_utility([p], rho) > 1e-12]
    records = claim_records(["a", "b"], [0.9, 0.1], 0.5)
    assert records == [{"text": "a", "p": 0.9, "kept": True}, {"text": "b", "p": 0.1, "kept": False}]
    with pytest.raises(ValueError):
        claim_records(["a"], [0.9, 0.1], 0.5)


# -- Table 4 ---------------------------------------------------------------------------------------
TABLE_4 = {
    "write": "Write a biography of {entity} of up to 4 sentences.",
    "safe": "Write a biography of {entity} of up to 4 sentences. If you do not know who that is, do not answer.",
    "rewrite": "Write a biography of {entity} of up to 4 sentences. The biography should include, but not be "
               "limited to, the following facts. Facts: {facts}",
    "eval": "{sources} Based on these sources, what is the probability of the following claim concerning {entity} "
            "being true? Claim: {claim} Probability:",
    "splitter": "Please breakdown the following sentence into independent claims. Each claim must be "
                "understandable as an independent sentence, and start explicitly with the name of the entity. "
                "Entity: {entity} Sentence: {sentence} Claims:",
}


def fields_of(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_prompts_are_table_4_verbatim() -> None:
    ours = {"write": P_WRITE, "safe": P_SAFE_WRITE, "rewrite": P_REWRITE, "eval": P_EVAL, "splitter": P_SPLITTER}
    for key, template in ours.items():
        assert " ".join(template.split()) == TABLE_4[key], key
    assert fields_of(P_REWRITE) == {"entity", "facts"}
    assert fields_of(P_EVAL) == {"sources", "entity", "claim"}
    assert fields_of(P_SPLITTER) == {"entity", "sentence"}
    facts = format_facts(["Ada Lovelace was a mathematician.", "Ada  Lovelace\nwrote notes."])
    assert facts == "- Ada Lovelace was a mathematician.\n- Ada Lovelace wrote notes."
    assert P_REWRITE.format(entity="Ada Lovelace", facts=facts).endswith("Facts:\n" + facts)
    one_shot = splitter_prompt("Ada Lovelace", "She wrote notes.", example=True)
    assert one_shot.startswith(P_SPLITTER.split("\n")[0]) and "Michael Collins is retired." in one_shot
    assert one_shot.endswith("Entity: Ada Lovelace\nSentence: She wrote notes.\nClaims:")


# -- sentences and claims ---------------------------------------------------------------------------
def test_split_sentences_keeps_exact_text() -> None:
    text = "Dr. Ada Lovelace was born in 1815. She wrote 3.5 pages of notes! Was J. R. R. Tolkien her friend? No."
    assert split_sentences(text) == ["Dr. Ada Lovelace was born in 1815.", "She wrote 3.5 pages of notes!",
                                     "Was J. R. R. Tolkien her friend?", "No."]
    cited = "Paris is the capital. [1] It is large. [2]\nIt has a river"
    assert split_sentences(cited) == ["Paris is the capital. [1]", "It is large. [2]", "It has a river"]
    assert SentenceSplitter().split(cited) == ["Paris is the capital.", "It is large.", "It has a river"]
    assert split_sentences("") == [] and split_sentences("  \n ") == []


def test_parse_claims_reads_bullets_numbers_and_markdown() -> None:
    output = (" Claims:\n- Ada Lovelace was born in 1815.\n2) **Ada Lovelace** was English.\n"
              "* Ada Lovelace was born in 1815.\nClaim 4: Ada Lovelace wrote notes.\n\n"
              "Entity: Alan Turing\nSentence: He was born in 1912.\nClaims:\n- Alan Turing was born in 1912.")
    assert parse_claims(output) == ["Ada Lovelace was born in 1815.", "Ada Lovelace was English.",
                                    "Ada Lovelace wrote notes."]
    assert parse_claims("Claims: Ada Lovelace was born in 1815.") == ["Ada Lovelace was born in 1815."]


@pytest.mark.parametrize("junk", ["", "   \n  ", "---\n***", "1.\n2.\n-", "42 17", None, 3])
def test_parse_claims_of_junk_is_empty(junk: Any) -> None:
    assert parse_claims(junk) == []


def test_guess_entity() -> None:
    assert guess_entity("Who was Ada Lovelace?") == "Ada Lovelace"
    assert guess_entity("Tell me about the Zorblatt Bridge.") == "the Zorblatt Bridge"
    assert guess_entity("What is the capital of France?") == "What is the capital of France?"


@pytest.mark.parametrize("question", [
    "Write a biography of Ada Quill of up to 4 sentences.",  # the bio evaluation's template
    "Write a short biography of Ada Quill in 100 words or less",
    "Tell me a bio of Ada Quill.",
    "Who is Ada Quill, briefly?",
    "Tell me about Ada Quill in two sentences, please.",
])
def test_guess_entity_leaves_the_requested_length_out(question: str) -> None:
    assert guess_entity(question) == "Ada Quill"


def test_a_kept_sentence_names_the_subject_without_the_length_request() -> None:
    """The pronoun of a kept sentence becomes the entity, not "Ada Quill of up to 4 sentences"."""
    from langchain_selfrag.restraint import restrain_answer

    class Table:
        def score(self, claims, **_: Any) -> list[float]:
            return [0.9 if "harbours" in c else 0.1 for c in claims]

    answer = "Ada Quill was born in 1901 in Oslo. She painted harbours."
    result = restrain_answer(answer, rho=0.5, question="Write a biography of Ada Quill of up to 4 sentences.",
                             splitter=SentenceSplitter(), scorer=Table())
    assert result.answer == "Ada Quill painted harbours."


def test_llm_claim_splitter_through_a_langchain_model_falls_back_to_the_sentence() -> None:
    prompts: list[str] = []

    def reply(prompt: str) -> str:
        prompts.append(prompt)
        if "born in 1815" in prompt:
            return "- Ada Lovelace was born in 1815.\n- Ada Lovelace was born in London."
        return "Ada Lovelace wrote notes."  # a plain line is a claim too

    splitter = LLMClaimSplitter(RunnableLambda(reply))
    claims = splitter.split("She was born in 1815 in London. She wrote notes.", entity="Ada Lovelace")
    assert claims == ["Ada Lovelace was born in 1815.", "Ada Lovelace was born in London.", "Ada Lovelace wrote notes."]
    assert prompts[0] == P_SPLITTER.format(entity="Ada Lovelace", sentence="She was born in 1815 in London.")
    junk = LLMClaimSplitter(FakeListLLM(responses=["", "***"]))
    assert junk.split("She was born in 1815. She wrote notes.", entity="Ada") == ["She was born in 1815.",
                                                                                  "She wrote notes."]
    assert junk.fallbacks == 2
    chat = LLMClaimSplitter(FakeListChatModel(responses=["1. Ada Lovelace wrote notes."]))
    assert chat.split("She wrote notes.", entity="Ada Lovelace") == ["Ada Lovelace wrote notes."]


# -- verbalised probabilities -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [("85", 0.85), (" 85%", 0.85), ("0.85", 0.85), ("**85**", 0.85), ("85/100", 0.85), ("Probability: 7", 0.07),
     ("100", 1.0), ("0", 0.0), ("1.0", 1.0), (".5", 0.5), ("between 70 and 80%", 0.8), ("`60` percent", 0.6),
     ("85.5", 0.855), ("9 out of 10", 0.9)],
)
def test_parse_probability(text: str, expected: float) -> None:
    assert parse_probability(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "   ", "high", "very likely", "-20", "\u221220%", "150", "250%", "12/10",
                                  "**Probability:** unknown", None, 0.5])
def test_parse_probability_of_bad_output_is_none(text: Any) -> None:
    assert parse_probability(text) is None


# -- self-consistency scorer ----------------------------------------------------------------------------
SAMPLES = [
    "Ada Lovelace was born in 1815. She was a mathematician. She wrote notes on the engine.",
    "Ada Lovelace was born in 1815. She lived in London. She was the daughter of Byron.",
    "Ada Lovelace was born in 1820. She was a poet. She died in 1852. She had three children.",
]


class Judge:
    """A LangChain Runnable whose P_eval answer depends on the sources in the prompt."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.model = RunnableLambda(self.reply)

    def reply(self, prompt: str) -> str:
        self.prompts.append(prompt)
        sources = prompt.split("\nBased on these sources")[0]
        return "90" if "born in 1815" in sources else "10%"


def test_self_consistency_averages_seeded_subsets() -> None:
    judge = Judge()
    scorer = SelfConsistencyScorer(judge.model, n_subsets=4, subset_size=3, seed=7)
    claim = "Ada Lovelace was born in 1815."
    probs = scorer.score([claim], question="Who was Ada Lovelace?", samples=SAMPLES)
    sources = without_own(claim, sentence_pool(SAMPLES))
    assert len(sources) == 9 and sources.count(claim) == 1  # 10 sentences; its two occurrences less its own
    subsets = scorer.subsets(claim, sources)
    assert len(subsets) == 4 and all(len(s) == 3 for s in subsets)
    expected = sum(0.9 if "Ada Lovelace was born in 1815." in s else 0.1 for s in subsets) / 4
    assert probs == [pytest.approx(expected)]
    assert 0.1 < expected < 0.9  # the subsets differ, so the mean is a real average
    assert len(judge.prompts) == 4 and scorer.calls == 4
    assert judge.prompts[0].endswith("concerning Ada Lovelace being true?\nClaim: " + claim + "\nProbability:")


def count_judge(prompt: str) -> str:
    """P_eval answered with 30 per source line that repeats the claim: the frequency is the signal."""
    sources, _, rest = prompt.partition("\nBased on these sources")
    claim = rest.split("Claim: ")[1].split("\nProbability:")[0]
    return str(30 * sources.split("\n").count(f"- {claim}"))


def test_self_consistency_keeps_repeats_and_leaves_the_claims_own_sentence_out() -> None:
    samples = ["Al was born in Rome. Al was a baker.", "Al was born in Rome. Al was a tailor.",
               "Al was born in Rome. Al was a painter."]
    assert sentence_pool(samples) == ["Al was born in Rome.", "Al was a baker.", "Al was born in Rome.",
                                      "Al was a tailor.", "Al was born in Rome.", "Al was a painter."]
    scorer = SelfConsistencyScorer(RunnableLambda(count_judge), subset_size=5)
    probs = scorer.score(["Al was born in Rome.", "Al was a baker.", "Al was a cook."],
                         question="Who is Al?", entity="Al", samples=samples)
    # born in Rome: 3 in the pool, less its own = 2 sources -> "60"; baker: 1 less its own = 0 -> "0";
    # cook: never said, all 6 sentences are sources (6 > 5, so 4 subsets of 5), none repeats it -> "0"
    assert probs == [pytest.approx(0.6), 0.0, 0.0]
    # deduplicated sources (the old estimator) would give 0.3, 0.3, 0.0: no frequency, and self-evidence


def test_self_consistency_subsets_are_seeded_and_per_claim() -> None:
    sentences = [f"Sentence number {i}." for i in range(12)]
    a = SelfConsistencyScorer(None, n_subsets=4, subset_size=3, seed=1)
    b = SelfConsistencyScorer(None, n_subsets=4, subset_size=3, seed=1)
    c = SelfConsistencyScorer(None, n_subsets=4, subset_size=3, seed=2)
    assert a.subsets("claim one", sentences) == b.subsets("claim one", sentences)
    assert a.subsets("claim one", sentences) != c.subsets("claim one", sentences)
    assert a.subsets("claim one", sentences) != a.subsets("claim two", sentences)
    assert SelfConsistencyScorer(None, subset_size=20).subsets("x", sentences) == [tuple(sentences)]
    assert SelfConsistencyScorer(None).subsets("x", []) == []


def test_self_consistency_is_cached_by_claim_and_subset() -> None:
    judge = Judge()
    scorer = SelfConsistencyScorer(judge.model, n_subsets=3, subset_size=2, seed=0)
    claims = ["Ada Lovelace was born in 1815.", "Ada Lovelace was a poet."]
    first = scorer.score(claims, question="Who was Ada Lovelace?", samples=SAMPLES)
    sent = len(judge.prompts)
    assert sent == scorer.calls <= 6
    again = scorer.score(list(reversed(claims)), question="Who was Ada Lovelace?", samples=SAMPLES)
    assert again == list(reversed(first))
    assert len(judge.prompts) == sent and scorer.cache_hits >= sent
    scorer.score(claims[:1], question="Who was Ada Lovelace?", samples=SAMPLES[:1])  # other subsets: asked
    assert len(judge.prompts) > sent


def test_self_consistency_falls_back_on_unparsable_output() -> None:
    model = FakeListChatModel(responses=["I would say it is likely."])
    scorer = SelfConsistencyScorer(model, subset_size=10, fallback=0.3)
    assert scorer.score(["Ada Lovelace was born in 1815."], question="Who was Ada Lovelace?",
                        samples=SAMPLES) == [0.3]
    assert scorer.unparsed == 1 and scorer.fallbacks == 1
    nothing = SelfConsistencyScorer(model, fallback=0.4)
    assert nothing.score(["x"], question="q", samples=[]) == [0.4] and nothing.calls == 0

    def reply(prompt: str) -> str:
        sources = prompt.split("\nBased on these sources")[0]
        return "no idea" if "She was a poet." in sources else ("60" if "She lived in London." in sources else "80")

    claim = "Ada Lovelace was born in 1815."
    mixed = SelfConsistencyScorer(RunnableLambda(reply), n_subsets=6, subset_size=4, seed=3)
    prob = mixed.score([claim], question="Who was Ada Lovelace?", samples=SAMPLES)
    subsets = mixed.subsets(claim, without_own(claim, sentence_pool(SAMPLES)))
    parsed = [0.6 if "She lived in London." in s else 0.8 for s in subsets if "She was a poet." not in s]
    assert 0 < mixed.unparsed < 6 and mixed.unparsed == 6 - len(parsed) and mixed.fallbacks == 0
    assert prob == [pytest.approx(sum(parsed) / len(parsed))]  # the mean of the answers that parsed


# -- IsSup scorer ---------------------------------------------------------------------------------------
class JudgingLM(FakeReflectionLM):
    """The fake reflection LM, also judging IsSup of a claim written after evidence: ``judge(claim, evidence)``
    gives "full" / "partial" / "none"."""

    def __init__(self, judge: Any, **kw: Any) -> None:
        super().__init__(**kw)
        self.judge = judge

    def candidate_probs(self, prompts, candidates):
        if tuple(candidates) != ISSUP:
            return super().candidate_probs(prompts, candidates)
        self.calls.append(("candidate_probs", (list(prompts), list(candidates))))
        return [FakeSegment(issup=self.judge(p.rsplit(T.RELEVANT, 1)[1], self.evidence_of(p))).issup_probs()
                for p in prompts]


PARIS = Document("Paris is the capital of France.", metadata={"title": "France"})
LYON = Document("Lyon is a city on the Rhone.", metadata={"title": "Lyon"})


def by_words(claim: str, evidence: str) -> str:
    words = {w.strip(".").lower() for w in claim.split()} - {"is", "the", "of", "a", "on"}
    hits = sum(w in evidence.lower() for w in words)
    return "full" if hits == len(words) else ("partial" if hits else "none")


def test_issup_scorer_batches_claims_by_passages_and_can_take_the_best() -> None:
    lm = JudgingLM(by_words)
    claims = ["Paris is the capital.", "Lyon is on the Rhone.", "Rome is large."]
    probs = IsSupScorer(lm, aggregate="max").score(claims, question="Tell me about France", evidence=[PARIS, LYON])
    full, partial, none = (0.8 + 0.5 * 0.1), (0.1 + 0.5 * 0.8), (0.1 + 0.5 * 0.1)
    assert probs == [pytest.approx(full), pytest.approx(full), pytest.approx(none)]
    (prompts, candidates), = lm.calls_of("candidate_probs")  # one batched call, no IsRel call for "max"
    assert candidates == list(ISSUP) and len(prompts) == 6
    base = SP.format_prompt("Tell me about France")
    # passage-major: the prompts of one passage (sharing their prefix) come together
    assert prompts[0] == SP.with_evidence(base, "France", PARIS.page_content) + T.RELEVANT + claims[0]
    assert prompts[1] == SP.with_evidence(base, "France", PARIS.page_content) + T.RELEVANT + claims[1]
    assert prompts[3] == SP.with_evidence(base, "Lyon", LYON.page_content) + T.RELEVANT + claims[0]
    assert partial > none


class RelevanceLM(JudgingLM):
    """JudgingLM that also gives each passage an IsRel probability by its title."""

    def __init__(self, judge: Any, relevance: dict[str, float]) -> None:
        super().__init__(judge)
        self.relevance = relevance

    def candidate_probs(self, prompts, candidates):
        if tuple(candidates) != ISREL:
            return super().candidate_probs(prompts, candidates)
        self.calls.append(("candidate_probs", (list(prompts), list(candidates))))
        out = []
        for p in prompts:
            assert p.endswith("</paragraph>")  # read where the model writes its IsRel token
            r = next(v for title, v in self.relevance.items() if f"<paragraph>{title}\n" in p)
            out.append({T.RELEVANT: r, T.IRRELEVANT: 1.0 - r})
        return out


def test_issup_scorer_weighs_passages_by_relevance_and_calibrates() -> None:
    lm = RelevanceLM(by_words, {"France": 0.9, "Lyon": 0.1})
    full, none = 0.8 + 0.5 * 0.1, 0.1 + 0.5 * 0.1  # "Paris is the capital." vs PARIS, vs LYON
    scorer = IsSupScorer(lm)  # the default: IsRel-weighted mean
    assert scorer.aggregate == "relevance"
    (p,) = scorer.score(["Paris is the capital."], question="Tell me about France", evidence=[PARIS, LYON])
    assert p == pytest.approx((0.9 * full + 0.1 * none) / (0.9 + 0.1))  # 0.78, not the max 0.85
    assert scorer.calls == 2 and [c for _, c in lm.calls_of("candidate_probs")] == [list(ISSUP), list(ISREL)]
    mean = IsSupScorer(lm, aggregate="mean").score(["Paris is the capital."], question="q", evidence=[PARIS, LYON])
    assert mean == [pytest.approx((full + none) / 2)]
    cal = Calibration("relevance", a=2.0, b=-1.0)
    calibrated = IsSupScorer(lm, aggregate="max", calibration=cal)  # the calibration's aggregate applies
    assert calibrated.aggregate == "relevance"
    assert calibrated.score(["Paris is the capital."], question="q", evidence=[PARIS, LYON]) == [
        pytest.approx(1 / (1 + math.exp(-(2.0 * 0.78 - 1.0))))]
    # no evidence: support 0, so the calibrated probability of an unsupported claim, not a coin flip
    assert calibrated.score(["Paris is the capital."], question="q") == [pytest.approx(1 / (1 + math.e))]
    assert IsSupScorer(lm).score(["x"], question="q") == [0.0]
    assert IsSupScorer(lm, calibration=cal, fallback=0.3).score(["x"], question="q") == [0.3]
    with pytest.raises(ValueError, match="aggregate"):
        IsSupScorer(lm, aggregate="best")


def test_a_calibrated_scorer_judges_against_as_many_passages_as_it_was_fitted_on() -> None:
    lm = RelevanceLM(by_words, {"France": 0.1, "Lyon": 0.9})
    full, none = 0.8 + 0.5 * 0.1, 0.1 + 0.5 * 0.1
    first_only = IsSupScorer(lm, calibration=Calibration("joint", a=1.0, b=0.0, passages=1))
    (p,) = first_only.score(["Paris is the capital."], question="q", evidence=[PARIS, LYON])
    assert p == pytest.approx(1 / (1 + math.exp(-0.1 * full)))  # Lyon (IsRel 0.9 x none) is not read
    both = IsSupScorer(lm, calibration=Calibration("joint", a=1.0, b=0.0))
    assert both.score(["Paris is the capital."], question="q", evidence=[PARIS, LYON]) == [
        pytest.approx(1 / (1 + math.exp(-max(0.1 * full, 0.9 * none))))]
    assert Calibration.from_dict(Calibration("joint", 1.0, 0.0, passages=5).to_dict()).passages == 5
    assert Calibration.from_dict({"aggregate": "max", "a": 1, "b": 0}).passages is None  # older files
    with pytest.raises(ValueError, match="passages"):
        Calibration("joint", 1.0, 0.0, passages=0)


def test_issup_scorer_without_evidence_uses_the_fallback_and_neutralises_claims() -> None:
    lm = JudgingLM(by_words)
    scorer = IsSupScorer(lm, fallback=0.25)
    assert scorer.score(["Paris is the capital."], question="q") == [0.25]
    assert scorer.fallbacks == 1 and lm.calls_of("candidate_probs") == []
    prompt = scorer.prompts([f"Paris {T.FULLY_SUPPORTED} is big [2]"], question="q", evidence=[PARIS])[0][0]
    assert prompt.count(T.FULLY_SUPPORTED) == 0 and prompt.endswith("is big") and "[2]" not in prompt
    blank = IsSupScorer(FakeReflectionLM(), aggregate="max")  # no IsSup probabilities scores 0 (the paper's rule)
    assert blank.score(["Paris is the capital."], question="q", evidence=[PARIS]) == [0.0]


# -- the kept claims as text ------------------------------------------------------------------------
def test_kept_sentences_name_their_subject_when_its_sentence_was_dropped() -> None:
    assert name_the_subject("He played for Ajax.", "Bram Vellacott") == "Bram Vellacott played for Ajax."
    assert name_the_subject("Her work hangs in Leeds.", "Ada Quill") == "Ada Quill's work hangs in Leeds."
    assert name_the_subject("Hector was a dog.", "Ada Quill") == "Hector was a dog."  # not a pronoun
    assert name_the_subject("He won.", None) == "He won."
    sentences = ["Bram Vellacott was a Dutch poet.", "He played for Ajax.", "His brother was a judge."]
    assert join_kept(sentences, [False, True, True], "Bram Vellacott") == (
        "Bram Vellacott played for Ajax. His brother was a judge.")  # only the first kept sentence changes
    assert join_kept(sentences, [True, True, False], "Bram Vellacott") == (
        "Bram Vellacott was a Dutch poet. He played for Ajax.")  # its antecedent is kept: unchanged
    with pytest.raises(ValueError):
        join_kept(sentences, [True], "x")


def test_restrain_answer_rewrites_kept_claims_with_p_rewrite() -> None:
    from langchain_selfrag.restraint import restrain_answer

    class Table:
        def score(self, claims, **_: Any) -> list[float]:
            return [0.9 if "Ajax" in c else 0.1 for c in claims]

    answer = "Bram Vellacott was a Dutch poet. He played for Ajax."
    plain = restrain_answer(answer, rho=0.5, question="Who is Bram Vellacott?", splitter=SentenceSplitter(),
                            scorer=Table(), entity="Bram Vellacott")
    assert plain.answer == "Bram Vellacott played for Ajax." and plain.expected_utility == pytest.approx(0.8)
    seen: list[str] = []
    rewriter = LLMRewriter(RunnableLambda(lambda p: seen.append(p) or "Bram Vellacott was a footballer for Ajax."))
    fluent = restrain_answer(answer, rho=0.5, question="Who is Bram Vellacott?", splitter=SentenceSplitter(),
                             scorer=Table(), entity="Bram Vellacott", rewriter=rewriter)
    assert fluent.answer == "Bram Vellacott was a footballer for Ajax." and fluent.claims == plain.claims
    assert seen == [P_REWRITE.format(entity="Bram Vellacott", facts="- He played for Ajax.")]
    everything = restrain_answer("Bram Vellacott played for Ajax.", rho=0.5, question="Who is Bram Vellacott?",
                                 splitter=SentenceSplitter(), scorer=Table(), rewriter=rewriter)
    assert everything.answer == "Bram Vellacott played for Ajax." and rewriter.calls == 1  # nothing dropped
    silent = LLMRewriter(RunnableLambda(lambda p: "   "))
    assert restrain_answer(answer, rho=0.5, question="Who is Bram Vellacott?", splitter=SentenceSplitter(),
                           scorer=Table(), rewriter=silent).answer == "Bram Vellacott played for Ajax."
    # a question that names no subject: the pronoun stays (never replaced by the question's text)
    assert restrain_answer(answer, rho=0.5, question="What happened in 1950?", splitter=SentenceSplitter(),
                           scorer=Table()).answer == "He played for Ajax."


# -- calibration (pure) -----------------------------------------------------------------------------
def test_aggregates_by_hand() -> None:
    assert aggregate([0.2, 0.8], [0.5, 0.5], "max") == 0.8
    # joint: the best passage by IsRel x IsSup, not normalised (0.9*0.2 = 0.18 vs 0.3*0.8 = 0.24)
    assert aggregate([0.2, 0.8], [0.9, 0.3], "joint") == pytest.approx(0.24)
    assert aggregate([0.9, 0.9], [0.1, 0.1], "joint") == pytest.approx(0.09)  # nothing relevant: little support
    assert aggregate([0.9, 0.9], [0.1, 0.1], "relevance") == pytest.approx(0.9)  # where normalising hides that
    assert aggregate([0.2, 0.8], [], "mean") == pytest.approx(0.5)
    assert aggregate([0.2, 0.8], [0.75, 0.25], "relevance") == pytest.approx(0.75 * 0.2 + 0.25 * 0.8)  # 0.35
    assert aggregate([0.9], [0.0], "relevance") == 0.0  # no relevant passage: no support
    assert aggregate([], [], "max") == 0.0
    with pytest.raises(ValueError):
        aggregate([0.2], [], "relevance")
    # the max over more passages only grows; the relevance-weighted mean of irrelevant ones does not
    assert aggregate([0.2, 0.8, 0.95], [0.9, 0.9, 0.0], "max") > aggregate([0.2, 0.8], [0.9, 0.9], "max")
    assert aggregate([0.2, 0.8, 0.95], [0.9, 0.9, 0.0], "relevance") == aggregate([0.2, 0.8], [0.9, 0.9], "relevance")


def test_platt_fit_recovers_the_log_odds_by_hand() -> None:
    xs = [0.0] * 4 + [1.0] * 4
    ys = [True, False, False, False] + [True, True, True, False]  # 1/4 true at 0, 3/4 at 1
    a, b = fit_platt(xs, ys, l2=0.0)
    assert b == pytest.approx(math.log(1 / 3), abs=1e-6)  # sigmoid(b) = 0.25
    assert a + b == pytest.approx(math.log(3), abs=1e-6)  # sigmoid(a + b) = 0.75
    cal = Calibration("mean", a, b)
    assert cal.no_evidence == pytest.approx(0.25) and cal(1.0) == pytest.approx(0.75)
    assert Calibration.from_dict(cal.to_dict()) == cal
    sa, _ = fit_platt([0.0, 1.0], [False, True])  # separable: the penalty keeps it finite
    assert math.isfinite(sa) and sa > 5
    with pytest.raises(ValueError):
        Calibration("best", 1.0, 0.0)


def test_a_calibration_applies_only_to_the_model_it_was_fitted_for(tmp_path: Any) -> None:
    from langchain_selfrag.restraint.calibration import calibration_for, model_file

    class Inner:
        model_path = "/models/judge-abc.gguf"

    class Wrapper:
        def __init__(self, lm: Any) -> None:
            self.lm = lm

    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"calibration": Calibration("relevance", 3.0, -2.0, model="judge-abc.gguf").to_dict()}))
    assert model_file(Wrapper(Wrapper(Inner()))) == "judge-abc.gguf" and model_file(object()) is None
    assert calibration_for(Wrapper(Inner()), path) == Calibration("relevance", 3.0, -2.0, model="judge-abc.gguf")
    other = type("Other", (), {"model_path": "/models/other.gguf"})()
    assert calibration_for(other, path) is None and calibration_for(Inner(), tmp_path / "none.json") is None


def test_ece_and_reliability_by_hand() -> None:
    probs, labels = [0.1, 0.1, 0.9, 0.9, 1.0], [False, True, True, True, True]
    bins = reliability(probs, labels, bins=10)
    assert [(b["lo"], b["n"]) for b in bins] == [(0.1, 2), (0.9, 3)]  # 1.0 falls in the last bin
    assert bins[0]["frac_true"] == 0.5 and bins[1]["mean_p"] == pytest.approx(2.8 / 3)
    # |0.1 - 0.5| x 2 + |0.9333 - 1| x 3, over 5
    assert expected_calibration_error(probs, labels) == pytest.approx((0.8 + 0.2) / 5)
    assert log_loss([0.5, 0.5], [True, False]) == pytest.approx(math.log(2))
