"""docpages: docparse's generated documents (suites/docparse/utils.py, the same generator and scoring), given to
the model as a rendered page image (``evalgate.suites.pages.render_page``) instead of text. The prompt names only
the fields to extract: every document of one kind has the same prompt, so items of a kind differ only in their
image."""

from __future__ import annotations

import importlib.util

import datasets

from evalgate.suites.files import SUITES_DIR
from evalgate.suites.pages import render_page

_spec = importlib.util.spec_from_file_location("_docparse_utils", SUITES_DIR / "docparse" / "utils.py")
docparse = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docparse)


def load_data(seed: int = 20251206, n_test: int = 8, **_: object) -> dict[str, datasets.Dataset]:
    """lm-eval ``custom_dataset`` hook: ``n_test`` docparse items from ``seed``, each with its page image."""
    items = docparse.make_items(int(seed), int(n_test), "docpage")
    for item in items:
        item["image"] = render_page(item.pop("document").split("\n"))
    return {"test": datasets.Dataset.from_list(items)}


def doc_to_text(doc: dict) -> str:
    """``<image>`` (lm-eval's image placeholder), then the fields to extract."""
    return f"<image>{docparse.INSTRUCTION}\nFields: {', '.join(doc['fields'])}\nJSON:"


process_results = docparse.process_results
