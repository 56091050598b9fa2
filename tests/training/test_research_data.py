"""ReSearch data generation ("LLMs can learn self-restraint through iterative self-reflection", Algorithm 1): the
loop, its records, resuming, the CLI, and the IsSup self-consistency evaluator."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from langchain_selfrag import tokens as T
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment
from langchain_selfrag.restraint.claims import SentenceSplitter
from langchain_selfrag.restraint.consistency import IsSupConsistencyScorer, sentence_pool, without_own
from langchain_selfrag.restraint.prompts import ABSTENTION, P_REWRITE, P_WRITE, format_facts
from training.research import main as cli_main
from training.restraint.algorithm import (
    ChatModelPolicy,
    ReflectionLMPolicy,
    ResearchConfig,
    ResearchRun,
    Sample,
    done_ids,
    question_seed,
    rewrite_facts,
    run,
)
from training.restraint.questions import Question, parse_passage_line, read_questions

ISSUP = T.GROUPS[T.Kind.ISSUP]
SAMPLE_KEYS = {"iteration", "prompt_kind", "completion", "text", "claims", "expected_utility", "abstain"}
RECORD_KEYS = {"id", "question", "entity", "rho", "method", "prompt", "samples"}


# -- fakes -------------------------------------------------------------------------------------------
class ScriptPolicy:
    """Answers are ``;``-separated claims, chosen from ``answers`` by sample index and seed."""

    def __init__(self, answers: list[str], fail_on: str | None = None) -> None:
        self.answers = answers
        self.fail_on = fail_on
        self.calls: list[tuple[list[str], int, dict]] = []

    def prompt_for(self, instruction: str) -> str:
        return f"<user>{instruction}</user>"

    def sample(self, prompts, n, *, temperature, top_p, seed):
        if self.fail_on and any(self.fail_on in p for p in prompts):
            raise KeyboardInterrupt("crash")
        self.calls.append((list(prompts), n, {"temperature": temperature, "top_p": top_p, "seed": seed}))
        return [[Sample(f"<a>{self.answers[j % len(self.answers)]}</a>", self.answers[j % len(self.answers)])
                 for j in range(n)] for _ in prompts]

    def abstention(self, entity: str) -> Sample:
        return Sample(f"<a>no idea about {entity}</a>", f"no idea about {entity}")


class SemicolonSplitter:
    def split(self, text: str, *, entity: str | None = None) -> list[str]:
        return [c.strip() for c in text.split(";") if c.strip()]


class TableScorer:
    """Claim probabilities from a table; records what it was asked."""

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table
        self.calls: list[dict] = []

    def score(self, claims, *, question, entity=None, evidence=(), samples=()):
        self.calls.append({"claims": list(claims), "samples": list(samples), "entity": entity,
                           "evidence": list(evidence)})
        return [self.table[c] for c in claims]


TABLE = {"a": 0.9, "b": 0.3, "c": 0.6, "d": 0.5, "e": 0.8}
ANSWERS = ["a; b", "c", "d; e"]
Q = Question("q1", "Who is Ann Smith?", "Ann Smith")


def research(method: str = "research", rho: float = 0.5, k: int = 3, j: int = 4, answers=ANSWERS):
    policy, scorer = ScriptPolicy(answers), TableScorer(TABLE)
    cfg = ResearchConfig(iterations=k, samples=j, rho=rho, method=method, temperature=0.8, top_p=0.95, seed=7)
    return ResearchRun(policy, SemicolonSplitter(), scorer, cfg), policy, scorer


# -- the loop ----------------------------------------------------------------------------------------
def test_k_iterations_of_j_samples_then_the_abstention() -> None:
    run_, policy, scorer = research()
    rec = run_.record(Q)
    assert set(rec) == RECORD_KEYS
    assert [n for _, n, _ in policy.calls] == [4, 4, 4]
    assert [s["iteration"] for s in rec["samples"]] == [1] * 4 + [2] * 4 + [3] * 4 + [-1]
    assert [s.get("prompt_kind") for s in rec["samples"][:-1]] == ["write"] * 4 + ["rewrite"] * 8
    assert all(set(s) == SAMPLE_KEYS for s in rec["samples"][:-1])
    assert rec["prompt"] == "<user>" + P_WRITE.format(entity="Ann Smith") + "</user>"
    assert rec["samples"][0]["completion"] == "<a>a; b</a>" and rec["samples"][0]["text"] == "a; b"
    stop = rec["samples"][-1]
    assert stop == {"iteration": -1, "completion": "<a>no idea about Ann Smith</a>", "text": "no idea about Ann Smith",
                    "claims": [], "expected_utility": 0.0, "abstain": True}
    # the evaluator sees every answer so far
    assert [len(c["samples"]) for c in scorer.calls] == [4, 8, 12]
    assert all(c["entity"] == "Ann Smith" for c in scorer.calls)
    assert [opts["temperature"] for _, _, opts in policy.calls] == [0.8] * 3
    seeds = [opts["seed"] for _, _, opts in policy.calls]
    assert seeds == [question_seed(7, "q1", k) for k in (1, 2, 3)] and len(set(seeds)) == 3


def test_rewrite_prompts_carry_exactly_the_claims_above_rho() -> None:
    run_, policy, _ = research(answers=["a; b", "c", "d"])  # iteration 1 sees a, b, c, d
    run_.record(Q)
    prompts = [p[0] for p, _, _ in policy.calls]
    assert prompts[0] == P_WRITE.format(entity="Ann Smith")
    assert prompts[1] == P_REWRITE.format(entity="Ann Smith", facts=format_facts(["a", "c"]))  # 0.9, 0.6 > 0.5
    assert format_facts(["a", "c"]) == "- a\n- c"
    # with rho = 0.75 only a (0.9) is a fact; d = 0.5 never is
    run2, policy2, _ = research(rho=0.75, answers=["a; b", "c", "d"])
    run2.record(Q)
    assert policy2.calls[1][0][0].endswith("Facts:\n- a")
    # facts gather over all iterations: e (0.8) appears only from iteration 2 on
    class Growing(ScriptPolicy):
        def sample(self, prompts, n, **kw):
            out = super().sample(prompts, n, **kw)
            if len(self.calls) > 1:
                return [[Sample("e", "e")] * n]
            return out

    grow = Growing(["a; b"])
    ResearchRun(grow, SemicolonSplitter(), TableScorer(TABLE), ResearchConfig(iterations=3, samples=2)).record(Q)
    assert grow.calls[1][0][0].endswith("Facts:\n- a")
    assert grow.calls[2][0][0].endswith("Facts:\n- a\n- e")


def test_expected_utility_by_hand() -> None:
    run_, _, _ = research(rho=0.5)
    rec = run_.record(Q)
    first = rec["samples"][0]  # "a; b": 0.9 and 0.3, lambda = 1
    assert first["claims"] == [{"text": "a", "p": 0.9, "kept": True}, {"text": "b", "p": 0.3, "kept": False}]
    assert first["expected_utility"] == pytest.approx((0.9 - 0.1) + (0.3 - 0.7))  # 0.4
    assert rec["samples"][2]["expected_utility"] == pytest.approx((0.5 - 0.5) + (0.8 - 0.2))  # "d; e": 0.6
    run3, _, _ = research(rho=0.75)  # lambda = 3
    rec3 = run3.record(Q)
    assert rec3["samples"][0]["expected_utility"] == pytest.approx((0.9 - 3 * 0.1) + (0.3 - 3 * 0.7))  # -1.2
    assert rec3["samples"][1]["expected_utility"] == pytest.approx(0.6 - 3 * 0.4)  # "c": -0.6
    assert rec3["samples"][2]["expected_utility"] == pytest.approx((0.5 - 1.5) + (0.8 - 0.6))  # "d; e": -0.8
    assert [c["kept"] for c in rec3["samples"][2]["claims"]] == [False, True]


class RoundScorer:
    """Claim probabilities that change with the round: round r (1-based) gives ``table[claim][r - 1]``."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.rounds = 0

    def score(self, claims, *, question, entity=None, evidence=(), samples=()):
        self.rounds += 1
        return [self.table[c][self.rounds - 1] for c in claims]


