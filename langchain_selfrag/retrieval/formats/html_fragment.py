"""Text of an HTML fragment embedded in markdown (``<p align="center">…</p>``, ``<!-- … -->``).

Python's own ``html.parser``: comments, images, scripts and styles are dropped, block elements
become line breaks; no third-party package is needed for markdown files.
"""

from __future__ import annotations

from html.parser import HTMLParser

_SKIP = {"script", "style", "template", "noscript", "svg", "head"}
_BLOCK = {"p", "div", "br", "li", "tr", "table", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
          "blockquote", "section", "article", "details", "summary", "hr", "dd", "dt"}


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skipping += 1
        elif tag in _BLOCK:
            self.parts.append("\n")
        elif tag in ("td", "th"):
            self.parts.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skipping = max(0, self._skipping - 1)
        elif tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def html_fragment_text(html: str) -> str:
    """Visible text of ``html`` (tags, comments and images gone; block elements on lines of their own)."""
    collector = _Collector()
    collector.feed(html)
    collector.close()
    lines = ("".join(collector.parts)).splitlines()
    return "\n".join(" ".join(line.split()).strip(" |") for line in lines if line.strip(" |\t"))
