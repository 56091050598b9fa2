"""Training on ReSearch data ("LLMs can learn self-restraint through iterative self-reflection"): best-sample SFT
records, DPO pairs, RLOO rewards, and real SFT / DPO / RLOO runs on a tiny random model (a few steps each; adapters
saved and reloaded)."""

from __future__ import annotations

import json
import math

import pytest

from langchain_selfrag.restraint.claims import SentenceSplitter
from langchain_selfrag.restraint.utility import expected_utility
from training.restraint import pairs as RP
from training.restraint.reward import RecordClaimScorer, UtilityReward, evidence_of

RHO = 0.5


# -- hand-made records ---------------------------------------------------------------------------
def sample(eu: float, n_claims: int = 1, completion: str | None = None, *, abstain: bool = False) -> dict:
    claims = [{"text": f"claim {i}", "p": 0.5, "kept": False} for i in range(n_claims)]
    return {"iteration": 0, "prompt_kind": "write", "completion": completion or f"answer eu={eu} n={n_claims}",
            "text": completion or f"answer eu={eu} n={n_claims}", "claims": claims, "expected_utility": eu,
            "abstain": abstain}


def abstention(text: str = "I am sorry, I do not know who this is.") -> dict:
    return {"iteration": -1, "completion": text, "text": text, "claims": [], "expected_utility": 0.0, "abstain": True}


PROMPT = "### Instruction:\nWho is X?\n\n### Response:\n"


def record(samples: list[dict], rid: str = "q1", prompt: str = PROMPT) -> dict:
    return {"id": rid, "question": "Who is X?", "entity": "X", "rho": RHO, "method": "research", "prompt": prompt,
            "samples": samples}


def scored(text: str, probs: dict[str, float], *, it: int = 0) -> dict:
    """A sample whose claims are its sentences, scored by ``probs``, E[U] at RHO."""
    claims = [{"text": c, "p": p, "kept": p > RHO} for c, p in probs.items()]
    return {"iteration": it, "prompt_kind": "write", "completion": text, "text": text, "claims": claims,
            "expected_utility": expected_utility(list(probs.values()), RHO), "abstain": False}


# -- best sample / SFT records -------------------------------------------------------------------
def test_best_sample_prefers_fewer_claims_at_equal_utility():
    rec = record([sample(1.5, 3, "three claims"), sample(1.5, 2, "two claims"), abstention(), sample(-1.0, 4)])
    assert [s["completion"] for s in RP.rank_samples(rec)][:3] == ["two claims", "three claims",
                                                                   "I am sorry, I do not know who this is."]
    sft = RP.sft_record(rec)
    assert sft["output"] == "two claims" and sft["prompt"] == rec["prompt"] and sft["expected_utility"] == 1.5
    assert sft["abstain"] is False and sft["id"] == "q1"


def test_abstention_is_best_when_every_answer_loses_and_wins_ties_at_zero():
    rec = record([sample(-0.5, 1, "bad"), sample(-2.0, 3, "worse"), abstention("I don't know.")])
    assert RP.sft_record(rec)["output"] == "I don't know." and RP.sft_record(rec)["abstain"] is True
    tie = record([sample(0.0, 2, "worth nothing"), abstention("I don't know.")])
    assert RP.best_sample(tie)["abstain"] is True  # 0 claims beat 2 claims at E[U] = 0


def test_sft_prompt_is_used_verbatim_by_the_sft_encoder():
    from training.core.records import record_prompt

    rec = record([sample(1.0)], prompt="CUSTOM PROMPT >>> ")
    assert record_prompt(RP.sft_record(rec)) == "CUSTOM PROMPT >>> "
    assert record_prompt({"instruction": "Hi", "output": "x"}) == "### Instruction:\nHi\n\n### Response:\n"


