"""docs/concepts.md draws the state machine as the compiled graph draws itself
(``compile_graph().get_graph().draw_mermaid()``): the same nodes and the same edges, plain and conditional."""

from __future__ import annotations

import re
from pathlib import Path

from langchain_selfrag.graph import compile_graph

PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"
MERMAID = re.compile(r"^```mermaid\n(.*?)^```", re.S | re.M)
EDGE = re.compile(r"^\s*(\S+?) (-->|-\.->) (\S+?);$", re.M)
NODE = re.compile(r"^\s*(\w+)\(", re.M)


def drawing(text: str) -> tuple[set[str], set[tuple[str, str, str]]]:
    """The nodes and the edges (source, arrow, target) of a Mermaid flowchart."""
    return set(NODE.findall(text)), set(EDGE.findall(text))


def test_the_concept_page_draws_the_compiled_graph():
    blocks = MERMAID.findall(PAGE.read_text())
    assert len(blocks) == 1, "docs/concepts.md should hold one mermaid block"
    drawn = compile_graph().get_graph().draw_mermaid()
    nodes, edges = drawing(drawn)
    assert len(nodes) > 10 and any(arrow == "-.->" for _, arrow, _ in edges)
    assert drawing(blocks[0]) == (nodes, edges), f"the graph changed; put its drawing in docs/concepts.md:\n{drawn}"


def test_a_changed_edge_is_noticed():
    drawn = compile_graph().get_graph().draw_mermaid()
    assert drawing(drawn.replace("select -.-> abstain;", "select --> abstain;")) != drawing(drawn)
