"""Clean text of one file: its title, its text, and where each section (and page) starts.

Every format reader builds a :class:`CleanText` through a :class:`TextBuilder`: blocks of plain
text joined by blank lines, headings kept as the section path in force from an offset on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Separator between blocks (paragraphs, list items, code blocks, table rows of one table stay together).
BLOCK_SEP = "\n\n"
#: Shown between heading levels in the ``section`` metadata of a chunk.
SECTION_SEP = " > "


@dataclass
class CleanText:
    """A file as clean text: ``marks`` are ``(offset, {key: value})`` changes of metadata (section, page)."""

    text: str
    title: str | None = None
    marks: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    #: Offsets where a heading line starts (a piece that is only a heading joins the next one).
    headings: set[int] = field(default_factory=set)

    def metadata_at(self, offset: int) -> dict[str, Any]:
        """The metadata in force at ``offset`` (the marks up to it, later ones winning)."""
        out: dict[str, Any] = {}
        for start, values in self.marks:
            if start > offset:
                break
            out.update(values)
        return {k: v for k, v in out.items() if v not in (None, "")}

    def segments(self) -> list[tuple[str, dict[str, Any]]]:
        """The text cut where a mark (a heading, a page) starts, each piece with the metadata in force.

        A piece that is only a heading line is joined to the next one, so no chunk is a bare heading.
        """
        starts = sorted({0, *(start for start, _ in self.marks if 0 < start < len(self.text))})
        pieces: list[tuple[str, dict[str, Any]]] = []
        carry = ""
        for start, end in zip(starts, [*starts[1:], len(self.text)], strict=True):
            piece = self.text[start:end].strip("\n")
            if not piece.strip():
                continue
            if BLOCK_SEP not in piece and end < len(self.text) and start in self.headings:
                carry += piece + BLOCK_SEP
                continue
            pieces.append((carry + piece, self.metadata_at(start)))
            carry = ""
        if carry.strip():
            pieces.append((carry.strip("\n"), self.metadata_at(starts[-1])))
        return pieces


class TextBuilder:
    """Collects blocks and headings in reading order and builds a :class:`CleanText`.

    The first level-1 heading met before any other heading becomes the title (not repeated in the text);
    every other heading is a block of its own and sets the ``section`` path (``A > B``) from there on.
    """

    def __init__(self) -> None:
        self._blocks: list[str] = []
        self._length = 0
        self._marks: list[tuple[int, dict[str, Any]]] = []
        self._headings: set[int] = set()
        self._path: list[tuple[int, str]] = []
        self.title: str | None = None

    def _offset(self) -> int:
        return self._length + (len(BLOCK_SEP) if self._blocks else 0)

    def mark(self, **values: Any) -> None:
        """Metadata in force from the next block on (e.g. ``page=3``)."""
        self._marks.append((self._offset(), values))

    def heading(self, level: int, text: str) -> None:
        text = " ".join(text.split())
        if not text:
            return
        if level == 1 and self.title is None and not self._path:
            self.title = text
            return
        self._path = [(lvl, t) for lvl, t in self._path if lvl < level] + [(level, text)]
        self.mark(section=SECTION_SEP.join(t for _, t in self._path))
        self._headings.add(self._offset())
        self.block(text)

    def block(self, text: str, *, verbatim: bool = False) -> None:
        """One block of text; ``verbatim`` keeps inner whitespace (code), else blank runs are tidied."""
        text = text.strip("\n") if verbatim else tidy(text)
        if not text.strip():
            return
        if self._blocks:
            self._length += len(BLOCK_SEP)
        self._blocks.append(text)
        self._length += len(text)

    def build(self, title: str | None = None) -> CleanText:
        """The clean text; ``title`` (e.g. from front matter or document properties) wins over a heading."""
        return CleanText(BLOCK_SEP.join(self._blocks), title or self.title, list(self._marks), set(self._headings))


def tidy(text: str) -> str:
    """Strip each line's trailing spaces, squeeze runs of spaces and of blank lines."""
    lines = [" ".join(line.split()) if line.strip() else "" for line in text.splitlines()]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()
