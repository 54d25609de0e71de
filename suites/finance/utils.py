"""finance_tableqa: numeric questions over a small generated income statement.

Each statement is a text table of 3-5 line items (USD thousands) over two years plus one sentence
of text; four questions of different types are asked about it (they share its ``doc_group``).
Answers are single cells (the easy tier), differences, sums, percentage changes, ratios to revenue (both rounded to 1 decimal),
gross profit, and an expense net of a one-time charge stated only in the sentence. Everything is
generated from ``random.Random(seed)``: the same seed gives the same items.
"""

from __future__ import annotations

import random
import re

import datasets

_CO1 = ("Acme", "Blue Fox", "Northwind", "Cedar", "Orbit", "Maple", "Summit", "Harbor", "Pioneer", "Silverline")
_CO2 = ("Holdings", "Systems", "Foods", "Retail", "Labs", "Energy", "Logistics", "Media", "Materials", "Health")
LINES = ("Revenue", "Cost of revenue", "Gross profit", "Operating expenses", "Operating income", "Net income")
# "lookup" is the easy tier (read one cell); the others need arithmetic.
QTYPES = ("lookup", "diff", "sum", "pct", "ratio", "gross", "adjusted")
INSTRUCTION = "Answer each question with one number computed from the statement."


def _fmt(v: int) -> str:
    return f"({-v:,})" if v < 0 else f"{v:,}"


def _num(x: float) -> str:
    return f"{x:.1f}" if x != int(x) else str(int(x))


def _pretty(gold: str) -> str:
    return f"{int(gold):,}" if gold.lstrip("-").isdigit() else gold


def _statement(rng: random.Random) -> dict:
    """Line-item values by year, the chosen lines (3-5, Revenue first), the text sentence."""
    y2 = rng.randrange(2016, 2025)
    years = (y2 - 1, y2)
    vals: dict[str, dict[int, int]] = {k: {} for k in LINES}
    rev = rng.randrange(300, 3_000)  # small figures: fewer digits, shorter prompts
    for y in years:
        r = rev if y == years[0] else round(rev * rng.uniform(0.8, 1.3))
        c = round(r * rng.uniform(0.4, 0.7))
        o = round(r * rng.uniform(0.12, 0.35))
        oi = r - c - o
        vals["Revenue"][y], vals["Cost of revenue"][y], vals["Gross profit"][y] = r, c, r - c
        vals["Operating expenses"][y], vals["Operating income"][y] = o, oi
        vals["Net income"][y] = round(oi * rng.uniform(0.6, 0.85)) if oi > 0 else oi - rng.randrange(5, 50)
    shown = ["Revenue"] + sorted(rng.sample(LINES[1:], rng.randrange(2, 5)), key=LINES.index)
    charge = 0
    if "Operating expenses" in shown and rng.random() < 0.6:
        charge = rng.randrange(1, max(2, vals["Operating expenses"][y2] // 5))
        text = f"Operating expenses in {y2} include a one-time charge of {charge:,} thousand."
    else:
        up = vals["Revenue"][y2] >= vals["Revenue"][years[0]]
        why = rng.choice(("unit sales", "prices", "demand in Europe", "online orders"))
        text = f"Revenue {'rose' if up else 'fell'} on {'higher' if up else 'lower'} {why}."
    return {"name": f"{rng.choice(_CO1)} {rng.choice(_CO2)}", "years": years, "vals": vals,
            "shown": shown, "text": text, "charge": charge, "recent_first": rng.random() < 0.5}


def _table(st: dict) -> str:
    ys = st["years"][::-1] if st["recent_first"] else st["years"]
    rows = [f"{st['name']}, income statement (USD thousands)", f"{'Item':<19}{ys[0]:>9}{ys[1]:>9}"]
    rows += [f"{k:<19}{_fmt(st['vals'][k][ys[0]]):>9}{_fmt(st['vals'][k][ys[1]]):>9}" for k in st["shown"]]
    return "\n".join(rows + [st["text"]])


def _question(rng: random.Random, st: dict, qtype: str) -> tuple[str, str, str] | None:
    """(question, worked answer, gold) of ``qtype`` about ``st``, or None if it does not apply.

    The worked answer is the computation from the table ending in the gold number, e.g.
    ``"1,204 - 1,150 = 54"``; few-shot examples show it, items are scored on the gold only.
    """
    (y1, y2), v = st["years"], st["vals"]
    item = rng.choice(st["shown"])
    a, b = v[item][y1], v[item][y2]
    low = item[0].lower() + item[1:]
    c = "{:,}".format
    if qtype == "lookup":
        y = rng.choice((y1, y2))
        return f"What was {low} in {y}, in thousands?", f"{item} {y} =", str(v[item][y])
    if qtype == "diff":
        return f"By how much did {low} change from {y1} to {y2}, in thousands?", f"{c(b)} - {c(a)} =", str(b - a)
    if qtype == "sum":
        return f"What was the combined {low} of {y1} and {y2}, in thousands?", f"{c(a)} + {c(b)} =", str(a + b)
    if qtype == "pct":
        if abs(a) < 100:
            return None
        return (f"What was the percentage change in {low} from {y1} to {y2}? Round to 1 decimal.",
                f"({c(b)} - {c(a)}) / {c(abs(a))} * 100 =", _num(round(100 * (b - a) / abs(a), 1)))
    if qtype == "ratio":
        if item == "Revenue":
            return None
        y = rng.choice((y1, y2))
        return (f"What was {low} as a percentage of revenue in {y}? Round to 1 decimal.",
                f"{c(v[item][y])} / {c(v['Revenue'][y])} * 100 =", _num(round(100 * v[item][y] / v["Revenue"][y], 1)))
    if qtype == "gross":
        if "Cost of revenue" not in st["shown"] or "Gross profit" in st["shown"]:
            return None
        y = rng.choice((y1, y2))
        return (f"What was the gross profit in {y}, in thousands?",
                f"{c(v['Revenue'][y])} - {c(v['Cost of revenue'][y])} =", str(v["Gross profit"][y]))
    if not st["charge"]:
        return None
    opex = v["Operating expenses"][y2]
    return (f"What were operating expenses in {y2} excluding the one-time charge, in thousands?",
            f"{c(opex)} - {c(st['charge'])} =", str(opex - st["charge"]))


def make_items(seed: int, n_statements: int, per_statement: int, prefix: str) -> list[dict]:
    """``n_statements * per_statement`` items from ``random.Random(seed)``.

    Each item: id ``f"{prefix}-{s:03d}-q{j}"``, doc_group ``f"{prefix}-{s:03d}"``, qtype,
    statement (table + sentence), question, work (the computation, ending in the gold number),
    target (gold number as text, thousands or percent).
    """
    rng = random.Random(seed)
    items = []
    for s in range(n_statements):
        while True:
            st = _statement(rng)
            qs = []
            for qtype in rng.sample(QTYPES, len(QTYPES)):
                q = _question(rng, st, qtype)
                if q is not None:
                    qs.append((qtype, *q))
            if len(qs) >= per_statement:
                break
        for j, (qtype, question, work, gold) in enumerate(qs[:per_statement]):
            items.append({"id": f"{prefix}-{s:03d}-q{j}", "doc_group": f"{prefix}-{s:03d}", "qtype": qtype,
                          "statement": _table(st), "question": question, "work": f"{work} {_pretty(gold)}",
                          "target": gold})
    return items


FEWSHOT_SEED = 7_000_002  # disjoint from the test seed; tests check no statement is shared
_POOL = make_items(FEWSHOT_SEED, 40, 4, "finance-shot")


def _block(doc: dict) -> str:
    return f"Statement:\n{doc['statement']}\nQuestion: {doc['question']}\nAnswer:"


def _shots(qtype: str) -> list[dict]:
    """The two shortest pool examples of ``qtype`` from different statements (keeps prompts short)."""
    same = sorted((d for d in _POOL if d["qtype"] == qtype), key=lambda d: (len(_block(d)), d["id"]))
    return [same[0], next(d for d in same if d["doc_group"] != same[0]["doc_group"])]


FEWSHOT = {q: _shots(q) for q in QTYPES}


def doc_to_text(doc: dict) -> str:
    """Prompt: instruction, two worked examples of the same question type (their answers show
    the computation, ending in the number), then the item, ending in ``Answer:``."""
    shots = [_block(d) + " " + d["work"] for d in FEWSHOT[doc["qtype"]]]
    return "\n\n".join([INSTRUCTION, *shots, _block(doc)])


def load_data(seed: int = 20240612, n_statements: int = 50, per_statement: int = 4,
              **_: object) -> dict[str, datasets.Dataset]:
    """lm-eval ``custom_dataset`` hook: ``{"test": Dataset}``, ``n_statements * per_statement`` items."""
    items = make_items(int(seed), int(n_statements), int(per_statement), "finance")
    return {"test": datasets.Dataset.from_list(items)}


# ---------------------------------------------------------------- scoring
_NUMBER = re.compile(
    r"(?P<open>\()?\s*(?P<sign>[-\u2212+])?\s*[$\u20ac\u00a3]?\s*"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?P<close>\s*\))?"
)