def test_rho_override_recomputes_utilities_from_claims():
    a = scored("A.", {"A1": 0.9, "A2": 0.6})  # rho .5: 0.8 + 0.2 = 1.0; rho .8 (lambda 4): 0.5 - 1.0 = -0.5
    b = scored("B.", {"B1": 0.95})  # rho .5: 0.9; rho .8: 0.95 - 0.2 = 0.75
    rec = record([a, b, abstention()])
    assert RP.sample_utility(a) == pytest.approx(1.0) and RP.sample_utility(a, 0.8) == pytest.approx(-0.5)
    assert RP.best_sample(rec)["completion"] == "A."
    assert RP.best_sample(rec, rho=0.8)["completion"] == "B."
    assert RP.rank_samples(rec, rho=0.8)[-1]["completion"] == "A."  # below the abstention at 0


def search_record(samples: list[dict]) -> dict:
    return record(samples) | {"method": "search"}


def test_search_baseline_ranks_by_average_accuracy_and_declines_below_half():
    many = scored("many.", {"m1": 0.9, "m2": 0.9, "m3": 0.6, "m4": 0.6})  # accuracy 0.75, E[U] at .5: 2.0
    sure = scored("sure.", {"s1": 0.95})  # accuracy 0.95, E[U] 0.9
    weak = scored("weak.", {"w1": 0.6, "w2": 0.3})  # accuracy 0.45, E[U] -0.2
    rec = record([many, sure, weak, abstention()])
    assert RP.best_sample(rec)["completion"] == "many."  # ReSearch: max E[U]
    search = search_record([many, sure, weak, abstention()])
    assert [s["completion"] for s in RP.rank_samples(search)] == [
        "sure.", "many.", abstention()["completion"], "weak."]  # 0.95 > 0.75 > decline (0.5) > 0.45
    assert RP.sample_score(search, weak) == pytest.approx(0.45)
    assert RP.sample_score(search, abstention()) == 0.5 and RP.sample_score(rec, weak) == pytest.approx(-0.2)
    # the expected accuracy of the best answer is below 0.5: the search baseline declines ...
    low = search_record([weak, scored("low.", {"l1": 0.4}), abstention()])
    assert RP.sft_record(low)["abstain"] is True
    # ... but an answer at exactly 0.5 is not below it, so it is kept
    half = search_record([scored("half.", {"h1": 0.7, "h2": 0.3}), abstention()])
    assert RP.best_sample(half)["completion"] == "half."
    pairs = RP.dpo_pairs(search)
    assert [(p["chosen"], p["rejected"]) for p in pairs] == [
        ("sure.", "weak."), ("sure.", abstention()["completion"]), ("many.", "weak."),
        ("many.", abstention()["completion"])]
    assert pairs[0]["chosen_score"] == pytest.approx(0.95) and pairs[0]["rejected_score"] == pytest.approx(0.45)
    assert RP.selection_rule([search]).startswith("max average claim probability; declines")
    assert RP.selection_rule([rec, search]).count("|") == 1
    with pytest.raises(ValueError, match="method"):
        RP.rank_samples(record([sure]) | {"method": "beam"})


# -- DPO pairs ---------------------------------------------------------------------------------------
def test_dpo_pairs_are_two_best_by_two_worst():
    rec = record([sample(u, 1, f"s{u}") for u in (0.5, 3.0, -1.0, 2.0, -4.0, 1.0)])
    pairs = RP.dpo_pairs(rec)
    assert [(p["chosen"], p["rejected"]) for p in pairs] == [
        ("s3.0", "s-4.0"), ("s3.0", "s-1.0"), ("s2.0", "s-4.0"), ("s2.0", "s-1.0")]
    assert all(p["prompt"] == rec["prompt"] and p["chosen_utility"] > p["rejected_utility"] for p in pairs)


def test_dpo_pairs_with_fewer_than_four_samples():
    three = record([sample(0.0, 1, "zero"), sample(2.0, 1, "two"), sample(1.0, 1, "one")])
    assert [(p["chosen"], p["rejected"]) for p in RP.dpo_pairs(three)] == [
        ("two", "zero"), ("two", "one"), ("one", "zero")]
    two = record([sample(1.0, 1, "good"), abstention()])
    assert [(p["chosen"], p["rejected"]) for p in RP.dpo_pairs(two)] == [("good", abstention()["completion"])]
    assert RP.dpo_pairs(record([sample(1.0)])) == []


