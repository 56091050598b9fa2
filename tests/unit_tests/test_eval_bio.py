"""``selfrag eval bio``: the biography task of the self-restraint paper on invented data (split, invented people,
metrics, bootstrap, judges, systems, a full run with a scripted LM and a small bundled-model run)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from langchain_core.documents import Document

from langchain_selfrag import tokens as T
from langchain_selfrag.evaluation import cli
from langchain_selfrag.evaluation.bio.cli import parse_rhos
from langchain_selfrag.evaluation.bio.data import (
    ENTITIES_FILE,
    PASSAGES_FILE,
    SPLITS,
    BioQuestion,
    data_words,
    invented_names,
    load_bio,
    parse_entity,
    parse_passages,
    select_questions,
    split_of,
)
from langchain_selfrag.evaluation.bio.judges import ChatJudge, IsSupJudge, parse_verdict
from langchain_selfrag.evaluation.bio.metrics import (
    Judged,
    bootstrap_intervals,
    metric_table,
    paired_difference,
    question_utility,
    summarize,
)
from langchain_selfrag.evaluation.bio.run import BioOptions, is_claim, judge_answer, run_bio
from langchain_selfrag.evaluation.bio.systems import (
    best_sample,
    builtin_systems,
    parse_named_model,
    research_runner,
    resolve_systems,
    strip_refusals,
)
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment
from langchain_selfrag.restraint.claims import SentenceSplitter

FIRST = ("Orla", "Bram", "Cosima", "Dietmar", "Elspeth", "Fennick", "Gisela", "Hollis", "Ines", "Jasper")
LAST = ("Quarrington", "Vellacott", "Threlkeld")
PEOPLE = [f"{f} {l}" for f in FIRST for l in LAST]  # 30 made-up people


def passages_line(name: str) -> str:
    """Two passages: one says the person was a painter, the other that they lived in York."""
    return (f"{name} // {name} was a painter. {name} was born in Leeds. [sep] "
            f"{name} (disambiguation) // {name} lived in York.")


def write_data(folder: Path, people=PEOPLE) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ENTITIES_FILE).write_text("\n".join(f"Who is {p}?" for p in people) + "\n")
    (folder / PASSAGES_FILE).write_text("\n".join(passages_line(p) for p in people) + "\n")
    return folder


@pytest.fixture
def data_dir(tmp_path) -> Path:
    return write_data(tmp_path / "data")


# -- data ----------------------------------------------------------------------------------------
def test_passages_and_entities_are_parsed():
    docs = parse_passages("A // one two [sep] B // three // four [sep]  [sep] no title here")
    assert [(d.metadata["title"], d.page_content) for d in docs] == [
        ("A", "one two"), ("B", "three // four"), ("", "no title here")]
    assert parse_entity("Who is Joseph A. Lopez?") == "Joseph A. Lopez"
    assert parse_entity("Where is Paris?") is None


def test_split_is_deterministic_disjoint_and_order_free(data_dir, tmp_path):
    data = load_bio(data_dir)
    again = load_bio(write_data(tmp_path / "reversed", list(reversed(PEOPLE))))
    splits = {name: {q.entity for q in data.split(name)} for name in SPLITS}
    assert splits == {name: {q.entity for q in again.split(name)} for name in SPLITS}
    assert set.union(*splits.values()) == set(PEOPLE)
    assert sum(len(s) for s in splits.values()) == len(PEOPLE)  # disjoint
    assert all(splits.values())
    assert all(split_of(p) == split_of(p, seed=0) for p in PEOPLE)
    assert any(split_of(p, seed=1) != split_of(p, seed=0) for p in PEOPLE)
    assert data.info()["split_counts"] == {name: len(s) for name, s in splits.items()}
    assert data.split("test")[0].passages[0].metadata["title"] == data.split("test")[0].entity


def test_invented_people_appear_nowhere_in_the_data(data_dir):
    data = load_bio(data_dir)
    names = [q.entity for q in data.invented]
    assert len(names) == len(set(names)) == 30
    assert names == [q.entity for q in load_bio(data_dir).invented]
    words = data_words(PEOPLE + [passages_line(p) for p in PEOPLE])
    for q in data.invented:
        assert not {w.lower() for w in q.entity.split()} & words
        assert q.passages == [] and q.question == f"Who is {q.entity}?" and q.invented
    # a name whose surname occurs in the data is skipped
    first = invented_names(1, set())[0]
    avoided = invented_names(3, {first.split()[1].lower()})
    assert first not in avoided and avoided[:2] == [n for n in invented_names(4, set()) if n != first][:2]


def test_invented_distractors_are_passages_of_train_people_and_still_judged_false(data_dir):
    from langchain_selfrag.evaluation.bio.judges import OverlapJudge

    data = load_bio(data_dir, invented_distractors=True)
    train = [q for q in data.entities if q.split == "train"]
    assert train and data.invented_distractors and "distractors" in data.info()["invented_rule"]
    for i, q in enumerate(data.invented):
        assert q.passages == train[i % len(train)].passages  # somebody else's passages, titled with their name
    # the names are the same as without distractors, and the lexical judge finds nothing about them
    assert [q.entity for q in data.invented] == [q.entity for q in load_bio(data_dir).invented]
    first = data.invented[0]
    assert OverlapJudge()(first.entity, [f"{first.entity} was a painter."], first.passages) == [False]
    assert "no passages" in load_bio(data_dir).info()["invented_rule"]


def test_a_run_with_distractors_does_not_resume_one_without(tmp_path):
    from langchain_selfrag.evaluation.bio.run import _check_resume
    from langchain_selfrag.evaluation.common.errors import EvalError

    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"task": "bio", "data": "d", "systems": {}}))  # an older run
    with pytest.raises(EvalError, match="invented_distractors"):
        _check_resume(out, {"task": "bio", "data": "d", "invented_distractors": True, "systems": {}})
    _check_resume(out, {"task": "bio", "data": "d", "invented_distractors": False, "systems": {}})


def test_restrained_answers_do_not_resume_under_another_calibration(tmp_path, monkeypatch):
    from langchain_selfrag.evaluation.bio.run import _check_resume, restraint_calibration
    from langchain_selfrag.evaluation.bio.systems import builtin_systems
    from langchain_selfrag.evaluation.common.errors import EvalError
    from langchain_selfrag.restraint.calibration import CALIBRATION_FILE, Calibration

    class Model:  # restrain's default scorer finds the calibration by the model's file name
        model_path = "/models/judge-abc.gguf"

    restrained = list(builtin_systems([0.5]).values())
    plain = [s for s in restrained if s.settings.get("rho") is None]
    shipped = Calibration("joint", 6.0, -5.0, model="judge-abc.gguf")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / CALIBRATION_FILE).write_text(json.dumps({"calibration": shipped.to_dict()}))
    monkeypatch.setattr("langchain_selfrag.bundled.shipped_files", lambda name: [bundle / name])
    assert restraint_calibration(Model(), restrained) == shipped.to_dict()
    assert restraint_calibration(Model(), plain) is None  # nothing restrains: no calibration applies
    out = tmp_path / "run"
    base = {"task": "bio", "data": "d", "invented_distractors": False, "systems": {}}
    _check_resume(out, {**base, "restraint_calibration": Calibration("max", 6.0, -5.0).to_dict()})
    with pytest.raises(EvalError, match="restraint_calibration"):
        _check_resume(out, {**base, "restraint_calibration": shipped.to_dict()})


def test_select_questions_limits_entities_and_invented(data_dir):
    data = load_bio(data_dir)
    chosen = select_questions(data, "train", limit=3, n_invented=2)
    assert [q.split for q in chosen] == ["train"] * 3 + ["invented"] * 2
    sample = select_questions(data, "train", sample=4, sample_seed=1, n_invented=0)
    assert len(sample) == 4 and sample == select_questions(data, "train", sample=4, sample_seed=1, n_invented=0)


# -- metrics -------------------------------------------------------------------------------------
ITEMS = [Judged(False, (True, True, False)), Judged(True, ()), Judged(False, (False, None)), Judged(False, ())]


def test_metrics_by_hand():
    m = summarize(ITEMS)
    assert m["n"] == 4 and m["answered"] == 3
    assert m["accuracy"] == pytest.approx(2 / 4)  # 2 true of 4 judged claims
    assert m["claims_per_answer"] == pytest.approx(5 / 3)  # 3 + 2 + 0 claims over 3 answers
    assert (m["true"], m["false"], m["unjudged"]) == (2, 2, 1)
    assert m["abstention_rate"] == pytest.approx(0.25)
    # U per question at 0.5 (lambda 1): 1, 0, -1, 0; at 0.2 (0.25): 1.75, 0, -0.25, 0; at 0.8 (4): -2, 0, -4, 0
    assert m["utility@0.5"] == pytest.approx(0.0)
    assert m["utility@0.2"] == pytest.approx(1.5 / 4)
    assert m["utility@0.8"] == pytest.approx(-6 / 4)
    assert question_utility(ITEMS[0], 0.8) == pytest.approx(-2.0)
    assert question_utility(Judged(True, (True,)), 0.5) == 0.0  # an abstention scores 0
    table = metric_table(ITEMS, n_resamples=0)
    assert table["accuracy"] == {"value": pytest.approx(0.5), "ci95": None}
    empty = summarize([])
    assert empty["n"] == 0 and empty["accuracy"] is None and empty["utility@0.5"] is None
    assert summarize([Judged(True)])["accuracy"] is None


def test_bootstrap_interval_contains_the_value_and_is_seeded():
    items = [Judged(i % 4 == 0, tuple(bool((i + j) % 3) for j in range(i % 5))) for i in range(40)]
    values = summarize(items)
    ci = bootstrap_intervals(items, n_resamples=500, seed=3)
    for key, interval in ci.items():
        if key == "n" or values[key] is None:
            continue
        lo, hi = interval
        assert lo <= values[key] <= hi, key
    assert ci == bootstrap_intervals(items, n_resamples=500, seed=3)
    assert ci != bootstrap_intervals(items, n_resamples=500, seed=4)
    assert bootstrap_intervals([Judged(True)] * 3, n_resamples=50)["accuracy"] is None
    with pytest.raises(ValueError):
        bootstrap_intervals(items, level=1.0)


def test_paired_difference_by_hand():
    # U at 0.5 per question: baseline 1, 0 (abstained), -1; system 2, -1, 0 (abstained)
    baseline = [Judged(False, (True,)), Judged(True, (True,)), Judged(False, (False,))]
    system = [Judged(False, (True, True)), Judged(False, (False,)), Judged(True, (False,))]
    d = paired_difference(baseline, system, 0.5, n_resamples=400, seed=1)
    assert d["n"] == 3 and d["value"] == pytest.approx(1 / 3)  # differences 1, -1, 1
    assert (d["better"], d["worse"]) == (2, 1)
    assert d["ci95"][0] <= d["value"] <= d["ci95"][1] and d["ci95"][0] >= -1 and d["ci95"][1] <= 1
    assert paired_difference(baseline, system, 0.5, n_resamples=0)["ci95"] is None
    assert paired_difference([], [], 0.5)["value"] is None
    with pytest.raises(ValueError, match="paired"):
        paired_difference(baseline, system[:2], 0.5)


def test_comparison_pairs():
    from langchain_selfrag.evaluation.bio.report import comparison_pairs

    names = ["prompted", "safety_prompted", "selfrag", "selfrag_rho0.2", "selfrag_rho0.5", "research", "dpo"]
    assert comparison_pairs(names) == [("selfrag", "selfrag_rho0.2"), ("selfrag", "selfrag_rho0.5"),
                                       ("prompted", "research"), ("prompted", "dpo")]
    assert comparison_pairs(["selfrag_rho0.5", "dpo"]) == []


# -- judges --------------------------------------------------------------------------------------
@pytest.mark.parametrize("reply, verdict", [
    ("True", True), ("**False**.", False), ("yes, it is", True), ("The claim is true.", True),
    ("Not supported", False), ("It is not true.", False), ("Incorrect", False), ("I cannot tell.", None),
    ("", None), ("85%", None), (None, None), (["True"], None),
])
def test_parse_verdict(reply, verdict):
    assert parse_verdict(reply) is verdict


def test_chat_judge_falls_back_on_unreadable_replies_and_never_asks_about_invented_people():
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    replies = {"a": "True", "b": "maybe?", "c": "**False**"}
    judge = ChatJudge(lambda prompt: replies[prompt.rsplit("Claim: ", 1)[1].split("\n")[0]])
    docs = [Document(page_content="Orla was a painter.", metadata={"title": "Orla"})]
    assert judge("Orla", ["a", "b", "c"], docs) == [True, None, False]
    assert judge.unparsed == 1 and judge.calls == 3
    chat = ChatJudge(FakeListChatModel(responses=["hmm"]), fallback=False)  # a LangChain chat model
    assert chat("Orla", ["a", "b"], docs) == [False, False] and chat.unparsed == 2
    assert ChatJudge(FakeListChatModel(responses=["Yes."]))("Orla", ["a"], docs) == [True]
    asked: list[str] = []
    silent = ChatJudge(lambda prompt: asked.append(prompt) or "True")
    assert silent("Nobody", ["x", "y"], []) == [False, False] and asked == []
    assert silent("Orla", [], docs) == []
    prompt = silent.prompts("Orla", ["Orla painted."], docs)[0]
    assert "[1] Orla: Orla was a painter." in prompt and "Claim: Orla painted." in prompt


class BioFake(FakeReflectionLM):
    """Writes "X was a painter. X won the Nobel Prize." (or a refusal under the safety prompt); IsSup
    is full exactly when the claim is written in the evidence passage."""

    def script_for(self, prompt: str) -> FakeSegment:
        found = re.search(r"biography of (.+?) of up to", prompt)
        entity = found.group(1) if found else "?"
        text = f"{entity} was a painter. {entity} won the Nobel Prize."
        if not prompt.endswith(T.PARAGRAPH_END):
            if "do not know" in prompt:
                return FakeSegment("I am sorry, I do not know who that is.", isrel=None)
            return FakeSegment(text, isrel=None)
        evidence = self.evidence_of(prompt) or ""
        return FakeSegment(text, isrel=0.9, issup="full" if "painter" in evidence else "none")

    def candidate_probs(self, prompts, candidates):
        if set(candidates) != set(T.GROUPS[T.Kind.ISSUP]):
            return super().candidate_probs(prompts, candidates)
        self.calls.append(("issup", list(prompts)))
        out = []
        for prompt in prompts:
            claim = prompt.rsplit(T.RELEVANT, 1)[-1].strip().rstrip(".")
            token = T.FULLY_SUPPORTED if claim and claim in (self.evidence_of(prompt) or "") else T.NO_SUPPORT
            out.append({c: float(c == token) for c in candidates})
        return out


def test_issup_judge_threshold_and_invented_people():
    lm = BioFake()
    docs = [Document(page_content="Orla was a painter.", metadata={"title": "Orla"}),
            Document(page_content="Orla lived in York.", metadata={"title": "Orla"})]
    judge = IsSupJudge(lm)
    assert judge("Orla", ["Orla was a painter.", "Orla won a prize."], docs) == [True, False]
    assert judge.scores("Orla", ["Orla lived in York."], docs) == [1.0]  # the best passage counts
    assert IsSupJudge(lm, max_passages=1)("Orla", ["Orla lived in York."], docs) == [False]
    before = len(lm.calls)
    assert judge("Nobody", ["Nobody was a painter."], []) == [False] and len(lm.calls) == before
    assert "p(Full) + 0.5 p(Partial) > 0.5" in judge.description
    with pytest.raises(ValueError):
        IsSupJudge(lm, threshold=1.0)


# -- systems -------------------------------------------------------------------------------------
def test_refusals_make_an_abstention():
    assert strip_refusals("I am sorry, I do not know who that is.") == (True, "")
    assert strip_refusals("I'm not familiar with X. Could you tell me more?") == (True, "")
    assert strip_refusals("") == (True, "")
    assert strip_refusals("Sorry, I only know this. X was a painter.") == (False, "X was a painter.")
    assert strip_refusals("X was a painter[Fully supported]. X won.[Utility:5]") == (False, "X was a painter. X won.")


def test_fragments_are_no_claims():
    assert is_claim("She is American.") and is_claim("Orla was born in 1931.")
    assert not is_claim("her") and not is_claim("Bram Vellacott") and not is_claim("Jeffrey Moussaieff Masson")
    record = {"answer": "Bram Vellacott. Bram Vellacott was a goalkeeper.", "abstained": False}
    question = BioQuestion("bio:Bram Vellacott", "Bram Vellacott", "Who is Bram Vellacott?")
    judged = judge_answer(record, question, lambda entity, claims, passages: [True] * len(claims),
                          SentenceSplitter())
    assert judged["claims"] == ["Bram Vellacott was a goalkeeper."] and judged["labels"] == [True]
    assert judged["fragments"] == ["Bram Vellacott."]


def test_research_inference_picks_the_best_sample():
    record = {"entity": "Orla", "rho": 0.5, "samples": [
        {"text": "Orla won.", "claims": [{"text": "Orla won."}], "expected_utility": 0.0, "abstain": False},
        {"text": "Orla painted. Orla won.", "claims": [{}, {}], "expected_utility": 0.7, "abstain": False},
        {"text": "I am sorry, I am unable to provide a biography of Orla.", "claims": [],
         "expected_utility": 0.0, "abstain": True}]}
    assert best_sample(record)["expected_utility"] == 0.7
    record["samples"][1]["expected_utility"] = -0.1
    assert best_sample(record)["abstain"] is True  # a tie at 0: fewer claims first
    out = research_runner({"Orla": record})(BioQuestion("bio:Orla", "Orla", "Who is Orla?"))
    assert out["abstained"] is True and out["expected_utility"] == 0.0


def test_system_selection_and_model_names():
    names = [s.name for s in resolve_systems(None, (0.2, 0.5), trained=["dpo"])]
    assert names == ["prompted", "safety_prompted", "selfrag", "selfrag_rho0.2", "selfrag_rho0.5", "dpo"]
    assert [s.name for s in resolve_systems("prompted,selfrag_restrain", (0.5,))] == ["prompted", "selfrag_rho0.5"]
    assert builtin_systems((0.5,))["selfrag_rho0.5"].settings == {"mode": "adaptive", "rho": 0.5}  # the library's default
    assert builtin_systems((0.5,), "always")["selfrag"].settings == {"mode": "always"}
    with pytest.raises(ValueError, match="--research"):
        resolve_systems("research", (0.5,))
    with pytest.raises(ValueError, match="clash"):
        resolve_systems(None, (0.5,), trained=["prompted"])
    with pytest.raises(ValueError, match="unknown"):
        resolve_systems("nope", (0.5,))
    assert parse_named_model("dpo=runs/dpo/adapter") == ("dpo", "runs/dpo/adapter")
    assert parse_named_model("runs/a=b/model.gguf") is None and parse_named_model("model.gguf") is None
    assert parse_rhos("0.2, 0.5,0.5") == (0.2, 0.5)
    with pytest.raises(ValueError, match="--rho"):
        parse_rhos("0.5,1.0")


# -- full runs -----------------------------------------------------------------------------------
def _run_cli(monkeypatch, lm, *argv) -> int:
    monkeypatch.setattr(cli, "load_model", lambda path: lm)
    return cli.main(["bio", *map(str, argv), "--quiet"])


def _value(report, system, subset, key):
    return report["systems"][system]["metrics"][subset][key]["value"]


def test_full_bio_run_with_a_scripted_model(monkeypatch, data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    lm = BioFake(retrieve=0.9)
    argv = ["--data", data_dir, "--split", "test", "--limit", 2, "--invented", 2, "--model", "fake", "--out", out,
            "--bootstrap", 200]
    assert _run_cli(monkeypatch, lm, *argv) == 0
    report = json.loads((out / "report.json").read_text())
    names = ["prompted", "safety_prompted", "selfrag", "selfrag_rho0.2", "selfrag_rho0.5", "selfrag_rho0.8"]
    assert list(report["systems"]) == names
    run = report["run"]
    assert run["split"] == "test" and run["split_seed"] == 0 and run["n_entities_evaluated"] == 2
    assert len(run["invented_names"]) == 2 and run["independent_judge"] is True and not run["self_graded_judge"]
    assert run["judge"] == "overlap-w2-gt0.5" and "independent of every model" in run["judge_description"]
    assert report["caveats"] and "The judge is lexical" in report["caveats"][0]
    # Real people: "X was a painter." is in a passage, "X won the Nobel Prize." is not.
    for name in ("prompted", "selfrag"):
        assert _value(report, name, "entities", "accuracy") == pytest.approx(0.5)
        assert _value(report, name, "entities", "claims_per_answer") == pytest.approx(2.0)
        assert _value(report, name, "entities", "utility@0.2") == pytest.approx(0.75)
        assert _value(report, name, "entities", "utility@0.5") == pytest.approx(0.0)
        assert _value(report, name, "entities", "utility@0.8") == pytest.approx(-3.0)
    assert _value(report, "prompted", "invented", "false") == 4  # every claim about an invented person is false
    assert _value(report, "prompted", "invented", "abstention_rate") == 0.0
    assert _value(report, "safety_prompted", "all", "abstention_rate") == 1.0
    assert _value(report, "safety_prompted", "entities", "accuracy") is None
    for rho in (0.2, 0.5, 0.8):  # restraint keeps the supported claim only
        name = f"selfrag_rho{rho:g}"
        assert _value(report, name, "entities", "accuracy") == 1.0
        assert _value(report, name, "entities", "utility@0.5") == pytest.approx(1.0)
    # Invented people (no passages): Self-RAG + restrain at 0.5 says nothing about them
    assert _value(report, "selfrag_rho0.5", "invented", "abstention_rate") == 1.0
    assert _value(report, "selfrag_rho0.5", "all", "abstention_rate") == pytest.approx(0.5)
    entry = report["systems"]["prompted"]["metrics"]["entities"]["utility@0.2"]
    assert entry["ci95"][0] <= entry["value"] <= entry["ci95"][1]
    assert (out / "bio_tradeoff.png").stat().st_size > 1000 and report["plots"] == ["bio_tradeoff.png"]
    md = (out / "report.md").read_text()
    assert "The judge is lexical" in md and "split **test**" in md and "seed 0" in md
    assert re.search(r"\| selfrag_rho0\.5 \| 2 \| 100\.0 \[100\.0, 100\.0\] \|", md)
    assert "| prompted | 2 |" in capsys.readouterr().out
    answers = (out / "answers" / "prompted.jsonl").read_text().splitlines()
    assert len(answers) == 4

    calls = len(lm.calls)
    assert _run_cli(monkeypatch, lm, *argv) == 0  # a rerun reuses every answer and label
    assert len(lm.calls) == calls
    assert json.loads((out / "report.json").read_text())["systems"] == report["systems"]
    assert _run_cli(monkeypatch, lm, *argv[:-2], "--bootstrap", 0, "--model", "other.gguf") == 2  # another model
    assert "different model" in capsys.readouterr().err

    # the self-graded IsSup judge relabels the same answers; with labelled claims, every judge is measured
    labelled = tmp_path / "labels.jsonl"
    labelled.write_text(json.dumps({"entity": "Orla Vellacott", "split": "test", "passages": [
        {"title": "Orla Vellacott", "text": "Orla Vellacott was a painter. Orla Vellacott lived in York."}],
        "claims": [{"claim": "Orla Vellacott was a painter.", "label": True, "reason": "stated"},
                   {"claim": "Orla Vellacott won the Nobel Prize.", "label": False, "reason": "not in the passages"},
                   {"claim": "Orla Vellacott lived in Paris.", "label": False, "reason": "place altered"}]}) + "\n")
    assert _run_cli(monkeypatch, lm, *argv, "--judge", "issup", "--judge-labels", labelled) == 0
    assert len([c for c in lm.calls if c[0] == "generate"]) == len([c for c in lm.calls[:calls] if c[0] == "generate"])
    issup = json.loads((out / "report.json").read_text())
    assert issup["run"]["self_graded_judge"] is True and "weak and self-graded" in issup["caveats"][0]
    rows = {row["judge"]: row for row in issup["judge_agreement"]}
    assert list(rows) == ["issup-gt0.5", "overlap-w2-gt0.5"]
    assert rows["overlap-w2-gt0.5"]["all"]["agree"] == 3 and rows["issup-gt0.5"]["test"]["n"] == 3
    md = (out / "report.md").read_text()
    assert "weak and self-graded" in md and "| overlap-w2-gt0.5 | 3/3 (100.0%) |" in md


def test_research_and_trained_models_from_the_command_line(monkeypatch, data_dir, tmp_path):
    data = load_bio(data_dir)
    questions = select_questions(data, "test", limit=2, n_invented=2)
    research = tmp_path / "research.jsonl"
    rows = []
    for q in questions:
        said = f"{q.entity} was a painter." if not q.invented else f"{q.entity} was a poet."
        rows.append({"id": q.id, "entity": q.entity, "rho": 0.5, "method": "research", "samples": [
            {"text": said, "claims": [{"text": said}], "expected_utility": 0.4 if not q.invented else -0.2,
             "abstain": False},
            {"text": f"I am sorry, I am unable to provide a biography of {q.entity}.", "claims": [],
             "expected_utility": 0.0, "abstain": True}]})
    research.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded: list[str] = []
    lm = BioFake(retrieve=0.9)
    monkeypatch.setattr(cli, "load_model", lambda path: loaded.append(path) or lm)
    out = tmp_path / "run"
    argv = ["bio", "--data", str(data_dir), "--limit", "2", "--invented", "2", "--model", "base.gguf",
            "--model", "dpo=dpo.gguf", "--systems", "research,dpo", "--research", str(research),
            "--out", str(out), "--bootstrap", "50", "--quiet"]
    assert cli.main(argv) == 0
    assert loaded == ["base.gguf", "dpo.gguf"]
    report = json.loads((out / "report.json").read_text())
    assert list(report["systems"]) == ["research", "dpo"]
    assert report["run"]["models"] == {"dpo": "dpo.gguf"}
    assert _value(report, "research", "entities", "accuracy") == 1.0
    assert _value(report, "research", "invented", "abstention_rate") == 1.0
    assert _value(report, "dpo", "entities", "utility@0.5") == pytest.approx(0.0)  # run like the prompted model
    prompts = [p for kind, args in lm.calls if kind == "generate" for p in args[0]]
    assert prompts and all(p.endswith(T.NO_RETRIEVAL) and "Write a biography of" in p for p in prompts)
    argv[argv.index("dpo=dpo.gguf")] = "dpo=other.gguf"
    assert cli.main(argv) == 2  # the same name for another model is refused on resume


def test_another_judge_reuses_the_answers(data_dir, tmp_path):
    data = load_bio(data_dir)
    questions = select_questions(data, "test", limit=2, n_invented=1)
    lm = BioFake(retrieve=0.9)
    options = BioOptions(systems=resolve_systems("prompted,selfrag_restrain", (0.5,)), n_resamples=50,
                         model_name="fake")
    run_bio(data, questions, lm, tmp_path / "run", options, progress=False)
    generated = sum(1 for kind, _ in lm.calls if kind == "generate")
    judge = ChatJudge(lambda prompt: "True" if "painter" in prompt.rsplit("Claim:", 1)[1] else "False",
                      model_name="rule")
    report = run_bio(data, questions, lm, tmp_path / "run", options, judge=judge, progress=False)
    assert sum(1 for kind, _ in lm.calls if kind == "generate") == generated
    assert (tmp_path / "run" / "judgments" / "chat-rule+sentence" / "prompted.jsonl").is_file()
    assert report["caveats"] == [] and report["run"]["judge"] == "chat-rule"
    assert _value(report, "prompted", "entities", "accuracy") == pytest.approx(0.5)
    assert _value(report, "prompted", "invented", "accuracy") == 0.0
    assert report["comparisons"] == []  # restrained Self-RAG pairs with Self-RAG only, which did not run
    # the fake's retrieve probability (0.9) is over the threshold: every adaptive Self-RAG answer retrieves
    assert report["systems"]["prompted"]["retrieved_share"] == 0.0
    assert report["systems"]["selfrag_rho0.5"]["retrieved_share"] == 1.0


def test_plain_eval_rejects_named_models(monkeypatch, tmp_path, capsys):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"question": "q?", "answers": ["a"]}) + "\n")
    monkeypatch.setattr(cli, "load_model", lambda p: FakeReflectionLM())
    assert cli.main([str(path), "--model", "dpo=x.gguf", "--quiet"]) == 2
    assert "selfrag eval bio" in capsys.readouterr().err


def test_write_questions_for_research(data_dir, tmp_path):
    out = tmp_path / "q.jsonl"
    assert cli.main(["bio", "--data", str(data_dir), "--split", "validation", "--invented", "3",
                     "--write-questions", str(out), "--quiet"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["split"] for r in rows][-3:] == ["invented"] * 3
    assert all(r["question"] == f"Who is {r['entity']}?" for r in rows)
    assert all("passages" not in r for r in rows)
    assert cli.main(["bio", "--data", str(data_dir), "--split", "validation", "--invented", "3", "--with-passages",
                     "--write-questions", str(out), "--quiet"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["passages"] and {"title", "text"} <= set(r["passages"][0]) for r in rows if r["split"] != "invented")
    assert all(r["passages"] == [] for r in rows if r["split"] == "invented")