def _value(m: re.Match) -> float:
    x = float(m.group("num").replace(",", ""))
    negative = m.group("sign") in ("-", "\u2212") or (m.group("open") and m.group("close"))
    return -x if negative else x


def extract_number(text: str) -> float | None:
    """The answer number in a generation, or None if it holds no number.

    If the text contains ``Answer:``, the last number on the line after its first occurrence;
    otherwise the last number on the first line that holds one. The prompt ends in ``Answer:`` and
    its examples show the working ending in the result (``Revenue 2023 = 1,125``, ``(440 - 347) /
    347 * 100 = 26.8``), so the result is the line's last number, never its first (a year).
    Commas, ``$``, ``%`` and signs are handled; ``(1,234)`` reads as -1234.
    """
    idx = text.find("Answer:")
    if idx >= 0:
        line = text[idx + len("Answer:"):].strip().split("\n", 1)[0]
        found = list(_NUMBER.finditer(line))
        if found:
            return _value(found[-1])
    for line in text.split("\n"):
        found = list(_NUMBER.finditer(line))
        if found:
            return _value(found[-1])
    return None


def is_match(pred: float | None, gold: float) -> bool:
    """True iff |pred - gold| <= max(0.01 * |gold|, 0.005) (1% relative tolerance)."""
    return pred is not None and abs(pred - gold) <= max(0.01 * abs(gold), 0.005)


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """Per-item metrics from ``results[0]``: num_match (1.0 iff within tolerance of the gold
    number) and parsed (1.0 iff any number was found)."""
    pred = extract_number(results[0] if results else "")
    return {"num_match": float(is_match(pred, float(doc["target"]))), "parsed": float(pred is not None)}