def test_dpo_pairs_skip_equal_utilities_and_identical_texts():
    flat = record([sample(0.0, 1, "a"), sample(0.0, 2, "b"), abstention(), sample(0.0, 3, "c")])
    assert RP.dpo_pairs(flat) == []
    same_text = record([sample(2.0, 1, "dup"), sample(1.0, 1, "dup"), sample(-1.0, 1, "low")])
    assert [(p["chosen"], p["rejected"]) for p in RP.dpo_pairs(same_text)] == [("dup", "low")]
    data = RP.dpo_dataset([flat, record([sample(1.0, 1, "x"), sample(-1.0, 1, "y")], rid="q2")])
    assert [(p["id"], p["chosen"]) for p in data] == [("q2", "x")]


def test_read_research_checks_records(tmp_path):
    good = record([sample(1.0), abstention()])
    path = tmp_path / "r.jsonl"
    nan = dict(good, samples=[dict(sample(1.0), expected_utility=float("nan"))])
    path.write_text(json.dumps(good) + "\n" + json.dumps(nan))
    with pytest.raises(RP.ResearchDataError, match=r"r.jsonl:2: sample 0 has no finite"):
        RP.read_research(path)
    assert len(RP.read_research(path, limit=1)) == 1
    for bad, msg in [({"samples": []}, "prompt"), (dict(good, samples=[]), "samples"),
                     (dict(good, samples=[{"expected_utility": 1}]), "completion")]:
        with pytest.raises(RP.ResearchDataError, match=msg):
            RP.check_record(bad)
    assert RP.rloo_prompts([good]) == [{"prompt": good["prompt"], "record_id": "q1"}]


# -- rewards -----------------------------------------------------------------------------------------
class DictScorer:
    """p from a table (0.5 otherwise); records every call."""

    def __init__(self, table: dict[str, float]):
        self.table, self.calls = table, []

    def score(self, claims, *, question, entity=None, evidence=(), samples=()):
        self.calls.append({"claims": list(claims), "question": question, "entity": entity,
                           "titles": [d.metadata["title"] for d in evidence], "samples": list(samples)})
        return [self.table.get(c, 0.5) for c in claims]


def reward_record() -> dict:
    painter = scored("[No Retrieval]X was a painter.[Utility:5]", {"X was a painter.": 0.9})
    painter["expected_utility"] = 1.234  # a stored value the offline lookup must return as is
    rec = record([painter, scored("X was a king.", {"X was a king.": 0.1}), abstention("I am sorry, I cannot say.")])
    rec["passages"] = [{"title": "X", "text": "X painted."}, {"title": "X (family)", "text": "Kin of X."}]
    return rec


def test_utility_reward_is_expected_utility_under_the_frozen_evaluator():
    rec = reward_record()
    scorer = DictScorer({"X was a painter.": 0.9, "X was born in 1900.": 0.2})
    reward = UtilityReward([rec], SentenceSplitter(), scorer)
    two = "[No Retrieval]X was a painter. X was born in 1900.[Utility:5]"
    assert reward([""], [two], record_id=["q1"]) == [pytest.approx(0.8 - 0.6)]  # (2p - 1) summed at rho 0.5
    call = scorer.calls[-1]
    assert call["claims"] == ["X was a painter.", "X was born in 1900."] and call["question"] == "Who is X?"
    assert call["titles"] == ["X", "X (family)"] and call["entity"] == "X" and len(call["samples"]) == 2
    evidence = "[Retrieval]<paragraph>X\nX was a king.</paragraph>[Relevant]X was a painter.[Fully supported]"
    assert reward.reward("q1", evidence) == pytest.approx(0.8)  # the evidence span is no claim of the answer
    for refusal in ("", "I am sorry, I cannot say.", "I'm sorry, I don't know anything about X."):
        assert reward.reward("q1", refusal) == 0.0
    strict = UtilityReward([rec], SentenceSplitter(), scorer, rho=0.8)  # lambda = 4
    assert strict.reward("q1", two) == pytest.approx((0.9 - 0.4) + (0.2 - 3.2))
    n_calls = len(scorer.calls)
    assert reward.reward("q1", two) == pytest.approx(0.2) and len(scorer.calls) == n_calls  # cached


