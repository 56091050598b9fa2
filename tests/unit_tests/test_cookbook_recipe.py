"""The shipped model's recipe is rendered from the builds' records: the committed script and README table
are what the records give, the copied records are git's, and a setting no option replays is refused."""

from __future__ import annotations

import json
import subprocess

import pytest

from cookbook.selfrag_smollm2 import recipe


def test_the_committed_script_and_table_are_what_the_records_give():
    assert recipe.SCRIPT.read_text(encoding="utf-8") == recipe.script()
    readme = recipe.README.read_text(encoding="utf-8")
    assert readme == recipe.render_readme(readme, recipe.smoke_result())


def test_each_training_command_is_its_record():
    v4 = json.loads((recipe.BUNDLE / "selfrag_training.json").read_text())["config"]
    words = recipe.options({"config": v4})
    assert words[words.index("--init-adapter") + 1] == "$RUN/v3/generator2/adapter"
    assert words[words.index("--train-file") + 1] == "$RUN/v4/data/generator_phase2.jsonl"
    assert words[words.index("--base-model") + 1] == "$BASE"
    assert words[words.index("--lr") + 1] == str(v4["learning_rate"])
    script = recipe.script()
    assert script.count("\ntrain ") + script.count("\n  train ") == len(recipe.V2_STEPS) + len(recipe.CHAIN_STEPS)


def test_a_setting_that_no_option_replays_is_refused():
    v4 = json.loads((recipe.BUNDLE / "selfrag_training.json").read_text())["config"]
    with pytest.raises(ValueError, match="warmup_ratio"):
        recipe.options({"config": {**v4, "warmup_ratio": 0.1}})
    with pytest.raises(ValueError, match="no known run folder"):
        recipe.options({"config": {**v4, "init_adapter": "/elsewhere/adapter"}})


def test_the_copied_records_are_the_ones_git_holds():
    copies = {"v2_generator_phase2a_training.json": "0e3c6cf:{}/selfrag_training.json",
              "v2_generator_phase2_training.json": "9e68979:{}/selfrag_training.json",
              "v3_generator_phase2_training.json": "6c86a15:{}/selfrag_training.json",
              "v2_split.json": "9e68979:{}/split.json", "v3_split.json": "6c86a15:{}/split.json"}
    folder = "langchain_selfrag/models/selfrag-smollm2-135m"
    for name, spec in copies.items():
        try:
            blob = subprocess.run(["git", "show", spec.format(folder)], cwd=recipe.ROOT, capture_output=True,
                                  check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            pytest.skip("the checkout has no git history")
        assert (recipe.RECORDS / name).read_bytes() == blob, name


def test_check_compares_a_run_with_the_records(tmp_path):
    step = recipe.CHAIN_STEPS[1]
    record = json.loads(step.record.read_text())
    adapter = tmp_path / "v4" / "generator2" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "selfrag_training.json").write_text(json.dumps({**record, "steps": 2, "train_loss": 3.0}))
    (tmp_path / "timings.tsv").write_text("v4 phase 2\t61\n")
    result = recipe.check(tmp_path)
    (entry,) = result["steps"]
    assert entry["data_as_recorded"] and entry["seconds"] == 61 and result["smoke_steps"] == 2
    assert recipe.check_ok(result)
    (adapter / "selfrag_training.json").write_text(json.dumps({**record, "examples": 1}))
    assert not recipe.check_ok(recipe.check(tmp_path))
