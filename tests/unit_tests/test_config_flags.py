"""``selfrag ask``'s Self-RAG flags are generated from SelfRAGConfig's fields: one place per knob."""

from __future__ import annotations

import argparse
import typing
from dataclasses import fields

import pytest

from langchain_selfrag.config import SelfRAGConfig, knob_help
from langchain_selfrag.config_flags import add_config_flags, config_settings

HINTS = typing.get_type_hints(SelfRAGConfig)


def _other_value(name: str):
    """A valid value of setting ``name`` that is not its default."""
    default = getattr(SelfRAGConfig(), name)
    hint = HINTS[name]
    if hint is bool:
        return not default
    literal = [a for a in (hint, *typing.get_args(hint)) if typing.get_origin(a) is typing.Literal]
    if literal:  # a Literal, or Literal | None
        return next(v for v in typing.get_args(literal[0]) if v != default)
    if name in ("threshold", "abstain_isrel", "abstain_issup", "rho"):
        return 0.35
    if isinstance(default, float):
        return default + 0.25
    return (default or 0) + 7


def _argv(parser: argparse.ArgumentParser, name: str, value) -> list[str]:
    """The command line that sets ``name`` to ``value``, found through the parser's own actions."""
    (action,) = [a for a in parser._actions if a.dest == name]
    flag = action.option_strings[0]
    return [flag] if isinstance(value, bool) else [flag, str(value)]


def test_every_config_field_is_a_documented_flag() -> None:
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    by_dest = {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}
    assert set(by_dest) == {f.name for f in fields(SelfRAGConfig)}
    for name, action in by_dest.items():
        assert knob_help(name) in action.help  # the field's own documentation, once


@pytest.mark.parametrize("name", [f.name for f in fields(SelfRAGConfig)])
def test_each_flag_sets_its_field_and_only_it(name: str) -> None:
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    value = _other_value(name)
    settings = config_settings(parser.parse_args(_argv(parser, name, value)))
    assert settings == {name: value}
    assert getattr(SelfRAGConfig.from_mapping(settings), name) == value


def test_flags_left_out_leave_the_defaults_and_presets_alone() -> None:
    from langchain_selfrag.cli import _settings, build_parser

    parser = build_parser()
    assert _settings(parser.parse_args(["ask", "q"])) == {}
    paper = SelfRAGConfig.from_mapping(_settings(parser.parse_args(["ask", "q", "--paper"])))
    assert paper == SelfRAGConfig.paper()
    mixed = SelfRAGConfig.from_mapping(_settings(parser.parse_args(["ask", "q", "--paper", "--abstain-isrel", "0.4"])))
    assert mixed == SelfRAGConfig.paper(abstain_isrel=0.4)


def test_the_historic_flag_names_still_parse() -> None:
    from langchain_selfrag.cli import _settings, build_parser

    args = build_parser().parse_args(["ask", "q", "--long", "--no-decoding-guard", "--closed-book", "--rho", "0.5",
                                      "--max-passage-tokens", "64"])
    assert _settings(args) == {"long_form": True, "decoding_guard": False, "abstain_closed_book": False,
                               "rho": 0.5, "max_passage_tokens": 64}


def test_unknown_field_names_are_an_error() -> None:
    with pytest.raises(ValueError, match="not SelfRAGConfig fields: nope"):
        add_config_flags(argparse.ArgumentParser(), names=["k", "nope"])
