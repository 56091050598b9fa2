"""The bundled model's card and versions.json are made by code from a build's artefacts."""

from __future__ import annotations

import json

import pytest

from cookbook.selfrag_smollm2.card.figures import CHAIN, LEGACY, acceptance
from cookbook.selfrag_smollm2.card.render import render
from cookbook.selfrag_smollm2.card.versions import VERSIONS_SCHEMA, add_build, load_versions, upsert, version_row


def write(folder, name, data):
    (folder / name).write_text(json.dumps(data))


def chain_eval(match=0.6, share=0.02, isrel=0.93, issup=0.8, top1=0.5, base=0.56, ci=(0.88, 0.96)) -> dict:
    return {
        "schema": "selfrag-smollm2-eval/chain-1", "seed": 0, "heldout_articles": ["A", "B"],
        "model": {"file": "selfrag-smollm2-135m-abc.gguf", "sha256": "f" * 64}, "config": {"mode": "adaptive", "k": 5},
        "chain": {"n": 50, "matched": int(match * 50), "match": match, "abstained": 1, "empty": 0,
                  "abstained_or_empty": 1, "abstained_or_empty_share": share, "abstain_reasons": {"the model produced no answer text": 1},
                  "errors": {}, "retrieved_share": 1.0,
                  "isrel": {"auc": isrel, "auc_ci95": list(ci), "positives": 40, "negatives": 160},
                  "issup": {"agreement": issup, "n": 60, "per_label": {"[Fully supported]": {"n": 30, "agreement": 0.9}}}},
        "match": {"n": 50, "selfrag": match, "no_retrieval": 0.1, "selfrag_top1": top1, "base_with_top1_passage": base,
                  "base_closed_book": 0.05},
        "probes": {"retrieve": {"auc": 0.99}, "isrel_forced_gold": {"auc": 0.88}, "issup_forced": {"agreement": 0.55}},
        "seconds": 900.0,
        "examples": [{"question": "Who?", "gold": "X", "selfrag": "X", "no_retrieval": "Y", "selfrag_top1": "X"}],
    }


LEGACY_EVAL = {"model": "/tmp/run/selfrag-smollm2-135m.q8_0.gguf", "heldout_articles": ["A", "B"],
               "retrieve": {"auc": 0.998}, "isrel": {"auc": 0.866}, "issup": {"agreement": 0.52},
               "match": {"n": 100, "selfrag": 0.47, "no_retrieval": 0.04, "base_with_top1_passage": 0.43}, "seconds": 274.5}


def build_folder(folder, ev, steps=(400, 500)):
    write(folder, "eval.json", ev)
    write(folder, "generator_phase1_training.json", {"steps": steps[0], "seconds": 1800, "config": {"batch_size": 8}})
    write(folder, "selfrag_training.json", {"steps": steps[1], "seconds": 600, "seconds_total": 1200, "config": {"batch_size": 8}})
    write(folder, "split.json", {"seed": 0, "heldout_articles": ["A", "B"], "train_articles": ["C"]})
    return folder


def test_acceptance_bars_are_judged_from_the_chain_figures():
    status = {b["key"] + (":" + b["bar"] if "+" in b["bar"] else ""): b["met"] for b in acceptance(chain_eval())}
    assert status == {"abstained_or_empty_share": True, "match": True, "match_subset:≥ 0.56 + 0.05": False,
                      "match_subset:≥ 0.50 + 0.05": True, "isrel_auc": True, "issup_agreement": True}
    worse = {b["key"]: b["met"] for b in acceptance(chain_eval(match=0.5, share=0.04, isrel=0.89, issup=0.7))}
    assert worse == {"abstained_or_empty_share": False, "match": False, "match_subset": False, "isrel_auc": False,
                     "issup_agreement": False}
    # The separate loop's numbers never judge a bar.
    assert {b["met"] for b in acceptance(LEGACY_EVAL)} == {None}


