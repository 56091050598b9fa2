"""Markdown to clean text with markdown-it-py: rendered, not stripped by hand.

Links keep their text and lose their targets, images (badges) and HTML comments go, inline and
fenced code keep their text, tables become ``a | b`` rows, list items ``- item``; headings set the
section path and the first ``# Title`` (or front matter's ``title:``) becomes the title.
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.footnote import footnote_plugin
from mdit_py_plugins.front_matter import front_matter_plugin

from .html_fragment import html_fragment_text
from .text import CleanText, TextBuilder

_PARSER = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]) \
    .use(front_matter_plugin).use(footnote_plugin)


def inline_text(token: Token) -> str:
    """Text of an inline token: link text without target, no images, no HTML tags or comments."""
    parts: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type == "softbreak":
            parts.append(" ")
        elif child.type == "hardbreak":
            parts.append("\n")
        elif child.type == "html_inline" and child.content.lower().startswith("<br"):
            parts.append("\n")
    return "".join(parts)


def _front_matter_title(content: str) -> str | None:
    for line in content.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "title":
            return value.strip().strip("'\"") or None
    return None


def render_markdown(text: str) -> CleanText:
    """Clean text of a markdown document."""
    out = TextBuilder()
    title: str | None = None
    tokens = _PARSER.parse(text)
    lists: list[list[int | None]] = []  # per open list: the next number (None for bullets)
    lines: list[str] = []  # the lines of the outermost open list, one block when it closes
    row: list[str] = []
    rows: list[str] = []
    item_prefix = ""

    def emit(body: str, *, verbatim: bool = False) -> None:
        nonlocal item_prefix
        if not lists:
            out.block(body, verbatim=verbatim)
            return
        indent = "  " * len(lists)
        body = body.strip("\n") if verbatim else " ".join(body.split())
        for n, line in enumerate(body.splitlines() or [""]):
            lines.append((item_prefix if n == 0 and item_prefix else indent) + line)
        item_prefix = ""

    for i, tok in enumerate(tokens):
        kind = tok.type
        if kind == "front_matter":
            title = _front_matter_title(tok.content)
        elif kind == "heading_open":
            out.heading(int(tok.tag[1]), inline_text(tokens[i + 1]))
        elif kind in ("bullet_list_open", "ordered_list_open"):
            start = tok.attrGet("start")
            lists.append([int(start) if start is not None else 1] if kind == "ordered_list_open" else [None])
        elif kind in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
            if not lists:
                out.block("\n".join(lines), verbatim=True)
                lines = []
        elif kind == "list_item_open":
            number = lists[-1][0]
            item_prefix = "  " * (len(lists) - 1) + ("- " if number is None else f"{number}. ")
            if number is not None:
                lists[-1][0] = number + 1
        elif kind == "inline" and tokens[i - 1].type == "paragraph_open":
            emit(inline_text(tok))
        elif kind in ("fence", "code_block"):
            emit(tok.content, verbatim=True)
        elif kind == "html_block":
            emit(html_fragment_text(tok.content))
        elif kind == "tr_open":
            row = []
        elif kind == "inline" and tokens[i - 1].type in ("th_open", "td_open"):
            row.append(" ".join(inline_text(tok).split()))
        elif kind == "tr_close":
            rows.append(" | ".join(row))
        elif kind == "table_close":
            emit("\n".join(rows), verbatim=True)
            rows = []
    return out.build(title)
