"""docparse_fields: pull 3-4 named fields out of a generated plain-text business document.

Documents are invoices, receipts, registration forms and small shipment tables with varied
labels, layouts, field order, date formats and noise lines (addresses, phone numbers, subtotals,
footers). The model answers with a one-line JSON object; ``process_results`` scores it field by
field. Everything is generated from ``random.Random(seed)``: the same seed gives the same items.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re

import datasets

from evalgate.suites.taskcode import first_json_object

KINDS = ("invoice", "receipt", "form", "table")
FIELDS = {  # kind -> (field, type) in the order the prompt asks for them
    "invoice": (("vendor", "text"), ("invoice_no", "text"), ("date", "date"), ("total", "number")),
    "receipt": (("store", "text"), ("date", "date"), ("total", "number")),
    "form": (("name", "text"), ("birth_date", "date"), ("member_id", "text"), ("city", "text")),
    "table": (("order_id", "text"), ("ship_date", "date"), ("carrier", "text"), ("weight_kg", "number")),
}
_CO1 = ("Acme", "Blue Fox", "Northwind", "Cedar", "Orbit", "Maple", "Summit", "Harbor", "Pioneer", "Silverline")
_CO2 = ("Supply", "Traders", "Foods", "Tools", "Labs", "Print", "Logistics", "Electric", "Textiles", "Media")
_SUF = ("Ltd", "Inc.", "GmbH", "Co.", "LLC")
_FIRST = ("Anna", "Ben", "Carla", "David", "Elif", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Keiko", "Luis")
_LAST = ("Novak", "Okafor", "Schmidt", "Tanaka", "Silva", "Kowalski", "Moreau", "Haddad", "Lindqvist", "Reyes")
_CITIES = ("Lyon", "Austin", "Porto", "Leeds", "Graz", "Osaka", "Denver", "Gdansk", "Turin", "Bergen")
_CARRIERS = ("DHL", "UPS", "FedEx", "GLS", "DPD", "TNT")
_GOODS = ("Coffee", "Bread", "Milk", "Paper", "Batteries", "Apples", "Soap", "Tea", "Pens", "Rice")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")
_NOISE = ("Thank you for your business!", "Page 1 of 1", "Questions? Call +1 555 0134",
          "Please keep this copy.", "Reg. office: 12 Mill Lane", "VAT ID: GB 204 5519 31")

INSTRUCTION = "Extract the requested fields from each document as one line of JSON."


def _date(rng: random.Random, lo: int, hi: int) -> dt.date:
    return dt.date(lo, 1, 1) + dt.timedelta(days=rng.randrange((dt.date(hi, 12, 31) - dt.date(lo, 1, 1)).days))


def _fmt_date(rng: random.Random, d: dt.date) -> str:
    """``d`` in one of five styles; the numeric mm/dd and dd.mm styles only where day > 12, so
    that no rendered date is ambiguous (ISO is used instead)."""
    style = rng.randrange(5)
    if style in (1, 4) and d.day <= 12:
        style = 0
    if style == 0:
        return d.isoformat()
    if style == 1:
        return f"{d.month:02d}/{d.day:02d}/{d.year}"
    if style == 2:
        return f"{d.day} {_MONTHS[d.month - 1][:3]} {d.year}"
    if style == 3:
        return f"{_MONTHS[d.month - 1]} {d.day}, {d.year}"
    return f"{d.day:02d}.{d.month:02d}.{d.year}"


def _money_format(rng: random.Random) -> str:
    return rng.choice(("${:,.2f}", "{:.2f} USD", "USD {:,.2f}", "{:,.2f}"))


def _company(rng: random.Random) -> str:
    return f"{rng.choice(_CO1)} {rng.choice(_CO2)} {rng.choice(_SUF)}"


def _make_doc(rng: random.Random, kind: str) -> tuple[list[str], dict[str, str]]:
    """One document of ``kind``: (text lines, gold field -> canonical string)."""
    noise = rng.sample(_NOISE, rng.randrange(0, 2))
    if kind == "invoice":
        vendor = _company(rng)
        no = f"{rng.choice(('INV', 'IN', 'A'))}-{rng.randrange(1000, 99999)}"
        day = _date(rng, 2019, 2025)
        sub = round(rng.uniform(20, 5000), 2)
        tax = round(sub * rng.choice((0.05, 0.1, 0.2)), 2)
        total = round(sub + tax, 2)
        fmt = _money_format(rng)
        head = [f"{rng.choice(('Invoice #', 'Invoice No.', 'Invoice number:'))} {no}",
                f"{rng.choice(('Date:', 'Issued:', 'Invoice date:'))} {_fmt_date(rng, day)}"]
        rng.shuffle(head)
        lines = [vendor.upper() if rng.random() < 0.3 else vendor, *head,
                 f"Subtotal: {fmt.format(sub)}", f"Tax: {fmt.format(tax)}",
                 f"{rng.choice(('Total:', 'Amount due:', 'Total due:', 'Grand total:'))} {fmt.format(total)}"]
        gold = {"vendor": vendor, "invoice_no": no, "date": day.isoformat(), "total": f"{total:.2f}"}
    elif kind == "receipt":
        store = f"{rng.choice(_CO1)} {rng.choice(('Market', 'Grocer', 'Cafe', 'Pharmacy'))}"
        day = _date(rng, 2019, 2025)
        items = [(g, round(rng.uniform(0.5, 30), 2)) for g in rng.sample(_GOODS, rng.randrange(2, 4))]
        total = round(sum(p for _, p in items), 2)
        lines = [store, _fmt_date(rng, day) + f" {rng.randrange(7, 22):02d}:{rng.randrange(60):02d}"]
        lines += [f"{g:<10} {p:>7.2f}" for g, p in items]
        lines += [f"{rng.choice(('TOTAL', 'Total', 'Sum'))} {total:>7.2f}",
                  f"Cash {total + rng.choice((0, 5, 10, 20)):>7.2f}"]
        gold = {"store": store, "date": day.isoformat(), "total": f"{total:.2f}"}
    elif kind == "form":
        name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
        born = _date(rng, 1950, 2004)
        mid = f"M{rng.randrange(10000, 99999)}"
        city = rng.choice(_CITIES)
        body = [f"{rng.choice(('Full name', 'Name'))}: {name}",
                f"{rng.choice(('Date of birth', 'Born', 'DOB'))}: {_fmt_date(rng, born)}",
                f"{rng.choice(('Member ID', 'Membership no.'))}: {mid}",
                f"{rng.choice(('City', 'Town'))}: {city}"]
        rng.shuffle(body)
        lines = [rng.choice(("MEMBERSHIP FORM", "Registration form", "New member")), *body,
                 f"Signed: {_fmt_date(rng, _date(rng, 2020, 2025))}"]
        gold = {"name": name, "birth_date": born.isoformat(), "member_id": mid, "city": city}
    else:
        oid = f"SO-{rng.randrange(10000, 99999)}"
        day = _date(rng, 2019, 2025)
        carrier = rng.choice(_CARRIERS)
        weight = round(rng.uniform(0.5, 80), 1)
        rows = [("Order", oid), ("Shipped", _fmt_date(rng, day)), ("Carrier", carrier),
                ("Weight", f"{weight} kg"), ("Parcels", str(rng.randrange(1, 6)))]
        rng.shuffle(rows)
        sep = rng.choice((" | ", "  ", " = "))
        lines = ["Shipment details"] + [f"{k:<8}{sep}{v}" for k, v in rows]
        gold = {"order_id": oid, "ship_date": day.isoformat(), "carrier": carrier, "weight_kg": f"{weight:.2f}"}
    for n in noise:
        lines.insert(rng.randrange(1, len(lines) + 1), n)
    return lines, gold


def _answer(gold: dict[str, str], kind: str) -> str:
    return json.dumps({k: gold[k] for k, _ in FIELDS[kind]})


def _block(lines: list[str], kind: str) -> str:
    return "Document:\n" + "\n".join(lines) + f"\nFields: {', '.join(k for k, _ in FIELDS[kind])}\nJSON:"


def make_items(seed: int, n: int, prefix: str) -> list[dict]:
    """``n`` items from ``random.Random(seed)``, kinds in rotation; ids ``f"{prefix}-{i:04d}"``.

    Each item: id, doc_group (= id: one question per document), kind, document (text),
    fields and types (lists of str, same order), target (the gold one-line JSON).
    """
    rng = random.Random(seed)
    items = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        lines, gold = _make_doc(rng, kind)
        items.append({"id": f"{prefix}-{i:04d}", "doc_group": f"{prefix}-{i:04d}", "kind": kind,
                      "document": "\n".join(lines), "fields": [k for k, _ in FIELDS[kind]],
                      "types": [t for _, t in FIELDS[kind]], "target": _answer(gold, kind)})
    return items


FEWSHOT_SEED = 7_000_001  # disjoint from the test seed; tests check no document is shared
FEWSHOT = make_items(FEWSHOT_SEED, 8, "docparse-shot")


def doc_to_text(doc: dict) -> str:
    """Prompt: instruction, two worked examples (another kind, then the same kind), the document."""
    k = KINDS.index(doc["kind"])
    shots = [FEWSHOT[(k + 1) % 4], FEWSHOT[k]]
    parts = [INSTRUCTION] + [_block(s["document"].split("\n"), s["kind"]) + " " + s["target"] for s in shots]
    return "\n\n".join(parts + [_block(doc["document"].split("\n"), doc["kind"])])


def load_data(seed: int = 20240611, n_test: int = 200, **_: object) -> dict[str, datasets.Dataset]:
    """lm-eval ``custom_dataset`` hook: ``{"test": Dataset}`` of ``n_test`` items from ``seed``."""
    return {"test": datasets.Dataset.from_list(make_items(int(seed), int(n_test), "docparse"))}


# ---------------------------------------------------------------- scoring
_DATE_FORMATS = ("%Y-%m-%d", "%Y/%m/%d", "%m/%d/%Y", "%d.%m.%Y", "%d %b %Y", "%d %B %Y",
                 "%b %d, %Y", "%B %d, %Y", "%b %d %Y", "%B %d %Y", "%Y%m%d")
_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def _norm_text(v: object) -> str:
    return " ".join(str(v).split()).casefold()


def normalize(value: object, kind: str) -> str:
    """Canonical form of a field value: text casefolded with whitespace collapsed; a date as
    ISO ``YYYY-MM-DD`` when any known format parses; a number with two decimals."""
    text = _norm_text(value).strip(" \"'")
    if kind == "number":
        m = _NUM.search(text.replace(" ", ""))
        if m:
            return f"{float(m.group().replace(',', '')):.2f}"
    elif kind == "date":
        for fmt in _DATE_FORMATS:
            try:
                return dt.datetime.strptime(text.title(), fmt).date().isoformat()
            except ValueError:
                continue
    return text


def _key(k: str) -> str:
    return re.sub(r"[\s\-]+", "_", k.strip().strip("\"'").casefold())


def parse_output(text: str) -> tuple[dict[str, str], bool]:
    """(field -> raw value, json_valid). The first ``{...}`` that ``json`` decodes wins (text after
    it is ignored); otherwise ``key: value`` / ``"key": "value"`` pairs are picked up leniently."""
    obj = first_json_object(text)
    if obj is not None:
        return {_key(str(k)): ("" if v is None else str(v)) for k, v in obj.items()}, True
    pairs = {}
    pat = r"""["']?([A-Za-z][\w \-]{0,30}?)["']?\s*[:=]\s*(?:"([^"\n]*)"|'([^'\n]*)'|((?:[^,}\n]|,(?=\d))*))"""
    for m in re.finditer(pat, text):
        k = _key(m.group(1))
        if k not in pairs:
            pairs[k] = next(g for g in m.groups()[1:] if g is not None).strip()
    return pairs, False


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """Per-item metrics from the generation ``results[0]``: field_acc (fraction of gold fields
    matched after normalisation, in [0, 1]), all_fields (1.0 iff every field matched) and
    json_valid (1.0 iff a JSON object was decoded)."""
    pred, valid = parse_output(results[0] if results else "")
    gold = json.loads(doc["target"])
    hits = sum(
        1 for k, t in zip(doc["fields"], doc["types"])
        if k in pred and normalize(pred[k], t) == normalize(gold[k], t)
    )
    n = len(doc["fields"])
    return {"field_acc": hits / n, "all_fields": float(hits == n), "json_valid": float(valid)}
