"""docparse_hard: the docparse_fields task on longer, noisier documents (the embedded hybrid's informative tier).

Same kinds, fields, prompt (``utils.doc_to_text``: instruction and the same two worked examples) and scorer
(``utils.process_results``) as ``docparse_fields``, but every document carries look-alike distractors next to the
requested fields (a bill-to company beside the vendor, a due date beside the invoice date, a PO number beside the
invoice number, subtotal/shipping/tax beside the total, an emergency contact beside the member, an order date
beside the ship date, a volumetric weight beside the weight), line items, address lines and several noise lines.
``distractors`` (0-4) sets how many distractor kinds a document gets; the shipped YAML's value was tuned so the
embedded model's FP32 baseline lands between 20 % and 80 % (its card: ``evalgate/models/hybrid/README.md``).
Everything comes from ``random.Random(seed)``.
"""

from __future__ import annotations

import random
from typing import Callable, TypeVar

import datasets

from evalgate.suites.taskcode import sibling

U = sibling(__file__, "utils")
T = TypeVar("T")
_STREETS = ("Mill Lane", "Harbour Road", "Station Street", "Elm Avenue", "King Street", "Park Row")


def _address(rng: random.Random) -> str:
    return f"{rng.randrange(1, 200)} {rng.choice(_STREETS)}, {rng.choice(U._CITIES)}"


def _other(rng: random.Random, make, avoid: str) -> str:
    """A value from ``make(rng)`` that differs from ``avoid`` (a distractor must never equal the gold)."""
    while True:
        v = make(rng)
        if v != avoid:
            return v


def _extra_lines(rng: random.Random, k: int, makers: tuple[Callable[[random.Random], T], ...]) -> list[T]:
    """The first ``k`` of ``makers`` (none for k <= 0), each called with ``rng`` in order: the look-alike lines a
    document gets at ``distractors = k``, drawing from ``rng`` exactly as the lines written out one by one did."""
    return [make(rng) for make in makers[:max(0, k)]]


def _invoice(rng: random.Random, k: int) -> tuple[list[str], dict[str, str]]:
    vendor = U._company(rng)
    no = f"{rng.choice(('INV', 'IN', 'A'))}-{rng.randrange(1000, 99999)}"
    day = U._date(rng, 2019, 2025)
    fmt = U._money_format(rng)
    lines_items = [(g, rng.randrange(1, 9), round(rng.uniform(2, 400), 2)) for g in rng.sample(U._GOODS, rng.randrange(2, 5))]
    sub = round(sum(q * p for _, q, p in lines_items), 2)
    tax = round(sub * rng.choice((0.05, 0.1, 0.2)), 2)
    ship = round(rng.uniform(4, 60), 2) if k >= 3 else 0.0
    total = round(sub + tax + ship, 2)
    head = [f"{rng.choice(('Invoice #', 'Invoice No.', 'Invoice number:'))} {no}",
            f"{rng.choice(('Date:', 'Issued:', 'Invoice date:'))} {U._fmt_date(rng, day)}"]
    extra = []
    if k >= 1:
        extra.append(f"Bill to: {_other(rng, U._company, vendor)}")
    if k >= 2:
        due = day + U.dt.timedelta(days=rng.choice((14, 30, 45, 60)))
        extra.append(f"{rng.choice(('Due date:', 'Payment due:'))} {U._fmt_date(rng, due)}")
    if k >= 4:
        extra.append(f"PO number: PO-{rng.randrange(1000, 99999)}")
    head += extra
    rng.shuffle(head)
    lines = [vendor.upper() if rng.random() < 0.3 else vendor, _address(rng), *head]
    lines += [f"{g:<10} {q} x {fmt.format(p)}  {fmt.format(q * p)}" for g, q, p in lines_items]
    lines += [f"Subtotal: {fmt.format(sub)}", f"Tax: {fmt.format(tax)}"]
    if ship:
        lines.append(f"Shipping: {fmt.format(ship)}")
    lines.append(f"{rng.choice(('Total:', 'Amount due:', 'Total due:', 'Grand total:'))} {fmt.format(total)}")
    gold = {"vendor": vendor, "invoice_no": no, "date": day.isoformat(), "total": f"{total:.2f}"}
    return lines, gold


def _receipt(rng: random.Random, k: int) -> tuple[list[str], dict[str, str]]:
    store = f"{rng.choice(U._CO1)} {rng.choice(('Market', 'Grocer', 'Cafe', 'Pharmacy'))}"
    day = U._date(rng, 2019, 2025)
    items = [(g, round(rng.uniform(0.5, 30), 2)) for g in rng.sample(U._GOODS, rng.randrange(3, 4 + k))]
    total = round(sum(p for _, p in items), 2)
    lines = [store, _address(rng), U._fmt_date(rng, day) + f" {rng.randrange(7, 22):02d}:{rng.randrange(60):02d}"]
    lines += [f"{g:<10} {p:>7.2f}" for g, p in items]
    if k >= 1:
        tax = round(total * rng.choice((0.07, 0.1, 0.2)) / 1.1, 2)
        lines.append(f"incl. VAT {tax:>7.2f}")
    lines.append(f"{rng.choice(('TOTAL', 'Total', 'Sum'))} {total:>7.2f}")
    paid = total + rng.choice((5, 10, 20))
    lines.append(f"Cash {paid:>7.2f}")
    lines += _extra_lines(rng, k - 1, (lambda r: f"Change {paid - total:>7.2f}",
                                       lambda r: f"Card ending {r.randrange(1000, 9999)}",
                                       lambda r: f"Next visit: {U._fmt_date(r, U._date(r, 2019, 2025))}"))
    gold = {"store": store, "date": day.isoformat(), "total": f"{total:.2f}"}
    return lines, gold


