"""reStructuredText to clean text with docutils: the parsed document tree, rendered as plain text.

Link targets, substitution definitions (badges), images, comments and raw HTML go; references keep
their text; literal and code blocks keep theirs verbatim; tables become ``a | b`` rows; section
titles set the section path and the document title becomes the title. Sphinx's documentation
directives (``option``, ``function``, ``versionchanged`` …) keep their text (:mod:`.sphinx_directives`);
other directives docutils does not know (``toctree``, ``autoclass`` …) are dropped with their error
messages; an unresolved reference or unknown role (``:func:`f```) keeps the text it names. ``include`` and
``raw`` are disabled: indexing a file never reads another one.
"""

from __future__ import annotations

import io
from typing import Any

from docutils import nodes
from docutils.core import publish_doctree

from .sphinx_directives import sphinx_directives
from .text import CleanText, TextBuilder

_SETTINGS = {
    "report_level": 5, "halt_level": 5, "warning_stream": io.StringIO(), "file_insertion_enabled": False,
    "raw_enabled": False, "syntax_highlight": "none", "input_encoding": "unicode", "traceback": True,
    "doctitle_xform": True, "sectsubtitle_xform": False,
}
#: Nodes with nothing to show a reader.
_DROP = (nodes.comment, nodes.target, nodes.substitution_definition, nodes.system_message, nodes.raw,
         nodes.image, nodes.pending, nodes.footnote_reference, nodes.citation_reference, nodes.transition)
_VERBATIM = (nodes.literal_block, nodes.doctest_block)
_LISTS = (nodes.bullet_list, nodes.enumerated_list)


def _problematic_text(node: nodes.Node) -> str:
    """What an unresolved reference or unknown role names: ``Sorted List`` for `` `Sorted List`_ ``."""
    raw = node.astext()
    if "`" in raw:
        raw = raw[raw.index("`") + 1 : raw.rindex("`")] if raw.count("`") >= 2 else raw.replace("`", "")
    raw = raw.rstrip("_")
    if raw.endswith(">") and "<" in raw:  # `text <target>`
        raw = raw[: raw.rindex("<")]
    return raw.strip() or node.astext()


def inline_text(node: nodes.Node) -> str:
    """Text of an inline subtree without images, targets and footnote marks."""
    if isinstance(node, nodes.Text):
        return str(node)
    if isinstance(node, _DROP):
        return ""
    if isinstance(node, nodes.problematic):
        return _problematic_text(node)
    return "".join(inline_text(child) for child in node.children)


class _Renderer:
    def __init__(self) -> None:
        self.out = TextBuilder()

    def blocks(self, node: nodes.Node, depth: int) -> None:
        for child in node.children:
            self.block(child, depth)

    def block(self, node: nodes.Node, depth: int) -> None:
        if isinstance(node, _DROP) or (isinstance(node, nodes.topic) and "contents" in node["classes"]):
            return
        if isinstance(node, nodes.section):
            title = next((c for c in node.children if isinstance(c, nodes.title)), None)
            if title is not None:
                self.out.heading(depth + 1, inline_text(title))
            self.blocks(node, depth + 1)
        elif isinstance(node, (nodes.title, nodes.subtitle, nodes.rubric)):
            if not isinstance(node.parent, (nodes.section, nodes.document)):
                self.out.block(inline_text(node))
        elif isinstance(node, nodes.paragraph):
            self.out.block(" ".join(inline_text(node).split()))
        elif isinstance(node, nodes.line):
            self.out.block(inline_text(node))
        elif isinstance(node, _VERBATIM):
            self.out.block(node.astext(), verbatim=True)
        elif isinstance(node, _LISTS):
            self.out.block("\n".join(self.list_lines(node, 0)), verbatim=True)
        elif isinstance(node, nodes.table):
            self.out.block("\n".join(" | ".join(" ".join(inline_text(e).split()) for e in row.children)
                                     for row in node.findall(nodes.row)), verbatim=True)
        elif isinstance(node, (nodes.definition_list_item, nodes.field, nodes.option_list_item)):
            head, *rest = node.children
            self.out.block(f"{inline_text(head)}: " + " ".join(inline_text(r) for r in rest))
        elif isinstance(node, nodes.Admonition) and not isinstance(node, nodes.admonition):
            self.out.block(f"{type(node).__name__.capitalize()}: " + " ".join(inline_text(c) for c in node.children))
        elif isinstance(node, nodes.Text):
            self.out.block(str(node))
        else:  # document, block_quote, container, compound, lists of fields/definitions, admonition, topic ...
            self.blocks(node, depth)

    def list_lines(self, node: nodes.Node, level: int) -> list[str]:
        lines: list[str] = []
        for n, item in enumerate(node.children, start=int(node.get("start", 1))):
            bullet = f"{n}. " if isinstance(node, nodes.enumerated_list) else "- "
            first = True
            for child in item.children:
                if isinstance(child, _LISTS):
                    lines.extend(self.list_lines(child, level + 1))
                    continue
                text = child.astext() if isinstance(child, _VERBATIM) else " ".join(inline_text(child).split())
                for line in text.splitlines():
                    lines.append("  " * level + (bullet if first else "  ") + line)
                    first = False
        return lines


def render_rst(text: str, source: str = "<rst>") -> CleanText:
    """Clean text of a reStructuredText document."""
    settings: dict[str, Any] = dict(_SETTINGS, warning_stream=io.StringIO())
    with sphinx_directives():
        tree = publish_doctree(text, source_path=source, settings_overrides=settings)
    renderer = _Renderer()
    title = next((c for c in tree.children if isinstance(c, nodes.title)), None)
    if title is not None:
        renderer.out.heading(1, inline_text(title))
    renderer.blocks(tree, 1)  # sections are level 2 and deeper: only the document title is level 1
    return renderer.out.build()
