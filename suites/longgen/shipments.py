"""longgen_shipments: a long generated shipment log, transcribed row by row (gold outputs ~1,200 tokens).

A long-generation stress task: errors that accumulate along the generated sequence (an SSM state stored in lower
precision between decode steps) show up as rows transcribed wrongly late in the output. Each item is a log of
``n_rows`` shipments (order id, ship date in one of three date styles, carrier, weight). The answer is, per row, a
block in the docparse format the embedded hybrid was trained on (``Document:``, the row as a one-line document,
``Fields: order_id, ship_date, carrier, weight_kg``, ``JSON:`` and the row's fields as JSON, the date as ISO and
the weight with two decimals), blocks separated by a blank line, then ``End of log.``; one worked example of two
rows precedes the log. The folder is self-contained, so its content hash covers everything that defines the items
(the tokenizer used for positions belongs to the model, which the store key covers).

Scoring is position by position: a gold row counts as correct when some output line holds a JSON object with its
``order_id`` and all four fields right (the first such line). ``row_acc`` is the share of correct rows;
``pos_<lo>_<hi>`` is the share of correct rows among those whose gold JSON *starts* at output token ``lo <= t < hi``,
counted in the embedded hybrid's tokenizer (``evalgate/models/hybrid/checkpoint/tokenizer.json``, digits one per token)
over the gold output; ``POSITION_BUCKETS`` are the buckets, and every item has rows in each of them. Everything is
generated from ``random.Random(seed)``.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from functools import lru_cache
from pathlib import Path

import datasets

INSTRUCTION = "For each row of the log, write it as a document and extract the requested fields as one line of JSON."
FIELDS = ("order_id", "ship_date", "carrier", "weight_kg")
CARRIERS = ("DHL", "UPS", "FedEx", "GLS", "DPD", "TNT")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# Token positions (embedded tokenizer) of the gold output: [lo, hi) per bucket, hi None = open.
POSITION_BUCKETS = ((0, 256), (256, 512), (512, 1024), (1024, None))


def _tokenizer_file() -> Path:
    """The embedded hybrid's tokenizer: from the installed evalgate package, else next to this repository's suites."""
    try:
        import evalgate.models.hybrid

        return Path(evalgate.models.hybrid.__file__).parent / "checkpoint" / "tokenizer.json"
    except ImportError:
        return Path(__file__).resolve().parents[2] / "evalgate" / "hybrid" / "checkpoint" / "tokenizer.json"


TOKENIZER = _tokenizer_file()


def bucket_name(lo: int, hi: int | None) -> str:
    """``pos_0_256``, ..., ``pos_1024_plus``: the metric name of one position bucket."""
    return f"pos_{lo}_{'plus' if hi is None else hi}"


def _fmt_date(style: int, d: dt.date) -> str:
    if style == 0:
        return d.isoformat()
    if style == 1:
        return f"{d.day:02d}.{d.month:02d}.{d.year}"
    return f"{d.day} {_MONTHS[d.month - 1]} {d.year}"


def _row(rng: random.Random) -> dict[str, str]:
    day = dt.date(2019, 1, 1) + dt.timedelta(days=rng.randrange(7 * 365))
    return {"order_id": f"SO-{rng.randrange(10000, 99999)}", "date": day, "carrier": rng.choice(CARRIERS),
            "weight": round(rng.uniform(0.5, 80), 1)}


def _log(rng: random.Random, n_rows: int) -> tuple[str, list[dict]]:
    """(log text, rows): one date style per log, unique order ids; each row holds its log line and gold JSON."""
    style = rng.randrange(3)
    rows, seen = [], set()
    while len(rows) < n_rows:
        r = _row(rng)
        if r["order_id"] not in seen:
            seen.add(r["order_id"])
            rows.append(r)
    out = []
    for r in rows:
        line = f"{r['order_id']} {_fmt_date(style, r['date'])} {r['carrier']} {r['weight']} kg"
        gold = json.dumps({"order_id": r["order_id"], "ship_date": r["date"].isoformat(), "carrier": r["carrier"],
                           "weight_kg": f"{r['weight']:.2f}"})
        out.append({"line": line, "json": gold})
    return "\n".join(["Shipment log", *(r["line"] for r in out)]), out


def _fields_block(doc_text: str) -> str:
    return f"Document:\n{doc_text}\nFields: {', '.join(FIELDS)}\nJSON:"


def gold_output(rows: list[dict]) -> str:
    """What a perfect model writes after the prompt: per row a docparse block (``Document:``, the row's log line,
    ``Fields:``, ``JSON:`` and the row's JSON), blocks separated by a blank line, then ``End of log.``."""
    return "\n\n".join(_fields_block(r["line"]) + " " + r["json"] for r in rows) + "\n\nEnd of log."


@lru_cache(maxsize=1)
def _tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TOKENIZER))


