"""Page images of text documents, for suites whose items are read from pixels (a vision-language model's document
parsing): ``render_page`` draws a document's lines in black on a white page with PIL's built-in font, so the same
lines give the same pixels (for one Pillow release) and a suite's image items are as reproducible as its text."""

from __future__ import annotations

from typing import Any

MARGIN = 12  # pixels around the text
LINE_SPACING = 4  # pixels between lines


def render_page(lines: list[str], *, width: int = 320, font_size: int = 12) -> Any:
    """An RGB ``PIL.Image`` of ``lines`` drawn top to bottom, left-aligned, ``width`` pixels wide and as tall as the
    text needs (at least square), in PIL's built-in font at ``font_size`` (``ImageFont.load_default``)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=font_size)
    step = font_size + LINE_SPACING
    height = max(width, 2 * MARGIN + step * len(lines))
    page = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(page)
    for i, line in enumerate(lines):
        draw.text((MARGIN, MARGIN + i * step), line, fill=(0, 0, 0), font=font)
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