def test_offline_reward_looks_completions_and_claims_up_in_the_data():
    rec = reward_record()
    offline = UtilityReward([rec], SentenceSplitter(), RecordClaimScorer([rec]), offline=True)
    assert offline.reward("q1", "[No Retrieval]X was a painter.[Utility:5]") == 1.234  # the stored sample
    assert offline.reward("q1", "x was   a KING.") == pytest.approx(0.1 - 0.9)  # matched after normalising
    # an unseen claim gets the mean p of the question's claims ((0.9 + 0.1) / 2 -> E[U] 0)
    assert offline.reward("q1", "X was a king. X had a dog.") == pytest.approx(-0.8 + 0.0)
    fallback = DictScorer({"X had a dog.": 1.0})
    scorer = RecordClaimScorer([rec], fallback=fallback)
    assert scorer.score(["X was a painter.", "X had a dog."], question="Who is X?") == [0.9, 1.0]
    assert fallback.calls[0]["claims"] == ["X had a dog."] and (scorer.hits, scorer.misses) == (1, 1)
    assert RecordClaimScorer([rec], default_p=0.25).score(["new"], question="Who is X?") == [0.25]
    assert RecordClaimScorer([rec]).score(["new"], question="Who is nobody?") == [0.5]


def test_offline_reward_counts_hits_misses_and_fallbacks_and_warns(tmp_path):
    from training.restraint.reward import MISS_RATE_WARN, record_reward_counts

    rec = reward_record()
    reward = UtilityReward([rec], SentenceSplitter(), RecordClaimScorer([rec], default_p=0.25), offline=True)
    reward.reward("q1", "[No Retrieval]X was a painter.[Utility:5]")  # a stored sample: no claim lookup
    reward.reward("q1", "X was a king. X had a dog. X had a cat.")  # 1 hit, 2 misses
    reward.reward("q1", "I am sorry, I cannot say.")  # the record's abstention: a stored sample too
    reward.reward("q1", "I'm sorry, I don't know anything about X.")  # a refusal not in the data
    counts = reward.counts()
    assert counts == {"completions": 4, "matched_samples": 2, "abstained": 1, "scored": 1, "claim_hits": 1,
                      "claim_misses": 2, "claim_fallback_scored": 0, "claim_defaulted": 2,
                      "claim_miss_rate": pytest.approx(2 / 3)}
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "selfrag_training.json").write_text(json.dumps({"method": "rloo"}))
    assert MISS_RATE_WARN == 0.5
    with pytest.warns(UserWarning, match="67% of the sampled claims are not in the ReSearch data"):
        record_reward_counts(reward, adapter)
    meta = json.loads((adapter / "selfrag_training.json").read_text())
    assert meta["method"] == "rloo" and meta["reward_counts"]["claim_misses"] == 2
    assert meta["reward_counts"]["miss_rate_warning"] is True and meta["reward_counts"]["miss_rate_warn_above"] == 0.5
    fallback = DictScorer({})
    online_misses = RecordClaimScorer([rec], fallback=fallback)
    online_misses.score(["X was a painter.", "new one"], question="Who is X?")
    assert (online_misses.hits, online_misses.misses, online_misses.fallback_scored, online_misses.defaulted) == (
        1, 1, 1, 0)
    quiet = UtilityReward([rec], SentenceSplitter(), DictScorer({}))  # online: no claim lookup, no warning
    quiet.reward("q1", "X was a painter.")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        counts = record_reward_counts(quiet, tmp_path / "nowhere")
    assert counts["scored"] == 1 and "claim_miss_rate" not in counts and counts["miss_rate_warning"] is False


