"""docparse_cord (opt-in, needs the Hugging Face hub): key fields of real receipts, CORD v2.

Data: ``naver-clova-ix/cord-v2`` on the Hugging Face hub (CC BY 4.0; Park et al., 2019, "CORD: A Consolidated
Receipt Dataset for Post-OCR Parsing"), 800/100/100 Indonesian shop receipts as images plus a ``ground_truth``
JSON string: ``valid_line`` (the receipt's words with their boxes, ``quad`` x1..y4, grouped by ``row_id``) and
``gt_parse`` (the parsed fields). A text-only model reads the receipt's words, not the image: :func:`receipt_text`
puts them back into lines (one per ``row_id``, top to bottom, words left to right), the OCR view that SROIE's
text track gives too. The task asks for the money fields the receipt has among :data:`FIELDS` (``total_price``
always) as one line of JSON, as ``docparse_fields`` does, and scores field-level exact match (whitespace
collapsed): ``field_acc`` is the share of the receipt's fields exactly right, ``all_fields`` 1 iff all are.
Donut's CORD evaluation (``JSONParseEvaluator.cal_f1``) counts exact (field, value) pairs the same way, over the
corpus rather than per receipt.
"""

from __future__ import annotations

import json

import datasets

from evalgate.suites.taskcode import first_json_object

# (gt_parse section, key) of the fields asked for, in this order, when the receipt has them.
FIELDS = (("total", "total_price"), ("sub_total", "subtotal_price"), ("sub_total", "tax_price"),
          ("total", "cashprice"), ("total", "changeprice"))


def _words(valid_line: list[dict]) -> list[tuple[object, float, float, str]]:
    out = []
    for line_no, line in enumerate(valid_line):
        for w in line.get("words", []):
            q = w.get("quad", {})
            row = w.get("row_id", f"line-{line_no}")
            out.append((row, float(q.get("y1", 0)), float(q.get("x1", 0)), str(w.get("text", ""))))
    return out


def receipt_text(gt: dict) -> str:
    """The receipt's words as text lines: grouped by ``row_id`` (else by ``valid_line`` entry), rows ordered by
    their top edge, words by their left edge, joined by single spaces."""
    rows: dict[object, list[tuple[float, float, str]]] = {}
    for row, y, x, text in _words(gt.get("valid_line", [])):
        rows.setdefault(row, []).append((y, x, text))
    ordered = sorted(rows.values(), key=lambda ws: min(y for y, _, _ in ws))
    return "\n".join(" ".join(t for _, _, t in sorted(ws, key=lambda w: w[1]) if t.strip()) for ws in ordered)


def gold_fields(gt: dict) -> dict[str, str]:
    """The :data:`FIELDS` present in ``gt_parse`` (string values only), field -> value, in :data:`FIELDS` order."""
    parse = gt.get("gt_parse", {})
    out = {}
    for section, key in FIELDS:
        value = parse.get(section, {}).get(key) if isinstance(parse.get(section), dict) else None
        if isinstance(value, str) and value.strip():
            out[key] = value
    return out


def _block(document: str, fields: list[str]) -> str:
    return f"Receipt:\n{document}\nFields: {', '.join(fields)}\nJSON:"


def process_docs(dataset: datasets.Dataset) -> datasets.Dataset:
    """lm-eval ``process_docs`` hook: CORD rows (``ground_truth`` JSON; the image column is dropped unread) ->
    items with id, doc_group, document, fields, target (gold one-line JSON), prompt_block; receipts without a
    ``total_price`` are left out."""
    rows = dataset.remove_columns([c for c in dataset.column_names if c != "ground_truth"])
    items = []
    for i, row in enumerate(rows):
        gt = json.loads(row["ground_truth"])
        gold = gold_fields(gt)
        if "total_price" not in gold:
            continue
        doc_id = f"cord-{gt.get('meta', {}).get('image_id', i)}"
        document = receipt_text(gt)
        items.append({"id": doc_id, "doc_group": doc_id, "document": document, "fields": list(gold),
                      "target": json.dumps(gold, ensure_ascii=False), "prompt_block": _block(document, list(gold))})
    return datasets.Dataset.from_list(items)


def _norm(value: object) -> str:
    return " ".join(str(value).split())


def parse_output(text: str) -> dict[str, str]:
    """field -> value of the first JSON object in ``text`` (``{}`` if none decodes)."""
    obj = first_json_object(text) or {}
    return {str(k): ("" if v is None else str(v)) for k, v in obj.items()}


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """Per-item metrics of ``results[0]``: field_acc (share of the receipt's fields exactly right, whitespace
    collapsed) and all_fields (1.0 iff every one is)."""
    pred = parse_output(results[0] if results else "")
    gold = json.loads(doc["target"])
    hits = sum(1 for k, v in gold.items() if k in pred and _norm(pred[k]) == _norm(v))
    return {"field_acc": hits / len(gold), "all_fields": float(hits == len(gold))}