def test_expected_utility_is_computed_once_the_record_is_complete() -> None:
    class ByRound(ScriptPolicy):
        def sample(self, prompts, n, **kw):
            super().sample(prompts, n, **kw)
            return [[Sample("a; b", "a; b")] * n] if len(self.calls) == 1 else [[Sample("a", "a")] * n]

    scorer = RoundScorer({"a": [0.9, 0.7, 0.2], "b": [0.3, 0.3, 0.3]})
    rec = ResearchRun(ByRound(["a; b"]), SemicolonSplitter(), scorer, ResearchConfig(iterations=3, samples=1)).record(Q)
    # round 1 scores a = 0.9 and b = 0.3, rounds 2 and 3 rescore a (0.7, then 0.2); every sample uses a = 0.2
    first, second, third = rec["samples"][:3]
    assert first["claims"] == [{"text": "a", "p": 0.2, "kept": False}, {"text": "b", "p": 0.3, "kept": False}]
    assert first["expected_utility"] == pytest.approx((0.2 - 0.8) + (0.3 - 0.7))  # -1.0, not round 1's 0.4
    assert second["expected_utility"] == pytest.approx(0.2 - 0.8)  # -0.6, not round 2's 0.4
    assert third["expected_utility"] == pytest.approx(-0.6)