def test_a_passage_evaluator_refuses_records_without_passages(tiny_model_dir):
    from langchain_selfrag.fakes import FakeReflectionLM
    from langchain_selfrag.restraint.consistency import IsSupConsistencyScorer
    from langchain_selfrag.restraint.scoring import IsSupScorer
    from training.core.config import TrainingError
    from training.restraint.reward import check_evidence, default_evaluator

    bare = record([scored("X was a king.", {"X was a king.": 0.7}),
                   scored("X was a king. X ruled Spain.", {"X was a king.": 0.7, "X ruled Spain.": 0.4})], rid="q2")
    with_passages = reward_record()
    lm = FakeReflectionLM()
    check_evidence([with_passages], IsSupScorer(lm))
    check_evidence([with_passages, bare], IsSupConsistencyScorer(lm))  # needs only the samples
    check_evidence([bare], RecordClaimScorer([bare]))  # offline without an evaluator: no passages needed
    for scorer in (IsSupScorer(lm), RecordClaimScorer([bare], fallback=IsSupScorer(lm))):
        with pytest.raises(TrainingError, match=r"1 of 2 records have no passages \('q2'\).*--evaluator consistency"):
            check_evidence([with_passages, bare], scorer)
    with pytest.raises(TrainingError, match="no passages"):
        default_evaluator([bare], str(tiny_model_dir), offline=False)
    # the online variant for such data: self-consistency with the record's samples, on the completion itself
    splitter, scorer = default_evaluator([bare], str(tiny_model_dir), offline=False, evaluator="consistency")
    assert isinstance(scorer, IsSupConsistencyScorer)
    reward = UtilityReward([bare], splitter, scorer)
    value = reward.reward("q2", "X was a king. X was born in 1900.")
    assert math.isfinite(value) and -2.0 <= value <= 2.0 and scorer.calls == 2 and scorer.fallbacks == 0
    assert reward.counts() == {"completions": 1, "matched_samples": 0, "abstained": 0, "scored": 1,
                               "evaluator_fallbacks": 0}


def test_default_evaluator_scores_claims_with_the_frozen_reflection_model(tiny_model_dir):
    from langchain_selfrag.restraint.scoring import IsSupScorer
    from training.core.config import TrainingError
    from training.restraint.reward import default_evaluator

    rec = reward_record()
    splitter, scorer = default_evaluator([rec], str(tiny_model_dir), offline=False)
    assert isinstance(scorer, IsSupScorer)
    probs = scorer.score(["X was born in 1900."], question="Who is X?", evidence=evidence_of(rec)[:1])
    assert len(probs) == 1 and 0.0 <= probs[0] <= 1.0
    reward = UtilityReward([rec], splitter, scorer)
    value = reward.reward("q1", "X was born in 1900.")
    assert math.isfinite(value) and -1.0 <= value <= 1.0 and scorer.calls >= 2
    _, offline = default_evaluator([rec], str(tiny_model_dir), offline=True, unknown_p=0.3)
    assert isinstance(offline, RecordClaimScorer) and isinstance(offline.fallback, IsSupScorer)
    with pytest.raises(TrainingError, match="evaluator-model"):
        default_evaluator([rec], None, offline=False)


def test_is_abstention():
    assert RP.is_abstention("") and RP.is_abstention("[No Retrieval][Utility:1]")
    assert RP.is_abstention("Je ne sais pas.", known=["je ne sais  pas."])
    assert RP.is_abstention("I cannot answer this reliably from the available sources.")
    assert not RP.is_abstention("I'm sorry to say X died in 1900. X was a painter.")
    assert not RP.is_abstention("X was a painter.")


def test_table17_defaults_and_scaled_flags(tmp_path):
    from training import dpo, research_sft, rloo
    from training.core.args import parse

    need = ["--data", "d.jsonl", "--base-model", "m", "--output-dir", "o"]
    a = parse(dpo.build_parser(), need)
    assert (a.max_steps, a.lr, a.batch_size * a.grad_accum, a.beta, a.train_file) == (400, 1e-6, 64, 0.25, "d.jsonl")
    a = parse(rloo.build_parser(), need)
    assert (a.max_steps, a.lr, a.batch_size * a.grad_accum, a.beta) == (600, 1e-6, 512, 0.1)
    a = parse(research_sft.build_parser(), need)
    assert (a.max_steps, a.lr, a.batch_size * a.grad_accum) == (2000, 5e-6, 16)
    scaled = ["--max-steps", "5", "--batch-size", "2", "--grad-accum", "1", "--beta", "0.1"]
    a = parse(dpo.build_parser(), [*need, *scaled])
    assert (a.max_steps, a.batch_size * a.grad_accum, a.beta) == (5, 2, 0.1)


# -- real training on a tiny random model --------------------------------------------------------------
torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")


