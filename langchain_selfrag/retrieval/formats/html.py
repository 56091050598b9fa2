"""HTML to clean text: Beautiful Soup (LangChain's ``BSHTMLLoader``) finds the content, markdownify
renders it as markdown, and the markdown renderer makes it clean text with sections.

Scripts, styles, navigation, footers, forms and asides go; ``<main>`` (else ``<body>``) is read;
links keep their text, images go, tables become ``a | b`` rows, ``<pre>`` stays verbatim; the
title is ``<title>``, else the first ``<h1>``.
"""

from __future__ import annotations

import dataclasses

from .markdown import render_markdown
from .text import CleanText

#: Elements that hold no content of the page.
BOILERPLATE = ["script", "style", "noscript", "template", "nav", "footer", "aside", "form", "svg", "iframe",
               "button", "head"]


def render_html(html: str) -> CleanText:
    """Clean text of an HTML page."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(html, "html.parser")
    title = " ".join(soup.title.get_text().split()) if soup.title is not None else ""
    for tag in soup.find_all(BOILERPLATE):
        tag.decompose()
    content = soup.find("main") or soup.find("body") or soup
    markdown = MarkdownConverter(heading_style="ATX", strip=["a", "img"], bullets="-").convert_soup(content)
    clean = render_markdown(markdown)
    return dataclasses.replace(clean, title=title or clean.title)
