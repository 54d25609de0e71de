"""Page images of text documents, for suites whose items are read from pixels (a vision-language model's document
parsing).

:func:`render_document` draws a document's lines in black on a white page with PIL's built-in font
(``ImageFont.load_default``), laid out as its text version reads: each line's columns (text separated by two or more
spaces, as receipts and tables pad them) start where they start in the text, so a table's columns line up although
the font is proportional, and the page widens to fit its longest line (nothing is clipped). The same lines give the
same pixels (for one Pillow and FreeType release), so a suite's image items are as reproducible as its text. The
shipped page-image tier (``suites/docpages``) renders with it; :func:`document_layout` says where every piece of
text goes, so a test can check that a page holds exactly the text version's lines (without OCR).

A change to what is drawn changes stored results: bump ``results.store.RESULTS_VERSION`` with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MARGIN = 12  # pixels around the text
LINE_SPACING = 4  # pixels between lines
_COLUMN = re.compile(r"\S+(?: \S+)*")  # a column of a line: text whose words are one space apart


@dataclass(frozen=True)
class Span:
    """One piece of text :func:`render_document` draws.

    Attributes:
        line: index of the document line it comes from (0-based).
        column: the character offset in that line where it starts.
        text: the characters drawn (``line[column:column + len(text)]``; no leading or trailing space).
        x, y: its top-left anchor on the page, in pixels.
    """

    line: int
    column: int
    text: str
    x: int
    y: int


def document_layout(lines: list[str], *, font_size: int = 16) -> list[Span]:
    """Where :func:`render_document` draws each piece of ``lines``, in line order then left to right.

    A line is split into columns, runs of text separated by two or more spaces; a column starting at character
    ``c`` goes at ``x = MARGIN + c * advance`` (``advance``: the font's width of ``"0"``, so digit columns padded
    with spaces line up), moved right only where the previous column would otherwise run into it (at least two
    spaces' width apart). Line ``i`` is at ``y = MARGIN + i * (font_size + LINE_SPACING)``. Every non-space
    character of every line is in exactly one span. Pixels and points as PIL measures them for
    ``ImageFont.load_default(size=font_size)``.
    """
    from PIL import ImageFont

    font = ImageFont.load_default(size=font_size)
    advance = font.getlength("0")
    gap = 2 * font.getlength(" ")
    step = font_size + LINE_SPACING
    spans = []
    for i, line in enumerate(lines):
        end = None  # right edge of the previous column on this line
        for m in _COLUMN.finditer(line):
            x = MARGIN + m.start() * advance
            if end is not None:
                x = max(x, end + gap)
            x = round(x)
            spans.append(Span(i, m.start(), m.group(), x, MARGIN + i * step))
            end = x + font.getlength(m.group())
    return spans


def render_document(lines: list[str], *, width: int = 480, font_size: int = 16) -> Any:
    """An RGB ``PIL.Image`` of a document's ``lines``, laid out by :func:`document_layout` (columns where the text
    version has them): at least ``width`` pixels wide, wider when a line needs it (its right margin ``MARGIN``),
    and as tall as the text needs (at least square), in PIL's built-in font at ``font_size``."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=font_size)
    spans = document_layout(lines, font_size=font_size)
    right = max([width, *(round(s.x + font.getlength(s.text)) + MARGIN for s in spans)])
    height = max(right, 2 * MARGIN + (font_size + LINE_SPACING) * len(lines))
    page = Image.new("RGB", (right, height), (255, 255, 255))
    draw = ImageDraw.Draw(page)
    for s in spans:
        draw.text((s.x, s.y), s.text, fill=(0, 0, 0), font=font)
    return page


THUMBNAIL_SIDE = 96  # pixels, the longer side of a report thumbnail


def thumbnail_data_uri(image: Any, side: int = THUMBNAIL_SIDE) -> str:
    """A small copy of ``image`` (RGB, longer side at most ``side`` pixels, aspect kept) as a PNG ``data:`` URI,
    for the report to show beside the item (``data:image/png;base64,...``; a few KB)."""
    import base64
    import io

    small = image.convert("RGB")
    small.thumbnail((side, side))
    buf = io.BytesIO()
    small.save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