def test_search_baseline_is_one_round_of_k_times_j() -> None:
    run_, policy, scorer = research(method="search", k=3, j=4)
    rec = run_.record(Q)
    assert rec["method"] == "search"
    assert [n for _, n, _ in policy.calls] == [12]
    assert policy.calls[0][0] == [P_WRITE.format(entity="Ann Smith")]
    assert [s["iteration"] for s in rec["samples"]] == [1] * 12 + [-1]
    assert {s.get("prompt_kind") for s in rec["samples"][:-1]} == {"write"}
    assert [len(c["samples"]) for c in scorer.calls] == [12]


def test_rewrite_facts_limit_keeps_the_most_probable_in_order() -> None:
    probs = {"x": 0.6, "y": 0.95, "z": 0.2, "w": 0.8}
    assert rewrite_facts(probs, 0.5) == ["x", "y", "w"]
    assert rewrite_facts(probs, 0.5, limit=2) == ["y", "w"]
    with pytest.raises(ValueError):
        ResearchConfig(rho=1.0)
    with pytest.raises(ValueError):
        ResearchConfig(method="beam")


def test_passages_go_to_the_evaluator_and_the_record() -> None:
    from langchain_core.documents import Document

    run_, _, scorer = research(k=1, j=1)
    doc = Document(page_content="Ann Smith is a painter.", metadata={"title": "Ann Smith"})
    rec = run_.record(Question("q2", "Who is Ann Smith?", "Ann Smith", (doc,)))
    assert rec["passages"] == [{"title": "Ann Smith", "text": "Ann Smith is a painter."}]
    assert scorer.calls[0]["evidence"] == [doc]
    assert "passages" not in run_.record(Q)


# -- policies ----------------------------------------------------------------------------------------
def test_reflection_policy_forces_no_retrieval_and_samples_with_the_guard() -> None:
    seg = FakeSegment("Ann Smith is a painter.", isrel=None, isuse=4, variants=("Ann Smith sings.", "Ann is tall."))
    lm = FakeReflectionLM(no_retrieval=seg)
    policy = ReflectionLMPolicy(lm, max_new_tokens=50)
    got = policy.sample(["Write about Ann.", "Write about Bob."], 5, temperature=1.0, top_p=0.9, seed=3)
    assert [len(g) for g in got] == [5, 5]
    prompts = lm.calls_of("generate")[0][0]
    assert prompts[0] == "### Instruction:\nWrite about Ann.\n\n### Response:\n[No Retrieval]"
    assert prompts[5].startswith("### Instruction:\nWrite about Bob.")
    assert lm.generate_options[0] == {"guard": [True] * 10, "stop_at_segment": False, "temperature": 1.0,
                                      "top_p": 0.9, "seed": 3}
    assert lm.calls_of("generate")[0][2] is False  # stop_at_retrieval
    for s in got[0]:
        assert s.completion.startswith(T.NO_RETRIEVAL) and s.completion.endswith("[Utility:4]")
        assert s.text in {seg.text, *seg.variants}
    assert len({s.text for s in got[0]}) > 1
    again = policy.sample(["Write about Ann.", "Write about Bob."], 5, temperature=1.0, top_p=0.9, seed=3)
    assert again == got
    stop = policy.abstention("Ann Smith")
    assert stop.text == ABSTENTION.format(entity="Ann Smith")
    assert stop.completion.startswith(T.NO_RETRIEVAL + stop.text) and stop.completion[len(T.NO_RETRIEVAL + stop.text):] in T.UTILITY
    assert policy.prompt_for("Who?") == "### Instruction:\nWho?\n\n### Response:\n"