def training_records(n: int = 4) -> list[dict]:
    """ReSearch-like records with reflection tokens, an evidence span and an abstention."""
    out = []
    for i in range(n):
        name = f"Person {i}"
        prompt = f"### Instruction:\nWho is {name}?\n\n### Response:\n"
        good = scored(f"[No Retrieval]{name} was a painter.[Utility:5]", {f"{name} was a painter.": 0.9})
        born = f"{name} was a painter born in 190{i}."
        mixed = scored(f"[Retrieval]<paragraph>{name}\nA painter.</paragraph>[Relevant]{born}"
                       "[Partially supported][Utility:4]", {born: 0.6}, it=1)
        bad = scored(f"[No Retrieval]{name} was a king of Spain and a pilot.[Utility:5]",
                     {f"{name} was a king of Spain and a pilot.": 0.05})
        worse = scored(f"[No Retrieval]{name} won {i + 3} wars. {name} flew.[Utility:5]",
                       {f"{name} won {i + 3} wars.": 0.1, f"{name} flew.": 0.2})
        stop = abstention(f"[No Retrieval]I am sorry, I do not know {name}.[Utility:1]")
        rec = record([good, mixed, bad, worse, stop], rid=f"p{i}", prompt=prompt)
        rec.update(question=f"Who is {name}?", entity=name, passages=[{"title": name, "text": f"{name} painted."}])
        out.append(rec)
    return out


def write_research(path, records) -> str:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    from tiny_models import plain_tiny_model  # tied embeddings, no reflection tokens: like SmolLM2

    return plain_tiny_model(tmp_path_factory.mktemp("research_base"))


def logits_of(model, ids):
    model.eval()
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def probe_ids(base_dir):
    from training.core.adapters import prepare_model

    _, tok, ids = prepare_model(base_dir)
    text = "### Instruction:\nWho is Person 1?\n\n### Response:\n[No Retrieval]Person 1 was a painter.[Utility:5]"
    enc = tok(text)["input_ids"]
    assert ids["[Utility:5]"] in enc
    return torch.tensor([enc])


def assert_reloads(base_dir, adapter_dir, trained, *, changed: bool = True):
    """The saved adapter on a fresh base gives the in-memory model's logits (and not the base's)."""
    from peft import PeftModel

    from training.core.adapters import load_trained, prepare_model

    ids = probe_ids(base_dir)
    reloaded = PeftModel.from_pretrained(prepare_model(base_dir)[0], str(adapter_dir))
    expected = logits_of(trained, ids)
    assert torch.allclose(logits_of(reloaded, ids), expected, atol=1e-5)
    merged, _, meta = load_trained(adapter_dir)
    assert torch.allclose(logits_of(merged, ids), expected, atol=1e-4)
    if changed:
        assert (logits_of(prepare_model(base_dir)[0], ids) - expected).abs().max() > 1e-4
    return meta


class KeepModel:
    """A trainer callback that keeps the model it trained."""

    def __new__(cls):
        from transformers import TrainerCallback

        class _Keep(TrainerCallback):
            model = None

            def on_train_end(self, args, state, control, model=None, **kwargs):
                from accelerate.utils import extract_model_from_parallel

                self.model = extract_model_from_parallel(model, keep_fp32_wrapper=False)  # no bf16 autocast

        return _Keep()


