"""The shipped page-image tier (suites/docpages): docparse_fields' documents rendered as page images.

What is checked without OCR: the page tier serves the text tier's documents (same ids, fields and gold answers,
from docparse's own generator), each page is drawn from exactly the text version's lines (the layout's pieces put
back at their columns give every line back), every piece is inked where the layout says and nothing elsewhere,
columns line up as in the text, and the same document gives the same PNG bytes."""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from evalgate.suites.discovery import SUITES_DIR, load_suite
from evalgate.suites.pages import MARGIN, document_layout, render_document
from evalgate.suites.taskcode import load_module

DOCPARSE = load_module(SUITES_DIR / "docparse" / "utils.py")
PAGES = load_module(SUITES_DIR / "docpages" / "utils.py")
N = 24  # documents checked: six of each kind


def _png_sha(im: Image.Image) -> str:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return hashlib.sha256(buf.getvalue()).hexdigest()


@pytest.fixture(scope="module")
def tiers() -> tuple[list[dict], list[dict]]:
    """The first N items of the text tier (docparse_fields' own loader) and of the page tier, as the shipped YAMLs
    configure them (same seed)."""
    import yaml

    from evalgate.inputs.yamlio import Loader

    def kwargs(path):
        return yaml.load(path.read_text(), Loader=Loader)["dataset_kwargs"]  # noqa: S506 (a SafeLoader)

    text_kw, page_kw = kwargs(SUITES_DIR / "docparse" / "docparse_fields.yaml"), kwargs(
        SUITES_DIR / "docpages" / "docpages_fields.yaml")
    assert page_kw["seed"] == text_kw["seed"]  # the same documents
    text = DOCPARSE.load_data(seed=text_kw["seed"], n_test=N)["test"].to_list()
    pages = PAGES.load_data(**{**page_kw, "n_test": N})["test"]
    return text, [pages[i] for i in range(N)]


def test_the_page_tier_serves_the_text_tiers_documents_and_answers(tiers) -> None:
    text, pages = tiers
    for t, p in zip(text, pages):
        assert {k: v for k, v in t.items() if k != "document"} == {k: v for k, v in p.items() if k != "image"}
        assert "document" not in p  # the text is not in the doc: only the page carries it
    assert [t["kind"] for t in text[:4]] == ["invoice", "receipt", "form", "table"]
    # the prompt names the fields, never a value: every value must come from the page
    for t, p in zip(text, pages):
        prompt = PAGES.doc_to_text(p)
        assert prompt == (f"<image>{DOCPARSE.INSTRUCTION}\nFields: {', '.join(t['fields'])}\nJSON:")
        gold = json.loads(t["target"])
        assert not any(v in prompt for v in gold.values())


def test_each_page_is_drawn_from_exactly_the_text_versions_lines(tiers) -> None:
    text, pages = tiers
    font = ImageFont.load_default(size=16)
    for t, p in zip(text, pages):
        lines = t["document"].split("\n")
        spans = document_layout(lines, font_size=16)
        # the pieces, put back at their columns, give every line of the text version back
        rebuilt = [[" "] * len(line) for line in lines]
        for s in spans:
            assert lines[s.line][s.column:s.column + len(s.text)] == s.text
            rebuilt[s.line][s.column:s.column + len(s.text)] = s.text
        assert ["".join(r) for r in rebuilt] == lines
        # every text field's gold value is on the page as written (a vendor may be upper-cased in the document)
        gold = json.loads(t["target"])
        drawn = " ".join(s.text for s in spans).casefold()
        for field, kind in zip(t["fields"], t["types"]):
            if kind == "text":
                assert gold[field].casefold() in drawn, (t["id"], field)
        # the page's pixels: ink inside every piece's box, none outside them
        page = p["image"]
        again = render_document(lines, width=480, font_size=16)
        assert (page.mode, page.size, page.tobytes()) == ("RGB", again.size, again.tobytes())
        ink = np.asarray(page.convert("L")) < 128
        boxes = np.zeros_like(ink)
        draw = ImageDraw.Draw(Image.new("RGB", page.size))
        for s in spans:
            x0, y0, x1, y1 = draw.textbbox((s.x, s.y), s.text, font=font)
            assert 0 <= x0 and x1 <= page.width - MARGIN and 0 <= y0 and y1 <= page.height, (t["id"], s)
            assert ink[y0:y1, x0:x1].any(), (t["id"], s.text)
            boxes[y0:y1, x0:x1] = True
        assert not (ink & ~boxes).any()
        assert np.asarray(page)[~boxes].min() == 255  # outside the text: white, untouched


def test_columns_start_where_the_text_puts_them() -> None:
    """Receipt-style lines: the prices are right-aligned in the text by padding, so on the page their right edges
    meet (the font's digits share one width: the text's column arithmetic carries over), and a long first column
    never runs into the next (at least two spaces' width apart)."""
    font = ImageFont.load_default(size=16)
    lines = ["Paper          9.38", "Batteries     12.74", "WWWWWWWWWW  1.00", "Thank you!"]
    spans = document_layout(lines, font_size=16)
    assert [(s.line, s.column, s.text) for s in spans] == [
        (0, 0, "Paper"), (0, 15, "9.38"), (1, 0, "Batteries"), (1, 14, "12.74"), (2, 0, "WWWWWWWWWW"),
        (2, 12, "1.00"), (3, 0, "Thank you!")]
    advance = font.getlength("0")
    assert spans[1].x == round(MARGIN + 15 * advance) and spans[3].x == round(MARGIN + 14 * advance)
    right = [s.x + font.getlength(s.text) for s in (spans[1], spans[3])]
    assert right[0] == right[1]
    wide_end = spans[4].x + font.getlength(spans[4].text)
    assert MARGIN + 12 * advance < wide_end + 2 * font.getlength(" ")  # the column's own place would collide
    assert spans[5].x == round(wide_end + 2 * font.getlength(" "))
    assert [s.y for s in spans] == [MARGIN, MARGIN, MARGIN + 20, MARGIN + 20, MARGIN + 40, MARGIN + 40, MARGIN + 60]


def test_a_line_wider_than_the_page_widens_it() -> None:
    line = "x" * 80
    page = render_document([line], width=100, font_size=16)
    font = ImageFont.load_default(size=16)
    assert page.width == round(MARGIN + font.getlength(line)) + MARGIN and page.height == page.width


def test_the_same_document_gives_the_same_bytes() -> None:
    first = PAGES.load_data(n_test=8)["test"]
    again = PAGES.load_data(n_test=8)["test"]
    hashes = [_png_sha(d["image"]) for d in first]
    assert hashes == [_png_sha(d["image"]) for d in again]
    assert len(set(hashes)) == 8  # eight documents, eight pages
    lines = DOCPARSE.make_items(20240611, 1, "docparse")[0]["document"].split("\n")
    assert _png_sha(render_document(lines)) == _png_sha(render_document(list(lines))) == hashes[0]


def test_the_shipped_suite_is_an_image_suite_keyed_by_docparses_files_too() -> None:
    suite = load_suite("docpages", SUITES_DIR)
    (spec,) = suite.specs
    assert (suite.modality, spec.modality, suite.uses) == ("image", "image", ("docparse",))
    assert spec.metric == "field_acc" and spec.config["doc_to_image"] == ["image"]
    assert load_suite("docparse", SUITES_DIR).modality == "text"