class SeedEcho(BaseChatModel):
    """A chat model with sampling fields that answers with them."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def _llm_type(self) -> str:
        return "seed-echo"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        text = f"{messages[-1].content} t={self.temperature} p={self.top_p} s={self.seed}"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


def test_chat_policy_binds_seeds_per_sample() -> None:
    policy = ChatModelPolicy(SeedEcho())
    got = policy.sample(["hi", "yo"], 3, temperature=0.7, top_p=0.9, seed=5)
    assert [len(g) for g in got] == [3, 3]
    assert all(s.text.startswith("hi t=0.7 p=0.9 s=") for s in got[0])
    assert len({s.text for s in got[0]}) == 3
    assert got == policy.sample(["hi", "yo"], 3, temperature=0.7, top_p=0.9, seed=5)
    assert got != policy.sample(["hi", "yo"], 3, temperature=0.7, top_p=0.9, seed=6)
    assert policy.prompt_for("Write.") == "Write."
    assert policy.abstention("Ann").completion == ABSTENTION.format(entity="Ann")
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    plain = ChatModelPolicy(FakeListChatModel(responses=["one", "two"]))
    assert [s.text for s in plain.sample(["q"], 2, temperature=1.0, top_p=1.0, seed=0)[0]] == ["one", "two"]


# -- resumable output ----------------------------------------------------------------------------------
QUESTIONS = [Question(f"id{i}", f"Who is P{i}?", f"P{i}") for i in range(4)]


def test_an_interrupted_run_resumes_without_duplicates_or_loss(tmp_path: Path) -> None:
    out = tmp_path / "out" / "research.jsonl"
    crashing = ResearchRun(ScriptPolicy(["a"], fail_on="P2"), SemicolonSplitter(), TableScorer(TABLE),
                           ResearchConfig(iterations=2, samples=2))
    with pytest.raises(KeyboardInterrupt):
        run(QUESTIONS, crashing, out, progress=False)
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["id0", "id1"]
    fine = ResearchRun(ScriptPolicy(["a"]), SemicolonSplitter(), TableScorer(TABLE), ResearchConfig(iterations=2, samples=2))
    assert run(QUESTIONS, fine, out, progress=False) == 2
    ids = [json.loads(x)["id"] for x in out.read_text().splitlines()]
    assert ids == ["id0", "id1", "id2", "id3"]
    assert run(QUESTIONS, fine, out, progress=False) == 0
    # a torn last line (killed mid-write) is cut and redone
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:3]) + lines[3][:40])
    assert done_ids(out) == {"id0", "id1", "id2"}
    assert out.read_text() == "".join(lines[:3])
    assert run(QUESTIONS, fine, out, progress=False) == 1
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ids
    out.write_text(lines[0] + "not json\n" + lines[1])
    with pytest.raises(ValueError, match="malformed"):
        done_ids(out)


# -- inputs and the command line ------------------------------------------------------------------
BIO_LINE = ("Ann Smith // Ann Smith Ann Smith (born 1950) is a painter. [sep] Ann Smyth // Ann Smyth was a poet."
            " [sep] No title here")


def test_passage_lines_and_question_files(tmp_path: Path) -> None:
    docs = parse_passage_line(BIO_LINE)
    assert [(d.metadata["title"], d.page_content) for d in docs] == [
        ("Ann Smith", "Ann Smith Ann Smith (born 1950) is a painter."), ("Ann Smyth", "Ann Smyth was a poet."),
        ("", "No title here")]
    (tmp_path / "q.txt").write_text("Who is Ann Smith?\n\nWho is Bob Jones (priest)?\nWho is Ann Smith?\n")
    (tmp_path / "p.txt").write_text(f"{BIO_LINE}\nBob // Bob Jones was a priest.\nX // y\n")
    qs = read_questions(tmp_path / "q.txt", tmp_path / "p.txt")
    assert [(q.id, q.entity) for q in qs] == [("Ann Smith", "Ann Smith"), ("Bob Jones (priest)", "Bob Jones (priest)"),
                                              ("Ann Smith#2", "Ann Smith")]
    assert len(qs[0].passages) == 3 and qs[1].passages[0].page_content == "Bob Jones was a priest."
    (tmp_path / "q.jsonl").write_text(json.dumps({"id": "x1", "question": "Who is Cy?", "passages": ["C // Cy is."]})
                                      + "\n" + json.dumps({"entity": "Di"}) + "\n")
    qj = read_questions(tmp_path / "q.jsonl")
    assert [(q.id, q.question, q.entity, len(q.passages)) for q in qj] == [("x1", "Who is Cy?", "Cy", 1),
                                                                         ("Di", "Who is Di?", "Di", 0)]
    with pytest.raises(ValueError, match="passage lines"):
        read_questions(tmp_path / "q.txt", tmp_path / "q.jsonl")


@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_dir, tmp_path_factory) -> Path:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    from training.export import export_gguf

    return export_gguf(tiny_model_dir, tmp_path_factory.mktemp("research") / "tiny.gguf", outtype="f32")


def test_cli_on_the_tiny_gguf_writes_and_resumes(tmp_path: Path, tiny_gguf: Path, capsys) -> None:
    (tmp_path / "q.txt").write_text("Who is Ann Smith?\nWho is Bob Jones?\nWho is Cy Young?\n")
    (tmp_path / "p.txt").write_text(f"{BIO_LINE}\nBob // Bob Jones was a priest.\nCy // Cy pitched.\n")
    out = tmp_path / "r.jsonl"
    args = ["--entities", str(tmp_path / "q.txt"), "--passages", str(tmp_path / "p.txt"), "--model", str(tiny_gguf),
            "--out", str(out), "-K", "2", "-J", "3", "--max-new-tokens", "12", "--threads", "1", "--quiet",
            "--limit", "2"]
    assert cli_main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["written"] == 2
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in records] == ["Ann Smith", "Bob Jones"]
    for r in records:
        assert set(r) == RECORD_KEYS | {"passages"} and r["method"] == "research"
        assert [s["iteration"] for s in r["samples"]] == [1, 1, 1, 2, 2, 2, -1]
        assert r["prompt"] == f"### Instruction:\nWrite a biography of {r['entity']} of up to 4 sentences.\n\n### Response:\n"
        for s in r["samples"][:-1]:
            assert s["completion"].startswith(T.NO_RETRIEVAL)
            assert all(0.0 <= c["p"] <= 1.0 for c in s["claims"])
            lam = 1.0
            assert s["expected_utility"] == pytest.approx(sum(c["p"] - lam * (1 - c["p"]) for c in s["claims"]))
    assert records[0]["passages"][0] == {"title": "Ann Smith", "text": "Ann Smith Ann Smith (born 1950) is a painter."}
    # rerun without --limit: only the third question is new
    assert cli_main(args[:-2] + ["--method", "research"]) == 0
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["Ann Smith", "Bob Jones", "Cy Young"]
    search = tmp_path / "s.jsonl"
    assert cli_main([*args[:7], str(search), *args[8:], "--method", "search"]) == 0
    rec = json.loads(search.read_text().splitlines()[0])
    assert rec["method"] == "search" and [s["iteration"] for s in rec["samples"]] == [1] * 6 + [-1]
    assert cli_main(["--entities", str(tmp_path / "missing.txt"), "--out", str(out), "--quiet"]) == 2


# -- the IsSup self-consistency evaluator -----------------------------------------------------------
class IsSupFake:
    """p(Full) = 0.2 x the times the claim's first word occurs in the evidence text (title excluded)."""

    has_reflection_vocab = True

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def candidate_probs(self, prompts, candidates):
        assert list(candidates) == list(ISSUP)
        self.calls.append(list(prompts))
        return [{ISSUP[0]: self.full(p), ISSUP[1]: 0.0, ISSUP[2]: 1.0 - self.full(p)} for p in prompts]

    @staticmethod
    def parts(prompt: str) -> tuple[str, str]:
        paragraph = prompt.split(T.PARAGRAPH_START)[-1].split(T.PARAGRAPH_END)[0]
        return paragraph.split("\n", 1)[1], prompt.split(T.RELEVANT)[-1]

    def full(self, prompt: str) -> float:
        text, claim = self.parts(prompt)
        return min(1.0, 0.2 * text.split().count(claim.split()[0]))