def test_research_sft_trains_on_best_samples(base_dir, tmp_path):
    from training.core.adapters import prepare_model
    from training.core.args import config_from_args, parse
    from training.core.records import encode_record
    from training.research_sft import build_parser
    from training.trainers.sft import train_research_sft

    records = training_records()
    data = write_research(tmp_path / "research.jsonl", records)
    out = tmp_path / "sft"
    args = parse(build_parser(), ["--data", data, "--base-model", str(base_dir), "--output-dir", str(out),
                                  "--max-steps", "3", "--batch-size", "4", "--grad-accum", "1", "--lr", "5e-3",
                                  "--token-lr", "5e-2", "--threads", "1", "--logging-steps", "1",
                                  "--save-steps", "100"])
    keep = KeepModel()
    result = train_research_sft(config_from_args(args), args.rho, callbacks=[keep])
    rows = [json.loads(line) for line in (out / "research_sft_train.jsonl").read_text().splitlines()]
    assert [r["output"] for r in rows] == [r["samples"][0]["completion"] for r in records]  # E[U] 0.8 is best
    assert [r["prompt"] for r in rows] == [r["prompt"] for r in records]
    _, tok, _ = prepare_model(base_dir)
    enc = encode_record(tok, rows[0])
    n_prompt = len(tok(records[0]["prompt"])["input_ids"])
    assert enc["input_ids"][:n_prompt] == tok(records[0]["prompt"])["input_ids"]
    assert enc["completion_mask"][:n_prompt] == [0] * n_prompt and enc["completion_mask"][n_prompt] == 1
    assert result.steps == 3 and math.isfinite(result.train_loss)
    history = json.loads((out / "loss_history.json").read_text())["train"]
    assert len(history) == 3 and all(math.isfinite(loss) for _, loss in history)
    meta = assert_reloads(base_dir, result.adapter_dir, keep.model)
    assert meta["config"]["method"] == "research_sft" and meta["config"]["research_data"] == data
    assert meta["config"]["questions"] == 4


def test_dpo_trains_lora_on_pairs_and_masks_evidence(base_dir, tmp_path):
    from training.core.adapters import prepare_model
    from training.core.collate import preference_collator
    from training.core.config import ResearchRunConfig
    from training.trainers.dpo import train_dpo

    _, tok, ids = prepare_model(base_dir)
    collate = preference_collator(tok, ids, 512)
    prompt = tok("Q:")["input_ids"]
    chosen = tok("<paragraph>ev</paragraph>ok", add_special_tokens=False)["input_ids"]
    rejected = tok("no", add_special_tokens=False)["input_ids"]
    batch = collate([{"prompt_ids": prompt, "chosen_ids": chosen, "rejected_ids": rejected}])
    kept = [t for t, m in zip(batch["input_ids"][0].tolist(), batch["completion_mask"][0].tolist()) if m]
    assert tok.decode(kept) == "ok"  # the evidence span is not trained

    data = write_research(tmp_path / "research.jsonl", training_records())
    cfg = ResearchRunConfig(str(base_dir), data, str(tmp_path / "dpo"), max_steps=3, batch_size=4, grad_accum=1,
                            learning_rate=5e-3, token_learning_rate=5e-2, threads=1, logging_steps=1, max_length=256,
                            eval_file=data, save_steps=2)
    result = train_dpo(cfg)
    assert result.examples == 16 and result.steps == 3  # 4 questions x 4 pairs
    losses = [h["loss"] for h in result.log_history if "loss" in h]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    evals = [(h["step"], h["eval_loss"]) for h in result.log_history if "eval_loss" in h]
    assert evals[0][0] == 2 and all(math.isfinite(v) for _, v in evals)
    assert (tmp_path / "dpo" / "loss_curve.png").stat().st_size > 1000
    meta = assert_reloads(base_dir, result.adapter_dir, result.model)
    assert meta["method"] == "dpo" and meta["questions"] == 4 and meta["eval_pairs"] == 16
    assert meta["config"]["beta"] == 0.25
    # the reflection-token rows (read by TRL's fused LM head through PEFT's wrapper) were trained too
    from training.core.adapters import load_trained

    rows = sorted(ids.values())
    trained = load_trained(result.adapter_dir)[0].get_input_embeddings().weight[rows]
    assert (trained - prepare_model(base_dir)[0].get_input_embeddings().weight[rows]).abs().max() > 1e-3


def test_dpo_continues_an_adapter_against_itself_as_reference(base_dir, tmp_path):
    from tiny_models import random_adapter

    from training.core.config import ResearchRunConfig
    from training.trainers.dpo import train_dpo

    init, _ = random_adapter(base_dir, tmp_path / "init")
    data = write_research(tmp_path / "research.jsonl", training_records(2))
    cfg = ResearchRunConfig(str(base_dir), data, str(tmp_path / "dpo2"), max_steps=2, batch_size=4, grad_accum=1,
                            learning_rate=0.0, token_learning_rate=0.0, threads=1, logging_steps=1, max_length=256,
                            init_adapter=str(tmp_path / "init"), bf16="false")
    result = train_dpo(cfg)
    losses = [h["loss"] for h in result.log_history if "loss" in h]
    # policy == reference (the token rows included) -> every log-ratio is 0 and the loss is log 2
    assert losses and all(v == pytest.approx(math.log(2), abs=1e-4) for v in losses)
    assert "ref" in result.model.peft_config and not (result.adapter_dir / "ref").exists()  # only the policy is saved
    assert_reloads(base_dir, result.adapter_dir, init, changed=True)