def test_version_row_is_made_from_the_artefacts(tmp_path):
    build_folder(tmp_path, chain_eval())
    row = version_row("v3", tmp_path)
    assert row["schema"] == VERSIONS_SCHEMA and row["build"] == "v3"
    assert row["generator_steps"] == [400, 500] and row["generator_minutes"] == 50.0  # resumed runs summed
    f = row["figures"]
    assert f["evaluation"] == CHAIN and f["match"] == 0.6 and f["isrel_auc"] == 0.93 and f["top1_match"] == 0.5
    assert f["probe_isrel_auc"] == 0.88 and f["model_file"] == "selfrag-smollm2-135m-abc.gguf"
    assert set(row["sources"]) == {"eval.json", "generator_phase1_training.json", "selfrag_training.json", "split.json"}
    write(tmp_path, "eval.json", LEGACY_EVAL)
    legacy = version_row("v2", tmp_path)["figures"]
    assert legacy["evaluation"] == LEGACY and legacy["match"] == 0.47 and legacy["isrel_auc"] is None
    assert legacy["probe_isrel_auc"] == 0.866 and legacy["model_file"] == "selfrag-smollm2-135m.q8_0.gguf"
    with pytest.raises(FileNotFoundError):
        version_row("v0", tmp_path / "missing")


