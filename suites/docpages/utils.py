"""docpages_fields: docparse_fields' generated documents, read from pixels.

The documents, gold fields and scorer are docparse's (``suites/docparse/utils.py``, loaded from the suite folder
beside this one; the YAML's ``uses_suites`` makes its files part of this suite's content hash). Each document's
text lines are rendered as one page image by ``evalgate.suites.pages.render_document`` (columns where the text
version has them), and the prompt is lm-eval's ``<image>`` placeholder, the instruction and the fields to extract:
no document text, so every value must be read from the page. Items of one kind share one prompt and differ only in
their page. Everything comes from ``random.Random(seed)``: the same seed gives the same documents, pages and ids
(``docparse-0000``, ...: docparse_fields' ids for the same documents).
"""

from __future__ import annotations

import datasets

from evalgate.suites.pages import render_document
from evalgate.suites.taskcode import suite_module

docparse = suite_module(__file__, "docparse", "utils")


def load_data(seed: int = 20240611, n_test: int = 200, width: int = 480, font_size: int = 16,
              **_: object) -> dict[str, datasets.Dataset]:
    """lm-eval ``custom_dataset`` hook: ``{"test": Dataset}`` of ``n_test`` docparse items from ``seed``, each with
    ``image`` (its page, an RGB ``PIL.Image`` at least ``width`` pixels wide, text at ``font_size``) instead of
    ``document`` (its text)."""
    items = docparse.make_items(int(seed), int(n_test), "docparse")
    for item in items:
        item["image"] = render_document(item.pop("document").split("\n"), width=int(width), font_size=int(font_size))
    return {"test": datasets.Dataset.from_list(items)}


def doc_to_text(doc: dict) -> str:
    """``<image>`` (lm-eval's image placeholder, where the page goes), the instruction, the fields to extract."""
    return f"<image>{docparse.INSTRUCTION}\nFields: {', '.join(doc['fields'])}\nJSON:"


process_results = docparse.process_results
