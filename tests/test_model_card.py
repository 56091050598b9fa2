"""The bundled model's card is rendered from its measurement files, and says what they say."""

from __future__ import annotations

import json

from cookbook.selfrag_smollm2.model_card import render


def write(folder, name, data):
    (folder / name).write_text(json.dumps(data))


def test_card_reads_targets_times_and_earlier_builds(tmp_path):
    ev = {"retrieve": {"auc": 0.99}, "isrel": {"auc": 0.80}, "match": {"selfrag": 0.3, "no_retrieval": 0.1, "base_with_top1_passage": 0.4}}
    write(tmp_path, "eval.json", ev)
    write(tmp_path, "selfrag_training.json", {"steps": 10, "seconds": 600, "seconds_total": 1200, "config": {"batch_size": 8}})
    write(tmp_path, "generator_phase1_training.json", {"steps": 5, "seconds": 1800, "config": {"batch_size": 8}})
    card = render(tmp_path)
    assert "| IsRel ROC AUC" in card and "0.800 | ≥ 0.85: **missed**" in card
    assert "20.0 min" in card and "about 50 minutes of CPU training" in card  # resumed runs are summed
    assert "Self-RAG ≥ 2× this: met (3.0×)" in card
    assert "matches 0.40 against Self-RAG's 0.30" in card
    assert "Earlier builds" not in card

    write(tmp_path, "eval.json", ev | {"isrel": {"auc": 0.9, "auc_ci95": [0.86, 0.93]}, "match": {"selfrag": 0.5, "no_retrieval": 0.1, "base_with_top1_passage": 0.4}})
    write(tmp_path, "versions.json", {"versions": [{"build": "old", "training": "x", "eval": ev}]})
    card = render(tmp_path)
    assert "0.900 (95% CI 0.860–0.930) | ≥ 0.85: met" in card
    assert "IsRel meets its target on this held-out sample:" in card and "stays above 0.85" in card
    assert "also beats the untrained base" in card
    assert "| old | x | 0.990 | 0.800 |" in card and "| this one | 5 + 10 steps, 50 min | 0.990 | 0.900 |" in card


def test_shipping_a_new_build_remembers_the_old_one(tmp_path):
    from cookbook.selfrag_smollm2.package import remember_shipped_build

    old = {"isrel": {"auc": 0.7}, "examples": [{"question": "q"}]}
    write(tmp_path, "eval.json", old)
    write(tmp_path, "selfrag_training.json", {"steps": 7})
    remember_shipped_build(tmp_path, old | {"examples": []})  # same numbers again: nothing to remember
    assert not (tmp_path / "versions.json").exists()
    new = {"isrel": {"auc": 0.9}}
    remember_shipped_build(tmp_path, new)
    write(tmp_path, "eval.json", new)  # as package.main ships it next
    remember_shipped_build(tmp_path, new)  # packaging the same run again
    versions = json.loads((tmp_path / "versions.json").read_text())["versions"]
    assert versions == [{"build": "build 1", "training": "7 steps", "eval": {"isrel": {"auc": 0.7}}}]