def test_versions_keep_only_code_made_rows_and_replace_a_build_by_name(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    build_folder(old, LEGACY_EVAL, steps=(300, 200))
    folder = tmp_path / "new"
    folder.mkdir()
    build_folder(folder, chain_eval())
    write(folder, "versions.json", {"versions": [{"build": "first (session 1)", "training": "typed", "eval": {}}]})
    assert add_build(folder, "v2", old) == ["first (session 1)"]
    assert add_build(folder, "v3") == []
    rows, dropped = load_versions(folder)
    assert [r["build"] for r in rows] == ["v2", "v3"] and dropped == []
    assert rows[0]["generator_steps"] == [300, 200]
    assert [r["build"] for r in upsert(rows, {**rows[0], "generator_steps": [1]})] == ["v2", "v3"]
    assert upsert(rows, {**rows[0], "generator_steps": [1]})[0]["generator_steps"] == [1]


def test_card_shows_the_chain_figures_bars_and_builds(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    build_folder(old, LEGACY_EVAL)
    folder = tmp_path / "new"
    folder.mkdir()
    build_folder(folder, chain_eval(isrel=0.91, ci=(0.87, 0.95), base=0.56))
    add_build(folder, "v2", old)
    add_build(folder, "v3")
    card = render(folder)
    assert "Build **v3**." in card
    assert "| IsRel ROC AUC (chain trace) | 0.910 | ≥ 0.90 | met |" in card
    assert "| abstained or empty answers on answerable questions | 2.0% | ≤ 3% | met |" in card
    assert "(untrained SmolLM2, top passage) | 0.600 | ≥ 0.56 + 0.05 | **missed** |" in card
    assert "| v2 | separate loop (pre-chain), bm25, n=100 | 400 + 500 steps, 50 min | 0.470 | n/a |" in card
    assert "| v3 (this build) | SelfRAGChain, bm25, n=50 |" in card
    assert "* 1 × the model produced no answer text" in card
    assert "reaches below 0.90" in card and "top passage): 0.600, bar ≥ 0.56 + 0.05." in card
    assert "not checked here" in card  # no adapter in the fixture folder to build a GGUF from
    assert "| top-1, this model |" in card
    assert "Self-RAG − this" not in card  # no paired differences in this report

    paired = {"selfrag_vs_top1": {"n": 50, "value": 0.04, "ci95": [-0.02, 0.1], "better": 5, "worse": 3}}
    write(folder, "eval.json", chain_eval() | {"match": chain_eval()["match"] | {"paired": paired}})
    card = render(folder)
    assert "top-1 passage) | 0.500; Self-RAG − this +0.040 (95% CI -0.020 to +0.100), better on 5, worse on 3 |" in card
    assert "Every answerable question" not in card

    full = chain_eval(match=0.52, top1=0.5) | {"chain": chain_eval(match=0.52)["chain"] | {"n": 600, "matched": 312}}
    write(folder, "eval_full.json", full)
    card = render(folder)
    assert "### Every answerable question of the held-out articles" in card and "on all 600 answerable" in card
    assert "| answer match, Self-RAG | 0.520 (312 / 600) |" in card
    assert "* On all 600 held-out questions (eval_full.json): Self-RAG answer match: 0.520, bar ≥ 0.55." in card
    (folder / "eval_full.json").unlink()

    write(folder, "eval.json", LEGACY_EVAL)  # the very eval.json v2's row was made from
    card = render(folder)
    assert "separate Self-RAG loop" in card and "| IsRel ROC AUC (chain trace) | n/a | ≥ 0.90 | not measured |" in card
    assert "| v2 (this build) |" in card and "Build **v2**." in card
    write(folder, "eval.json", LEGACY_EVAL | {"seconds": 1.0})
    assert "(this build)" not in render(folder)  # no row was made from this eval.json


def test_card_names_the_retriever_and_warns_when_builds_differ_in_it(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    build_folder(old, chain_eval())  # a report from before --retrieval: BM25
    folder = tmp_path / "new"
    folder.mkdir()
    build_folder(folder, chain_eval() | {"retrieval": "hybrid"})
    add_build(folder, "v4", old)
    add_build(folder, "v4-hybrid")
    card = render(folder)
    assert "with hybrid retrieval (BM25 and the Chroma/MiniLM store of `selfrag index`" in card
    assert "| v4 | SelfRAGChain, bm25, n=50 |" in card and "| v4-hybrid (this build) | SelfRAGChain, hybrid, n=50 |" in card
    assert "measured with different retrievers" in card
    # the full held-out section shows plain RAG top-1 when the report has it, and says so when not
    write(folder, "eval_full.json", chain_eval(base=0.4) | {"retrieval": "hybrid"})
    card = render(folder)
    assert "untrained-SmolLM2 runs left out" not in card
    assert card.count("| … untrained SmolLM2 with the top passage (plain RAG top-1) | 0.400 |") == 1
    no_base = chain_eval() | {"match": {k: v for k, v in chain_eval()["match"].items() if k != "base_with_top1_passage"}}
    write(folder, "eval_full.json", no_base)
    assert "untrained-SmolLM2 runs left out" in render(folder)


def test_package_refuses_an_evaluation_of_another_file(tmp_path):
    from cookbook.selfrag_smollm2.package import evaluated_file

    write(tmp_path, "eval.json", chain_eval())
    assert evaluated_file(tmp_path) == "selfrag-smollm2-135m-abc.gguf"
    write(tmp_path, "eval.json", LEGACY_EVAL)
    assert evaluated_file(tmp_path) is None
    write(tmp_path, "eval_full.json", chain_eval())
    assert evaluated_file(tmp_path, "eval_full.json") == "selfrag-smollm2-135m-abc.gguf"


def test_package_ships_the_packed_adapter_and_the_measurements(tmp_path):
    from cookbook.selfrag_smollm2.package import PACKED, ship

    run, staging, folder = tmp_path / "run", tmp_path / "run" / "bundle", tmp_path / "model"
    for sub in ("bundle", "data", "generator/adapter", "generator2"):
        (run / sub).mkdir(parents=True)
    for name in PACKED:
        (staging / name).write_text(f"packed {name}")
    for path in ("eval.json", "eval_full.json", "backend_agreement.json", "data/split.json",
                 "generator/adapter/selfrag_training.json"):
        (run / path).write_text(path)
    for path in ("generator/loss_curve.png", "generator2/loss_curve.png"):
        (run / path).write_bytes(b"png")
    ship(run, staging, run / "generator2", folder, phase2=True)
    assert {p.name for p in folder.iterdir()} == {*PACKED, "eval.json", "eval_full.json", "backend_agreement.json", "split.json",
                                                  "generator_loss_curve.png", "generator_phase2_loss_curve.png",
                                                  "generator_phase1_training.json"}
    assert (folder / "selfrag_training.json").read_text() == "packed selfrag_training.json"
    assert (folder / "generator_phase1_training.json").read_text() == "generator/adapter/selfrag_training.json"
    # quantisation reports: this build's are shipped, an earlier build's are removed
    (run / "eval_full_iq4_nl.json").write_text("iq4_nl")
    (folder / "eval_full_q4_0.json").write_text("an earlier build's")
    ship(run, staging, run / "generator2", folder, phase2=True, quants=["iq4_nl"])
    assert (folder / "eval_full_iq4_nl.json").read_text() == "iq4_nl" and not (folder / "eval_full_q4_0.json").exists()


def test_card_compares_quantisations_from_their_reports(tmp_path):
    build_folder(tmp_path, chain_eval())
    assert "### Quantisation" not in render(tmp_path)
    write(tmp_path, "eval_full.json", chain_eval(match=0.54))
    write(tmp_path, "eval_full_iq4_nl.json", chain_eval(match=0.46, isrel=0.92) | {"model": {"file": "q4.gguf", "sha256": "ab" * 32}})
    write(tmp_path, "eval_full_q4_0.json", LEGACY_EVAL)  # not a chain report: left out
    card = render(tmp_path)
    assert "### Quantisation" in card
    assert "| q8_0 (`selfrag-smollm2-135m-abc.gguf`, sha256 ffffffffffff) | 0.540 |" in card
    assert "| iq4_nl (`q4.gguf`, sha256 abababababab) | 0.460 | 0.500 | n/a | 0.920 | 0.800 |" in card
    assert "| q4_0 " not in card


def test_lineage_of_continued_builds_sums_each_phase_2_once():
    from cookbook.selfrag_smollm2.card.versions import continued_earlier_build, lineage, lineage_totals

    rows = [{"build": "v1", "generator_steps": [400, 300], "generator_minutes": 90.0, "phase1_minutes": 50.0},
            {"build": "v2", "continued": False, "generator_steps": [400, 500], "generator_minutes": 100.0,
             "phase1_minutes": 48.0},
            {"build": "v3", "continued": True, "generator_steps": [400, 368], "generator_minutes": 86.0,
             "phase1_minutes": 48.0},
            {"build": "v4", "continued": True, "generator_steps": [400, 434], "generator_minutes": 93.0,
             "phase1_minutes": 48.0}]
    chain = lineage(rows, rows[3])
    assert [r["build"] for r in chain] == ["v2", "v3", "v4"]
    assert lineage_totals(chain) == ([400, 500, 368, 434], 100.0 + 38.0 + 45.0)
    assert lineage(rows, rows[1]) == [rows[1]] and lineage(rows, None) == []
    assert continued_earlier_build("runs/smollm2v3/generator2/adapter")
    assert not continued_earlier_build("runs/x/generator/adapter") and not continued_earlier_build(None)


def test_restraint_section_renders_the_bio_report(tmp_path):
    import json

    from cookbook.selfrag_smollm2.card.restraint import RESTRAINT_REPORT, restraint_section
    from langchain_selfrag.evaluation.bio.metrics import Judged
    from langchain_selfrag.evaluation.bio.report import system_entry

    assert restraint_section(tmp_path) == []
    items = {"a": Judged(False, [True, False]), "b": Judged(True, []), "x": Judged(False, [False])}
    invented = {"x": True}
    entry = {"metrics": system_entry(items, invented, [0.5], n_resamples=50, seed=0)}
    selfrag = {**entry, "description": "Self-RAG (mode adaptive)", "retrieved_share": 0.25}
    recipe = {"policy_model_file": "m-1.gguf",
              "research": {"questions": 9, "iterations": 3, "samples_per_question": 13, "method": "research",
                           "rho": 0.5, "abstention_best": 2},
              "training": {"dpo": {"steps": 6, "batch": 8, "learning_rate": 5e-5, "beta": 0.25, "minutes": 1.5}}}
    report = {"run": {"utility_rhos": [0.5], "judge_description": "IsSup judge"}, "systems": {"dpo": entry, "selfrag": selfrag},
              "caveats": ["weak judge"], "recipe": recipe}
    (tmp_path / RESTRAINT_REPORT).write_text(json.dumps(report))
    (tmp_path / "versions.json").write_text(json.dumps({"versions": [
        {"schema": VERSIONS_SCHEMA, "build": "v7", "figures": {"model_file": "m-1.gguf"}}]}))
    text = "\n".join(restraint_section(tmp_path))
    assert "Self-restraint" in text and "| dpo |" in text and "weak judge" in text
    assert "build **v7**" in text and "9 entities" in text and "best sample for 2" in text
    assert "DPO: 6 steps × 8, lr 5e-05, β 0.25, 1.5 min." in text and "Not trained in this run: SFT, RLOO." in text
    assert "(Self-RAG (mode adaptive)) chose to retrieve for 25% of the questions" in text
    assert "--invented-distractors" not in text  # no distractors report in the folder
    from cookbook.selfrag_smollm2.card.restraint import RESTRAINT_DISTRACTORS_REPORT

    (tmp_path / RESTRAINT_DISTRACTORS_REPORT).write_text(json.dumps(
        {"run": {"utility_rhos": [0.5]}, "systems": {"selfrag_rho0.5": entry}}))
    text = "\n".join(restraint_section(tmp_path))
    assert "`selfrag eval bio --invented-distractors`" in text and "| selfrag_rho0.5 | 1 |" in text
