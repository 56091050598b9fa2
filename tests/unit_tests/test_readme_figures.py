"""The README's measured figures equal the results files that shipped scripts wrote (no model, no ../shared)."""

from __future__ import annotations

import json

import pytest

from benchmarks import readme_figures as rf
from benchmarks.record import MACHINE_KEYS, REQUIRED_KEYS, RESULTS_DIR, load

README = rf.README.read_text()
RESULT_FILES = sorted(RESULTS_DIR.glob("*.json"))


def test_every_readme_figure_block_matches_its_files():
    assert rf.check(README) == []


def test_readme_has_no_figures_outside_the_blocks():
    assert rf.stray_figures(README) == []


def test_a_changed_figure_is_caught():
    good = rf.rendered(README)
    body = rf.blocks_in(good)["retrieval_recall"]
    figure = rf.PERCENT.findall(body)[0]
    wrong = good.replace(body, body.replace(figure, "99.9%", 1), 1)
    problems = rf.check(wrong)
    assert len(problems) == 1 and problems[0].startswith("figures:retrieval_recall differs")
    assert rf.rendered(wrong) == good


def test_a_typed_in_figure_outside_the_blocks_is_caught():
    assert rf.stray_figures("Hybrid answered 0.530 of them, 94.9% in the top 5.\n") == ["94.9%", "0.530"]


CARD_FIGURE = "langchain_selfrag/models/selfrag-smollm2-135m/eval_full.json#match.no_retrieval:.3f"


def test_an_inline_figure_is_checked_against_its_file():
    value = rf.inline_figure(CARD_FIGURE)
    card = json.loads((rf.MODEL_CARD / "eval_full.json").read_text())
    assert value == f"{card['match']['no_retrieval']:.3f}"
    good = f"match <!-- figure {CARD_FIGURE} -->{value}<!-- /figure --> closed-book"
    bad = good.replace(f"-->{value}<", "-->0.999<")

    def inline_problems(text: str) -> list[str]:
        return [p for p in rf.check(text) if p.startswith(f"figure {CARD_FIGURE}")]

    assert inline_problems(README + good) == []
    assert rf.stray_figures(good) == []
    assert inline_problems(README + bad) == [f"figure {CARD_FIGURE}: README has '0.999', the file gives {value!r}"]
    assert rf.rendered(README + bad).endswith(good)


def test_an_inline_figure_must_come_from_a_shipped_results_file():
    with pytest.raises(ValueError, match="under benchmarks/results/"):
        rf.inline_figure("pyproject.toml#project.version")
    with pytest.raises(ValueError, match="has no match.nowhere"):
        rf.inline_figure("langchain_selfrag/models/selfrag-smollm2-135m/eval_full.json#match.nowhere")


def test_versions_and_code_are_not_figures():
    text = "Python 3.11+ and `torch==2.13.0`; the message says `best\nIsRel 0.12`.\n"
    assert rf.stray_figures(text) == []


def test_a_missing_block_is_reported_and_not_written():
    without = rf.BLOCK.sub("", README, count=1)
    assert any(p.startswith("README has no figures:") for p in rf.check(without))
    with pytest.raises(ValueError, match="no block"):
        rf.rendered(without)


def test_rendering_an_up_to_date_readme_changes_nothing():
    assert rf.rendered(README) == README


def test_every_block_names_the_files_it_is_rendered_from():
    for name, body in rf.blocks_in(README).items():
        assert "benchmarks/results/" in body, name


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: p.name)
def test_results_files_parse_and_carry_the_machine(path):
    data = json.loads(path.read_text())
    assert set(REQUIRED_KEYS) <= set(data)
    machine = data["machine"]
    assert set(MACHINE_KEYS) <= set(machine)
    assert machine["cpu"] and isinstance(machine["cores"], int) and machine["cores"] >= 1
    assert len(machine["load_average_start"]) == len(machine["load_average_end"]) == 3
    assert data["command"].startswith(f"python benchmarks/{data['benchmark']}.py")
    assert data["versions"]["python"] and data["versions"]["langchain-selfrag"]


def test_results_files_are_the_ones_the_readme_uses():
    inline = {m["spec"].split("#")[0] for m in rf.INLINE.finditer(README)}
    used = {*rf.CRITIQUE_FILES, *rf.THROUGHPUT_FILES, "retrieval_recall", "embeddings", "embeddings_ops", "index_scale",
            "trust_suite",
            *(p.removeprefix("benchmarks/results/").removesuffix(".json") for p in inline
              if p.startswith("benchmarks/results/"))}
    assert {p.stem for p in RESULT_FILES} == used


def test_load_names_missing_machine_fields(tmp_path):
    path = tmp_path / "bad.json"
    good = json.loads(RESULT_FILES[0].read_text())
    del good["machine"]["cpu"], good["date"]
    path.write_text(json.dumps(good))
    with pytest.raises(ValueError, match=r"missing date, machine\.cpu"):
        load(path)
