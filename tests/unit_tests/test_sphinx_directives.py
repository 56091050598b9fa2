"""Sphinx's documentation directives keep their text in the index: a command-line page's options, an API
page's functions and data, version notes, see-also lines and code blocks; directives that only steer
Sphinx stay dropped, and docutils is left as it was."""

from __future__ import annotations

from docutils.parsers.rst import directives

from langchain_selfrag.retrieval.formats.rst import render_rst

PAGE = """Glom CLI
========

Options
-------

.. option:: -s, --spec-format FORMAT

   The format of the spec: ``python`` (the default) or ``python-full``.

   Use ``python-full`` for lambdas.

.. py:function:: loads(s, *, strict=True)
   :noindex:

   Parse *s* and return the object.

   .. versionchanged:: 2.0
      ``strict`` defaults to True.

.. versionadded:: 1.5

.. deprecated:: 3.0

   Use ``dumps`` instead.

.. seealso:: :func:`dumps`

.. data:: TIMEOUT
   :type: int
   :value: 30

   Seconds to wait.

.. code-block:: python

   print("hi")

.. toctree::

   api

.. autoclass:: Glom
"""


def text() -> str:
    return "\n\n".join(t for t, _ in render_rst(PAGE).segments())


def test_descriptions_keep_their_signature_and_body() -> None:
    out = text()
    assert "-s, --spec-format FORMAT\n\nThe format of the spec: python (the default) or python-full." in out
    assert "Use python-full for lambdas." in out
    assert "loads(s, *, strict=True)\n\nParse s and return the object." in out and ":noindex:" not in out
    assert "TIMEOUT: int = 30\n\nSeconds to wait." in out


def test_version_notes_see_also_and_code_read_as_sphinx_renders_them() -> None:
    out = text()
    assert "Changed in version 2.0: strict defaults to True." in out
    assert "Added in version 1.5." in out and "Deprecated since version 3.0: Use dumps instead." in out
    assert "See also: dumps" in out and 'print("hi")' in out


def test_directives_that_steer_sphinx_stay_dropped_and_docutils_is_left_alone() -> None:
    out = text()
    assert "toctree" not in out and "api" not in out.split() and "autoclass" not in out and "Glom\n" not in out[9:]
    assert "option" not in directives._directives and "versionadded" not in directives._directives
    assert render_rst(PAGE).title == "Glom CLI"