class WordSplitter:
    def split(self, text, *, entity=None):
        return text.split()[:8]


class LetterScorer:
    """p = share of ASCII letters in the claim: deterministic, and different across random completions."""

    def __init__(self):
        self.calls = []

    def score(self, claims, *, question, entity=None, evidence=(), samples=()):
        self.calls.append((question, tuple(d.metadata["title"] for d in evidence)))
        return [sum(ch.isascii() and ch.isalpha() for ch in c) / len(c) for c in claims]


def test_rloo_trains_on_the_expected_utility_of_sampled_answers(base_dir, tmp_path):
    from training.core.config import ResearchRunConfig
    from training.trainers.rloo import train_rloo

    data = write_research(tmp_path / "research.jsonl", training_records(2))
    cfg = ResearchRunConfig(str(base_dir), data, str(tmp_path / "rloo"), max_steps=2, batch_size=4, grad_accum=1,
                            learning_rate=1e-2, token_learning_rate=5e-2, threads=1, logging_steps=1, beta=0.1,
                            max_length=256)
    scorer = LetterScorer()
    result = train_rloo(cfg, splitter=WordSplitter(), scorer=scorer, num_generations=2, max_completion_length=12)
    assert result.steps == 2 and math.isfinite(result.train_loss)
    assert {q for q, _ in scorer.calls} <= {"Who is Person 0?", "Who is Person 1?"} and scorer.calls
    assert {t for _, t in scorer.calls} <= {("Person 0",), ("Person 1",)}
    logs = [h for h in result.log_history if "reward" in h]
    assert logs and all(math.isfinite(h["reward"]) for h in logs)
    assert any(h["reward_std"] > 0 for h in logs)  # the reward is not a constant
    assert json.loads((tmp_path / "rloo" / "reward_history.json").read_text())
    meta = assert_reloads(base_dir, result.adapter_dir, result.model)
    assert meta["method"] == "rloo" and meta["evaluator"] == {"splitter": "WordSplitter", "scorer": "LetterScorer"}
    counts = meta["reward_counts"]
    assert counts["scored"] > 0 and counts["completions"] >= counts["scored"] and counts["miss_rate_warning"] is False


def test_rloo_command_line_offline(base_dir, tmp_path):
    from training.rloo import main

    data = write_research(tmp_path / "research.jsonl", training_records(2))
    common = ["--data", data, "--base-model", str(base_dir), "--threads", "1", "--max-steps", "1", "--batch-size", "2",
              "--grad-accum", "1", "--num-generations", "2", "--max-completion-length", "8", "--lr", "1e-3"]
    with pytest.raises(SystemExit) as exit_info:  # online rewards need a judge
        main([*common, "--output-dir", str(tmp_path / "x")])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:  # a judge that does not exist
        main([*common, "--output-dir", str(tmp_path / "x"), "--evaluator-model", str(tmp_path / "missing.gguf")])
    assert exit_info.value.code == 2
    assert main([*common, "--output-dir", str(tmp_path / "off"), "--offline", "--unknown-p", "0.3"]) == 0
    meta = json.loads((tmp_path / "off" / "adapter" / "selfrag_training.json").read_text())
    assert meta["offline"] is True and meta["steps"] == 1 and meta["evaluator"]["scorer"] == "RecordClaimScorer"
    counts = meta["reward_counts"]
    looked = counts["claim_hits"] + counts["claim_misses"]
    assert counts["claim_defaulted"] == counts["claim_misses"] and counts["claim_fallback_scored"] == 0
    assert counts["claim_miss_rate"] == (pytest.approx(counts["claim_misses"] / looked) if looked else None)
