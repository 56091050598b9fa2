"""Sphinx's documentation directives, taught to docutils so that their text reaches the index.

Plain docutils does not know Sphinx's directives and drops them whole, with the documentation they
hold: a command-line page's ``.. option:: --spec FILE`` with its description, an API page's
``.. function:: loads(s)``, a ``.. versionchanged:: 2.0`` note. Here they become what a reader sees:

* object descriptions (``option``, ``envvar``, ``function``, ``class``, ``method``, ``data`` ... and their
  ``py:`` forms): the signature on a line of its own (with ``:type:`` and ``:value:``: ``TIMEOUT: int = 30``),
  then the description's blocks;
* version notes: ``Added in version 2.0: ...``, ``Changed in version ...``, ``Deprecated since version ...``;
* ``seealso``: ``See also: ...``; ``code-block`` / ``sourcecode``: a literal block; ``glossary``,
  ``only``, ``centered``, ``hlist``: their content.

Directives that only steer Sphinx (``toctree``, ``index``, ``highlight``, ``currentmodule``, ``auto*``:
their text lives in the code) stay dropped. :func:`sphinx_directives` registers them for one parse.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from docutils import nodes
from docutils.parsers.rst import Directive, directives

#: Object descriptions: name -> what the signature describes (Sphinx's domains, plain and ``py:``).
DESCRIPTIONS = ("option", "envvar", "program", "describe", "object", "function", "class", "method",
                "classmethod", "staticmethod", "attribute", "property", "data", "exception", "decorator",
                "decoratormethod", "module", "cmdoption")
#: Version notes: name -> the words that open them (Sphinx 7.3's wording).
VERSION_NOTES = {"versionadded": "Added in version", "versionchanged": "Changed in version",
                 "deprecated": "Deprecated since version", "versionremoved": "Removed in version"}
#: Directives whose content is shown as it is.
CONTENT_ONLY = ("glossary", "only", "hlist", "centered", "tabularcolumns")


class _AnyOptions(dict):
    """An option spec that takes every option (Sphinx's ``:noindex:``, ``:type:`` ...) as text. Never
    empty: docutils looks for options only when a directive's spec is truthy."""

    def __init__(self) -> None:
        super().__init__(noindex=directives.unchanged)

    def __missing__(self, key: str):
        return directives.unchanged


def _inline(directive: Directive, text: str) -> list[nodes.Node]:
    """Inline reStructuredText (roles, literals) of a directive's argument, as nodes."""
    parsed, _ = directive.state.inline_text(text, directive.lineno)
    return parsed


class _Content(Directive):
    """A directive shown as its content's blocks (``only``, ``glossary`` ...); the base of the others."""

    optional_arguments = 1
    final_argument_whitespace = True
    has_content = True
    option_spec = _AnyOptions()

    def body(self) -> nodes.container:
        box = nodes.container()
        self.state.nested_parse(self.content, self.content_offset, box)
        return box

    def opened(self, opening: str, inline: str) -> list[nodes.Node]:
        """The content opened by ``opening``: ``opening: inline`` as its first paragraph, else put before
        the content's first paragraph, else a paragraph of its own."""
        box = self.body()
        first = box.children[0] if box.children else None
        if inline:
            box.insert(0, nodes.paragraph("", "", nodes.Text(f"{opening}: "), *_inline(self, inline)))
        elif isinstance(first, nodes.paragraph):
            first.insert(0, nodes.Text(f"{opening}: "))
        else:
            box.insert(0, nodes.paragraph(f"{opening}.", f"{opening}."))
        return [box]

    def run(self) -> list[nodes.Node]:
        return [self.body()]


class _Description(_Content):
    """``.. function:: loads(s, *, strict=True)``: the signature on its own line, then the description."""

    def run(self) -> list[nodes.Node]:
        signature = " ".join(self.arguments[0].split()) if self.arguments else ""
        if signature and self.options.get("type"):
            signature += f": {' '.join(str(self.options['type']).split())}"
        if signature and self.options.get("value"):
            signature += f" = {' '.join(str(self.options['value']).split())}"
        box = self.body()
        if signature:
            box.insert(0, nodes.paragraph(signature, signature))
        return [box]


class _VersionNote(_Content):
    """``.. versionchanged:: 2.0`` and what changed: one paragraph opened by the version."""

    required_arguments = 1
    optional_arguments = 0

    def run(self) -> list[nodes.Node]:
        version, *rest = self.arguments[0].split(None, 1)  # "2.0 The old name is gone." on the directive's line
        return self.opened(f"{VERSION_NOTES[self.name]} {version}", " ".join(rest[0].split()) if rest else "")


class _SeeAlso(_Content):
    def run(self) -> list[nodes.Node]:
        return self.opened("See also", " ".join(self.arguments[0].split()) if self.arguments else "")


class _CodeBlock(_Content):
    final_argument_whitespace = False

    def run(self) -> list[nodes.Node]:
        code = "\n".join(self.content)
        return [nodes.literal_block(code, code)]


def _registry() -> dict[str, type[Directive]]:
    table: dict[str, type[Directive]] = {}
    for name in DESCRIPTIONS:
        table[name] = table[f"py:{name}"] = table[f"std:{name}"] = _Description
    for name in ("function", "macro", "member", "type", "var", "struct", "enum"):
        table[f"c:{name}"] = table[f"cpp:{name}"] = _Description
    table.update({name: _VersionNote for name in VERSION_NOTES})
    table.update({name: _Content for name in CONTENT_ONLY})
    table.update({"seealso": _SeeAlso, "code-block": _CodeBlock, "sourcecode": _CodeBlock})
    return table


_REGISTRY = _registry()


@contextmanager
def sphinx_directives() -> Iterator[None]:
    """Sphinx's documentation directives known to docutils while the block runs (and only then)."""
    added = {name: cls for name, cls in _REGISTRY.items() if name not in directives._directives}
    directives._directives.update(added)
    try:
        yield
    finally:
        for name in added:
            directives._directives.pop(name, None)
