"""The measured figures of the README, CONTRIBUTING.md, docs/ and the cookbook's log of experiments equal the results
files that shipped scripts wrote (no model, no ../shared)."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks import readme_figures as rf
from benchmarks.record import MACHINE_KEYS, REQUIRED_KEYS, RESULTS_DIR, load

README = rf.README.read_text()
PAGES = {rf.rel(path): path.read_text() for path in rf.pages()}
USER_PAGES = sorted(set(PAGES) - {rf.rel(rf.LOG)})
RESULT_FILES = sorted(RESULTS_DIR.glob("*.json"))


def page_with(block: str) -> str:
    return next(text for text in PAGES.values() if block in rf.blocks_in(text))


def test_the_pages_are_the_readme_contributing_every_docs_page_the_log_and_the_cards():
    assert {"README.md", "CONTRIBUTING.md", "docs/index.md", "cookbook/EXPERIMENTS.md"} <= set(PAGES)
    cards = {rf.rel(p) for p in rf.MODEL_CARD.parent.glob("*/README.md") if p.parent != rf.MODEL_CARD}
    assert rf.rel(rf.MODEL_CARD / "README.md") not in PAGES  # rendered by its own recipe
    assert set(USER_PAGES) - {"README.md", "CONTRIBUTING.md"} == {rf.rel(p) for p in rf.DOCS.glob("*.md")} | cards


def test_every_figure_of_every_page_matches_its_files():
    assert rf.check_pages(PAGES) == []


@pytest.mark.parametrize("name", USER_PAGES)
def test_no_user_page_has_figures_outside_the_blocks(name):
    assert rf.stray_figures(PAGES[name]) == []


def test_the_log_may_quote_figures_of_runs_not_in_the_repository():
    typed = "v8 matched 0.640 against 0.700 for v4.\n"

    def problems(name: str) -> list[str]:
        return [p for p in rf.check_pages({name: typed}) if p.startswith(name)]

    assert problems(rf.rel(rf.LOG)) == []
    assert problems("docs/x.md") == ["docs/x.md: figure outside a figures block: '0.640'",
                                     "docs/x.md: figure outside a figures block: '0.700'"]


def test_every_block_stands_on_a_page_and_a_lost_one_is_reported():
    assert all(any(name in rf.blocks_in(text) for text in PAGES.values()) for name in rf.BLOCKS)
    without = {name: rf.BLOCK.sub("", text) if "trust" in rf.blocks_in(text) else text for name, text in PAGES.items()}
    assert "no page has a figures:trust block" in rf.check_pages(without)


def test_a_changed_figure_is_caught():
    good = rf.rendered(page_with("retrieval_recall"))
    body = rf.blocks_in(good)["retrieval_recall"]
    figure = rf.PERCENT.findall(body)[0]
    wrong = good.replace(body, body.replace(figure, "99.9%", 1), 1)
    problems = rf.check(wrong)
    assert len(problems) == 1 and problems[0].startswith("figures:retrieval_recall differs")
    assert rf.rendered(wrong) == good
    assert rf.check_pages({"docs/x.md": wrong, **{k: v for k, v in PAGES.items() if v != good}})[0].startswith(
        "docs/x.md: figures:retrieval_recall differs")


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
    assert inline_problems(README + bad) == [f"figure {CARD_FIGURE}: the page has '0.999', the file gives {value!r}"]
    assert rf.rendered(README + bad).endswith(good)


def test_a_short_key_stands_for_its_file_and_path():
    key = "card_eval.match-no_retrieval"
    assert rf.FIGURES[key] == CARD_FIGURE and rf.inline_figure(key) == rf.inline_figure(CARD_FIGURE)
    text = f"match <!-- figure {key} -->0.999<!-- /figure --> closed-book"
    assert rf.check(text) == [f"figure {key}: the page has '0.999', the file gives {rf.inline_figure(key)!r}"]
    assert rf.rendered(text) == text.replace("0.999", rf.inline_figure(key))
    assert rf.check("<!-- figure card_eval.nowhere -->1<!-- /figure -->") == [
        "inline figure 'card_eval.nowhere': no such key in benchmarks/figures.toml"]


def test_the_keys_file_names_a_file_per_group():
    assert rf.figure_keys('[a]\nfile = "F.json"\nx = "figures.x:d"\n') == {"a.x": "F.json#figures.x:d"}
    with pytest.raises(ValueError, match=r"\[a\] names no file"):
        rf.figure_keys('[a]\nx = "figures.x:d"\n')


def test_every_key_is_used_by_a_page_and_the_user_pages_use_keys():
    used = {m["spec"] for text in PAGES.values() for m in rf.inline_figures(text)}
    assert set(rf.FIGURES) - used == set()
    spelled = {name: [m["spec"] for m in rf.inline_figures(PAGES[name]) if "#" in m["spec"]] for name in PAGES}
    assert {name: specs for name, specs in spelled.items() if specs} == {}


def test_candidates_rows_stand_in_the_log_only():
    for name in USER_PAGES:
        body = "".join(rf.blocks_in(PAGES[name]).values())
        assert not any(f"benchmarks/results/{c}.json" in body for c in rf.CANDIDATES), name
    log = "".join(rf.blocks_in(PAGES[rf.rel(rf.LOG)]).values())
    assert all(f"benchmarks/results/{c}.json" in log for c in rf.CANDIDATES)


def test_commands_show_no_scratch_folder():
    data = {"command": "python benchmarks/trust_suite.py --out runs/trust/x1 --data=../shared/data --json f.json"}
    assert rf.command(data) == "python benchmarks/trust_suite.py --out DIR --data=DIR --json f.json"


def test_an_inline_figure_must_come_from_a_shipped_results_file():
    with pytest.raises(ValueError, match="under benchmarks/results/"):
        rf.inline_figure("pyproject.toml#project.version")
    with pytest.raises(ValueError, match="has no match.nowhere"):
        rf.inline_figure("langchain_selfrag/models/selfrag-smollm2-135m/eval_full.json#match.nowhere")


def test_a_figure_shown_as_code_is_left_alone():
    text = "Write `<!-- figure FILE#KEY:FORMAT -->VALUE<!-- /figure -->` for one figure.\n"
    assert rf.inline_figures(text) == [] and rf.check(text) == [] and rf.rendered(text) == text


def test_versions_and_code_are_not_figures():
    text = "Python 3.11+ and `torch==2.13.0`; the message says `best\nIsRel 0.12`.\n"
    assert rf.stray_figures(text) == []


def test_an_unknown_block_is_reported_and_left_alone():
    text = "<!-- figures:nowhere: x -->\nsome text\n<!-- /figures:nowhere -->\n"
    assert rf.check(text) == ["unknown figures block 'nowhere'"]
    assert rf.rendered(text) == text


@pytest.mark.parametrize("name", sorted(PAGES))
def test_rendering_an_up_to_date_page_changes_nothing(name):
    assert rf.rendered(PAGES[name]) == PAGES[name]


def test_every_block_names_the_files_it_is_rendered_from():
    for text in PAGES.values():
        for name, body in rf.blocks_in(text).items():
            assert "benchmarks/results/" in body, name


def test_the_readme_keeps_its_short_trust_table():
    assert "trust_summary" in rf.blocks_in(README)


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


def test_results_files_are_the_ones_the_pages_use():
    inline = {rf.figure_spec(m["spec"]).split("#")[0] for text in PAGES.values() for m in rf.inline_figures(text)}
    used = {*rf.block_files(),
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


LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("name", sorted(PAGES))
def test_every_relative_link_of_a_page_exists(name):
    """The front door's promise: every page the README (or a docs page) links to is there, anchors included."""
    page = rf.ROOT / name
    for target in LINK.findall(rf.FENCE.sub("", PAGES[name])):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{name} links to {target}, which does not exist"
        if anchor and dest.suffix == ".md":
            headings = {slug(line.lstrip("#")) for line in dest.read_text().splitlines() if line.startswith("#")}
            assert anchor in headings, f"{name} links to {target}: no such heading"


def test_cpu_features_are_read_from_the_flags_line():
    from benchmarks.record import cpu_features

    info = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16\nbugs\t\t: none\n"
    assert cpu_features(info) == ["avx2", "avx512f", "avx512_bf16"]
    assert cpu_features("model name\t: something\n") == []
