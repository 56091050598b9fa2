"""Real documents of each format, written by the libraries people write them with (for the tests).

fpdf2 writes the PDF (with an outline), python-docx the Word file; the HTML page is a page as a
site generator leaves it (navigation, scripts, a footer). Broken ones are what a user meets: a
truncated PDF, a .docx that is not a zip, an HTML file that is binary.
"""

from __future__ import annotations

from pathlib import Path

PDF_FACT = "The Varrow Bridge was built in 1871 by the engineer Odile Marsh."


def write_pdf(path: Path, pages: list[tuple[str, str]], title: str = "Varrow Bridge Report") -> Path:
    """A PDF with one page per ``(section, text)``, each section a bookmark of the outline."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title(title)
    pdf.set_font("Helvetica", size=12)
    for section, text in pages:
        pdf.add_page()
        pdf.start_section(section)
        pdf.multi_cell(0, 8, text)
    pdf.output(str(path))
    return path


def write_docx(path: Path) -> Path:
    """A Word file with a title, headings, a bulleted list and a table."""
    import docx

    document = docx.Document()
    document.add_paragraph("Quillon Observatory", style="Title")
    document.add_heading("History", level=1)
    document.add_paragraph("The Quillon Observatory was founded in 1902 on Mount Ferrow.")
    document.add_paragraph("first telescope in 1903", style="List Bullet")
    document.add_paragraph("second dome in 1911", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    for (row, col), text in {(0, 0): "telescope", (0, 1): "aperture", (1, 0): "Great", (1, 1): "1 m"}.items():
        table.cell(row, col).text = text
    document.add_heading("Staff", level=2)
    document.add_paragraph("The astronomer Ilse Marrow directs it.")
    document.save(str(path))
    return path


HTML_PAGE = """<!doctype html>
<html><head><title>Zorblat festival</title><style>p { color: red }</style><script>var tracker = 1;</script></head>
<body><nav><a href="/">Home</a> | <a href="/about">About us</a></nav>
<main><h1>Zorblat festival</h1>
<p>People race <a href="https://example.org/snails">giant snails</a> at the <b>Zorblat</b> festival.
<img src="https://img.shields.io/badge.svg" alt="badge"></p>
<!-- editors: keep this page short -->
<h2>Schedule</h2>
<table><tr><th>day</th><th>event</th></tr><tr><td>Monday</td><td>snail race</td></tr></table>
<pre><code>race --fast
  --snails 12</code></pre>
</main><footer>Copyright Zorblat town council</footer></body></html>
"""


def write_html(path: Path) -> Path:
    path.write_text(HTML_PAGE, encoding="utf-8")
    return path


def write_broken(root: Path) -> dict[str, Path]:
    """One broken file per format: a truncated PDF, a .docx that is not a zip, binary HTML."""
    root.mkdir(parents=True, exist_ok=True)
    pdf = write_pdf(root / "whole.pdf", [("One", "text")]).read_bytes()
    (root / "whole.pdf").unlink()
    broken = {"truncated.pdf": pdf[:200], "notzip.docx": b"this is not a zip archive",
              "binary.html": b"\x00\x01\x02<html>\x00"}
    for name, data in broken.items():
        (root / name).write_bytes(data)
    return {name: root / name for name in broken}
