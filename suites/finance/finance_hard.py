"""finance_multistep: questions over longer generated income statements, single-cell and multi-step.

The statements are ``utils``' income statements with every line item shown (six rows over two years) and a
second sentence; the prompt and scorer are ``finance_tableqa``'s (``utils.doc_to_text`` with the two worked
examples of the question's type, ``utils.process_results``: num_match at 1 % tolerance). Question types:

* ``lookup``: one cell (the tier the embedded model can partly solve: 67 % on the short statements);
* ``lookup_text``: the one-time charge, stated only in the text;
* ``diff``, ``sum``, ``gross``, ``adjusted``: two cells and one operation (``utils``' arithmetic tiers);
* ``chain``: three cells and two operations (``(a - b) - c`` or ``a - b + c``), the multi-step tier.

``lookup_share`` sets the share of single-cell questions (``lookup`` and ``lookup_text``); the shipped YAML's value
was tuned so the embedded model's FP32 baseline lands between 20 % and 80 % (it cannot do arithmetic: 0 % on every
operation tier, see ``evalgate/models/hybrid/README.md``). Each statement gets ``per_statement`` questions (its
``doc_group``). Everything comes from ``random.Random(seed)``.
"""

from __future__ import annotations

import random

import datasets

from evalgate.suites.taskcode import sibling

U = sibling(__file__, "utils")
SINGLE = ("lookup", "lookup_text")
MULTI = ("diff", "sum", "gross", "adjusted", "chain")
_REASONS = ("unit sales", "prices", "demand in Europe", "online orders")


def _statement(rng: random.Random) -> dict:
    """``utils._statement`` with all six line items shown, a one-time charge and a second sentence."""
    st = U._statement(rng)
    st["shown"] = list(U.LINES)
    y1, y2 = st["years"]
    opex = st["vals"]["Operating expenses"][y2]
    st["charge"] = st["charge"] or rng.randrange(1, max(2, opex // 5))
    up = st["vals"]["Revenue"][y2] >= st["vals"]["Revenue"][y1]
    st["text"] = (f"Revenue {'rose' if up else 'fell'} on {'higher' if up else 'lower'} {rng.choice(_REASONS)}. "
                  f"Operating expenses in {y2} include a one-time charge of {st['charge']:,} thousand.")
    return st


def _question(rng: random.Random, st: dict, qtype: str) -> tuple[str, str, str]:
    """(question, worked answer, gold) of ``qtype`` about ``st``."""
    (y1, y2), v = st["years"], st["vals"]
    c = "{:,}".format
    if qtype == "lookup_text":
        return (f"How large was the one-time charge in {y2}, in thousands?", "One-time charge =", str(st["charge"]))
    if qtype == "chain":
        item = rng.choice(("Gross profit", "Operating income"))
        low = item[0].lower() + item[1:]
        a, b = v[item][y2], v[item][y1]
        if rng.random() < 0.5:
            return (f"By how much did {low} change from {y1} to {y2}, excluding the one-time charge of {y2}, in "
                    "thousands?", f"{c(a)} + {c(st['charge'])} - {c(b)} =", str(a + st["charge"] - b))
        r = v["Revenue"][y2]
        return (f"What was revenue in {y2} minus cost of revenue minus operating expenses, in thousands?",
                f"{c(r)} - {c(v['Cost of revenue'][y2])} - {c(v['Operating expenses'][y2])} =",
                str(r - v["Cost of revenue"][y2] - v["Operating expenses"][y2]))
    if qtype == "gross":  # utils' gross tier skips statements that show Gross profit; here it is always shown
        y = rng.choice((y1, y2))
        return (f"What was revenue minus cost of revenue in {y}, in thousands?",
                f"{c(v['Revenue'][y])} - {c(v['Cost of revenue'][y])} =", str(v["Gross profit"][y]))
    q = U._question(rng, st, qtype)
    assert q is not None  # lookup/diff/sum/adjusted always apply: every line is shown and there is a charge
    return q


def make_items(seed: int, n_statements: int, per_statement: int, prefix: str, lookup_share: float = 0.5) -> list[dict]:
    """``n_statements * per_statement`` items from ``random.Random(seed)``, in ``utils.make_items``' item shape
    (id, doc_group, qtype, statement, question, work, target); each question is single-cell with probability
    ``lookup_share`` (``lookup`` 3 : ``lookup_text`` 1), else one of ``MULTI``."""
    rng = random.Random(seed)
    items = []
    for s in range(n_statements):
        st = _statement(rng)
        table = U._table(st)
        for j in range(per_statement):
            if rng.random() < lookup_share:
                qtype = "lookup_text" if rng.random() < 0.25 else "lookup"
            else:
                qtype = rng.choice(MULTI)
            question, work, gold = _question(rng, st, qtype)
            items.append({"id": f"{prefix}-{s:03d}-q{j}", "doc_group": f"{prefix}-{s:03d}", "qtype": qtype,
                          "statement": table, "question": question, "work": f"{work} {U._pretty(gold)}",
                          "target": gold})
    return items


FEWSHOT_SEED = 7_000_003  # the new question types' worked examples; disjoint from the test seed
_POOL = [d for d in make_items(FEWSHOT_SEED, 30, 4, "finance-hard-shot", lookup_share=0.3)]


def _shots(qtype: str) -> list[dict]:
    """Two worked examples of ``qtype`` from different statements: ``utils``' pool where the type exists there
    (the same examples ``finance_tableqa`` shows), else this module's pool (the shortest two)."""
    if qtype in U.FEWSHOT:
        return U.FEWSHOT[qtype]
    same = sorted((d for d in _POOL if d["qtype"] == qtype), key=lambda d: (len(U._block(d)), d["id"]))
    return [same[0], next(d for d in same if d["doc_group"] != same[0]["doc_group"])]


FEWSHOT = {q: _shots(q) for q in (*SINGLE, *MULTI)}


def doc_to_text(doc: dict) -> str:
    """``utils.doc_to_text``'s prompt (instruction, two worked examples of the type, the item)."""
    shots = [U._block(d) + " " + d["work"] for d in FEWSHOT[doc["qtype"]]]
    return "\n\n".join([U.INSTRUCTION, *shots, U._block(doc)])


def load_data(seed: int = 20261202, n_statements: int = 100, per_statement: int = 4, lookup_share: float = 0.85,
              **_: object) -> dict[str, datasets.Dataset]:
    """lm-eval ``custom_dataset`` hook: ``{"test": Dataset}``, ``n_statements * per_statement`` items."""
    items = make_items(int(seed), int(n_statements), int(per_statement), "finance-hard", float(lookup_share))
    return {"test": datasets.Dataset.from_list(items)}


process_results = U.process_results
