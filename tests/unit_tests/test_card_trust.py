"""The card's trust section is the trust suite's test-part JSON, copied and rendered, never typed in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cookbook.selfrag_smollm2.card.trust import TRUST_FILE, trust_section
from cookbook.selfrag_smollm2.trust import main, read_test_part, trust_record


def suite_result(split: str, answerable_right: int) -> dict:
    part = lambda right, n: {"n": n, "right": right, "rate": right / n}  # noqa: E731
    selective = {"coverage": {"value": 0.5}, "selective_accuracy": {"value": 0.75}, "f1_rg": {"value": 0.6},
                 "aurc": {"value": 0.3}}
    return {"benchmark": "trust_suite", "date": "2026-11-25 12:00 UTC", "command": "python benchmarks/trust_suite.py",
            "settings": {"split": split},
            "figures": {"kinds": {"docs": {"parts": {"answerable": part(answerable_right, 30),
                                                      "near_miss": part(14, 20), "off_topic": part(38, 40),
                                                      "noise_only": part(25, 30)},
                                            "reader_ceiling": part(answerable_right + 3, 30),
                                            "selective": selective}}}}


def test_only_the_test_part_reaches_the_card(tmp_path: Path) -> None:
    (tmp_path / "val.json").write_text(json.dumps(suite_result("validation", 20)))
    with pytest.raises(SystemExit, match="not a trust-suite result of the test part"):
        read_test_part(tmp_path / "val.json")


def test_the_section_shows_each_build_from_the_files(tmp_path: Path) -> None:
    (tmp_path / "new.json").write_text(json.dumps(suite_result("test", 21)))
    (tmp_path / "old.json").write_text(json.dumps(suite_result("test", 12)))
    assert main([str(tmp_path / "new.json"), "--build", "v5", "--baseline", str(tmp_path / "old.json"),
                 "--baseline-build", "v4", "--folder", str(tmp_path)]) == 0
    record = json.loads((tmp_path / TRUST_FILE).read_text())
    assert record == trust_record(suite_result("test", 21), "v5", suite_result("test", 12), "v4")
    text = "\n".join(trust_section(tmp_path))
    assert "| docs | v5 | 21/30 (0.70) | 24/30 (0.80) | 14/20 (0.70) | 38/40 (0.95) | 25/30 (0.83) |" in text
    assert "| docs | v4 | 12/30 (0.40) |" in text


def test_no_file_no_section(tmp_path: Path) -> None:
    assert trust_section(tmp_path) == []