def test_issup_consistency_by_hand_with_one_subset() -> None:
    lm = IsSupFake()
    scorer = IsSupConsistencyScorer(lm, n_subsets=4, subset_size=5, seed=0)
    samples = ["[No Retrieval]Ann sings. Ann dances.[Utility:5]", "Ann sings. Bob runs."]
    assert sentence_pool(samples) == ["Ann sings.", "Ann dances.", "Ann sings.", "Bob runs."]
    assert without_own("Ann sings.", ("Ann sings.", "Bob runs.", "Ann sings.")) == ("Bob runs.", "Ann sings.")
    got = scorer.score(["Ann sings.", "Bob runs.", "Cat flies."], question="Who is Ann?", entity="Ann", samples=samples)
    # Ann sings.: evidence "Ann dances. Ann sings. Bob runs." (its own sentence once less): 2 x Ann
    assert got == pytest.approx([0.4, 0.0, 0.0])
    assert len(lm.calls) == 1 and len(lm.calls[0]) == 3  # one batched call
    head = "### Instruction:\nWho is Ann?\n\n### Response:\n[Retrieval]<paragraph>Ann\n"
    assert all(p.startswith(head) for p in lm.calls[0])
    assert head + "Ann dances. Ann sings. Bob runs.</paragraph>[Relevant]Ann sings." in lm.calls[0]
    # cached: the same call asks nothing new
    assert scorer.score(["Ann sings."], question="Who is Ann?", entity="Ann", samples=samples) == pytest.approx([0.4])
    assert len(lm.calls) == 1 and scorer.cache_hits == 1
    # nothing to be consistent with: the fallback
    assert scorer.score(["Ann sings."], question="Who is Ann?", samples=[]) == [0.5]
    assert scorer.score(["Ann sings."], question="Who is Ann?", samples=["Ann sings."]) == [0.5]
    assert scorer.fallbacks == 2 and scorer.score([], question="q", samples=samples) == []