def row_token_starts(text: str, rows: list[str]) -> list[int]:
    """Output token index at which each gold JSON line of ``rows`` starts in ``text`` (embedded tokenizer)."""
    enc = _tokenizer().encode(text, add_special_tokens=False)
    starts, pos = [], 0
    for line in rows:
        c = text.index(line, pos)
        starts.append(next(i for i, (a, b) in enumerate(enc.offsets) if b > c))
        pos = c + len(line)
    return starts


def make_items(seed: int, n: int, n_rows: int, prefix: str) -> list[dict]:
    """``n`` logs of ``n_rows`` rows from ``random.Random(seed)``. Each item: id, doc_group, document (the log),
    rows (gold JSON lines), row_starts (their output token positions), target (``gold_output``)."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        log, rows = _log(rng, n_rows)
        target = gold_output(rows)
        items.append({"id": f"{prefix}-{i:04d}", "doc_group": f"{prefix}-{i:04d}", "document": log,
                      "rows": [r["json"] for r in rows], "row_starts": row_token_starts(target, [r["json"] for r in rows]),
                      "target": target})
    return items


SHOT_SEED = 7_000_004


SHOT = make_items(SHOT_SEED, 1, 2, "longgen-shot")[0]


def _prompt_block(log: str) -> str:
    return f"Log:\n{log}\nRows:\n\n"


def doc_to_text(doc: dict) -> str:
    """Instruction, one worked example (a two-row log and its answer), then the item's log."""
    return "\n\n".join([INSTRUCTION, _prompt_block(SHOT["document"]) + SHOT["target"], _prompt_block(doc["document"])])


def load_data(seed: int = 20261204, n_test: int = 100, n_rows: int = 12, **_: object) -> dict[str, datasets.Dataset]:
    """lm-eval ``custom_dataset`` hook: ``{"test": Dataset}`` of ``n_test`` logs."""
    return {"test": datasets.Dataset.from_list(make_items(int(seed), int(n_test), int(n_rows), "longgen"))}


# ---------------------------------------------------------------- scoring
_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def _norm(field: str, value: object) -> str:
    text = " ".join(str(value).split()).casefold()
    if field == "weight_kg":
        m = _NUM.search(text)
        return f"{float(m.group()):.2f}" if m else text
    return text


def parse_rows(text: str) -> dict[str, dict[str, str]]:
    """order_id (normalised) -> the first JSON object on any output line that has that order_id."""
    dec = json.JSONDecoder()
    out: dict[str, dict[str, str]] = {}
    for line in text.split("\n"):
        start = line.find("{")
        if start < 0:
            continue
        try:
            obj, _ = dec.raw_decode(line, start)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "order_id" in obj:
            out.setdefault(_norm("order_id", obj["order_id"]), {k: str(v) for k, v in obj.items()})
    return out


def row_correct(doc: dict, text: str) -> list[bool]:
    """Per gold row: transcribed correctly somewhere in ``text`` (all four fields)."""
    found = parse_rows(text)
    res = []
    for line in doc["rows"]:
        gold = json.loads(line)
        got = found.get(_norm("order_id", gold["order_id"]))
        res.append(got is not None and all(f in got and _norm(f, got[f]) == _norm(f, gold[f]) for f in FIELDS))
    return res


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """row_acc (primary: share of rows right), rows_complete (1.0 iff every row is right), and ``pos_*`` per
    ``POSITION_BUCKETS`` (share right among the rows whose gold line starts in the bucket)."""
    ok = row_correct(doc, results[0] if results else "")
    out = {"row_acc": sum(ok) / len(ok), "rows_complete": float(all(ok))}
    for lo, hi in POSITION_BUCKETS:
        inside = [o for o, s in zip(ok, doc["row_starts"]) if s >= lo and (hi is None or s < hi)]
        if not inside:
            raise ValueError(f"item {doc['id']} has no row starting in tokens [{lo}, {hi}): make the logs longer")
        out[bucket_name(lo, hi)] = sum(inside) / len(inside)
    return out