def _name(rng: random.Random) -> str:
    return f"{rng.choice(U._FIRST)} {rng.choice(U._LAST)}"


def _form(rng: random.Random, k: int) -> tuple[list[str], dict[str, str]]:
    name = _name(rng)
    born = U._date(rng, 1950, 2004)
    mid = f"M{rng.randrange(10000, 99999)}"
    city = rng.choice(U._CITIES)
    body = [f"{rng.choice(('Full name', 'Name'))}: {name}",
            f"{rng.choice(('Date of birth', 'Born', 'DOB'))}: {U._fmt_date(rng, born)}",
            f"{rng.choice(('Member ID', 'Membership no.'))}: {mid}",
            f"{rng.choice(('City', 'Town'))}: {city}"]
    body += _extra_lines(rng, k, (lambda r: f"Emergency contact: {_other(r, _name, name)}",
                                  lambda r: f"Date of issue: {U._fmt_date(r, U._date(r, 2015, 2025))}",
                                  lambda r: f"Birthplace: {_other(r, lambda r2: r2.choice(U._CITIES), city)}",
                                  lambda r: f"Referred by: M{r.randrange(10000, 99999)}"))
    rng.shuffle(body)
    lines = [rng.choice(("MEMBERSHIP FORM", "Registration form", "New member")), *body, f"Address: {_address(rng)}",
             f"Signed: {U._fmt_date(rng, U._date(rng, 2020, 2025))}"]
    gold = {"name": name, "birth_date": born.isoformat(), "member_id": mid, "city": city}
    return lines, gold


def _table(rng: random.Random, k: int) -> tuple[list[str], dict[str, str]]:
    oid = f"SO-{rng.randrange(10000, 99999)}"
    day = U._date(rng, 2019, 2025)
    carrier = rng.choice(U._CARRIERS)
    weight = round(rng.uniform(0.5, 80), 1)
    rows = [("Order", oid), ("Shipped", U._fmt_date(rng, day)), ("Carrier", carrier), ("Weight", f"{weight} kg"),
            ("Parcels", str(rng.randrange(1, 6)))]
    rows += _extra_lines(rng, k, (lambda r: ("Ordered", U._fmt_date(r, day - U.dt.timedelta(days=r.randrange(1, 20)))),
                                  lambda r: ("Dim. wt", f"{round(weight * r.uniform(1.1, 2.0), 1)} kg"),
                                  lambda r: ("Return", _other(r, lambda r2: r2.choice(U._CARRIERS), carrier)),
                                  lambda r: ("Ref", f"SO-{r.randrange(10000, 99999)}")))
    rng.shuffle(rows)
    sep = rng.choice((" | ", "  ", " = "))
    lines = ["Shipment details", _address(rng)] + [f"{a:<8}{sep}{b}" for a, b in rows]
    gold = {"order_id": oid, "ship_date": day.isoformat(), "carrier": carrier, "weight_kg": f"{weight:.2f}"}
    return lines, gold


_MAKERS = {"invoice": _invoice, "receipt": _receipt, "form": _form, "table": _table}


def make_items(seed: int, n: int, prefix: str, distractors: int = 4, noise: int = 3) -> list[dict]:
    """``n`` items from ``random.Random(seed)``, kinds in rotation, in ``utils.make_items``' item shape (id,
    doc_group, kind, document, fields, types, target); ``distractors`` 0-4 look-alike kinds per document and
    ``noise`` noise lines (``utils._NOISE``) inserted at random lines."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        kind = U.KINDS[i % len(U.KINDS)]
        lines, gold = _MAKERS[kind](rng, distractors)
        for line in rng.sample(U._NOISE, min(noise, len(U._NOISE))):
            lines.insert(rng.randrange(1, len(lines) + 1), line)
        items.append({"id": f"{prefix}-{i:04d}", "doc_group": f"{prefix}-{i:04d}", "kind": kind,
                      "document": "\n".join(lines), "fields": [f for f, _ in U.FIELDS[kind]],
                      "types": [t for _, t in U.FIELDS[kind]], "target": U._answer(gold, kind)})
    return items


def load_data(seed: int = 20261201, n_test: int = 400, distractors: int = 4, noise: int = 4,
              **_: object) -> dict[str, datasets.Dataset]:
    """lm-eval ``custom_dataset`` hook: ``{"test": Dataset}`` of ``n_test`` hard items from ``seed``."""
    items = make_items(int(seed), int(n_test), "docparse-hard", int(distractors), int(noise))
    return {"test": datasets.Dataset.from_list(items)}


doc_to_text = U.doc_to_text
process_results = U.process_results