def test_issup_consistency_averages_seeded_subsets() -> None:
    samples = ["Ann sings. Ann paints. Bob runs. Ann reads.", "Cy swims. Ann writes. Bob cooks. Di flies."]
    lm = IsSupFake()
    scorer = IsSupConsistencyScorer(lm, n_subsets=4, subset_size=3, seed=1)
    got = scorer.score(["Ann z.", "Bob z."], question="Who is Ann?", entity="Ann", samples=samples)
    prompts = lm.calls[0]
    assert len(lm.calls) == 1
    for claim, value in zip(["Ann z.", "Bob z."], got):
        mine = [p for p in prompts if p.endswith(claim)]
        evidences = {IsSupFake.parts(p)[0] for p in mine}
        assert 2 <= len(mine) <= 4 and len(evidences) == len(mine)  # distinct subsets, cached repeats merged
        assert all(len(e.split(". ")) == 3 for e in evidences)
        subsets = scorer.subsets(sentence_pool(samples))
        want = sum(min(1.0, 0.2 * " ".join(s).split().count(claim.split()[0])) for s in subsets) / len(subsets)
        assert value == pytest.approx(want)
    # seeded: the same seed draws the same subsets, another seed others
    pool = sentence_pool(samples)
    assert scorer.subsets(pool) == IsSupConsistencyScorer(IsSupFake(), 4, 3, seed=1).subsets(pool)
    assert scorer.subsets(pool) != IsSupConsistencyScorer(IsSupFake(), 4, 3, seed=2).subsets(pool)
    # a claim never judged against its own sentence
    scorer2 = IsSupConsistencyScorer(lm2 := IsSupFake(), 4, 3, seed=1)
    scorer2.score(["Cy swims."], question="q", entity="Ann", samples=samples)
    assert all("Cy swims." not in IsSupFake.parts(p)[0] for p in lm2.calls[0])
    assert len(sentence_pool(samples)) == 8


# -- the real bundled model ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bundled_lm(bundled_gguf):
    from langchain_selfrag.lm.llamacpp import LlamaCppReflectionLM

    lm = LlamaCppReflectionLM(bundled_gguf, n_threads=1, n_ctx=2048)
    yield lm
    lm.close()


def test_bundled_model_one_question(bundled_lm) -> None:
    start = time.perf_counter()
    scorer = IsSupConsistencyScorer(bundled_lm, n_subsets=2, subset_size=3)
    cfg = ResearchConfig(iterations=1, samples=2, temperature=1.0, top_p=0.9, seed=0)
    research_run = ResearchRun(ReflectionLMPolicy(bundled_lm, max_new_tokens=60), SentenceSplitter(), scorer, cfg)
    rec = research_run.record(Question("x", "Who is Billy Conigliaro?", "Billy Conigliaro"))
    samples = rec["samples"]
    assert len(samples) == 3 and samples[-1]["abstain"]
    assert samples[-1]["completion"].startswith(T.NO_RETRIEVAL + "I am sorry")
    assert samples[-1]["completion"][-len("[Utility:5]"):] in T.UTILITY
    assert samples[0]["text"] != samples[1]["text"]
    for s in samples[:-1]:
        assert s["completion"].startswith(T.NO_RETRIEVAL) and s["text"] and T.NO_RETRIEVAL not in s["text"]
        assert s["claims"] and all(0.0 <= c["p"] <= 1.0 for c in s["claims"])
        assert s["expected_utility"] == pytest.approx(sum(2 * c["p"] - 1 for c in s["claims"]))
    assert scorer.calls > 0 and scorer.fallbacks == 0
    print(f"bundled model, one question, K=1 J=2: {time.perf_counter() - start:.1f}s")


def test_cli_scorer_passages_scores_claims_against_the_questions_passages(tmp_path: Path, capsys) -> None:
    """--scorer passages: IsSup against each question's own passages, not the other samples."""
    from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment

    (tmp_path / "q.txt").write_text("Who is Ann Smith?\nWho is Bob Jones?\n")
    (tmp_path / "p.txt").write_text("Ann // Ann Smith is a painter.\nBob // Bob Jones was a priest.\n")
    class PassageJudge(FakeReflectionLM):
        """IsSup full when the evidence says "painter", else none."""

        def candidate_probs(self, prompts, candidates):
            if T.FULLY_SUPPORTED not in candidates:
                return super().candidate_probs(prompts, candidates)
            return [FakeSegment(issup="full" if "painter" in (self.evidence_of(p.rsplit(T.RELEVANT, 1)[0]) or "")
                                else "none").issup_probs() for p in prompts]

    fake = PassageJudge(no_retrieval=FakeSegment("Ann Smith is a painter.", isrel=None))
    out = tmp_path / "r.jsonl"
    base = ["--entities", str(tmp_path / "q.txt"), "--out", str(out), "-K", "1", "-J", "2", "--quiet"]
    assert cli_main([*base, "--scorer", "passages"], lm=fake) == 2  # no passages given
    assert "needs passages" in capsys.readouterr().err
    assert cli_main([*base, "--passages", str(tmp_path / "p.txt"), "--scorer", "passages"], lm=fake) == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    p_of = {r["entity"]: r["samples"][0]["claims"][0]["p"] for r in records}
    assert p_of["Ann Smith"] > 0.8 and p_of["Bob Jones"] < 0.2  # the same claim, judged by each question's passages
