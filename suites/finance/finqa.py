"""finance_finqa: FinQA (numerical reasoning over earnings reports), 3-shot, scored by execution accuracy as the
FinQA authors' ``code/evaluate/evaluate.py`` (github.com/czyssrs/FinQA) defines it.

Data: ``data/finqa/`` (a 158-question subset of the FinQA test set, MIT; what and why in its README.md); the
full data is ``dataset/test.json`` of that repository (a hub copy: ``ibm-research/finqa``). Each item is one
question of one report page (``doc_group`` = the page, ``filename``-like prefix of the id).

Context. The authors' generator (``code/generator/finqa_utils.py``, ``read_mathqa_entry``) reads the question
plus retrieved facts, not the whole page: ``retrieve_mode = "single"`` (their default) uses ``qa.model_input``,
the top facts of their retriever, stored in test.json; ``"gold"`` uses ``qa.gold_inds``, the annotated
supporting facts. This task does the same (``dataset_kwargs.facts``: ``retrieved``, the default, or ``gold``),
one fact per line; table facts are the authors' row-to-text sentences. The whole page (median ~1,600 tokens of
the hybrid's tokenizer) would not fit the embedded models' 2,048 tokens with examples.

Answer. The model writes a FinQA program, as the generator does (``divide(139549, const_1000), divide(15.3, #0)``);
``exe_acc`` is 1 iff :func:`eval_program` (evaluate.py's ``eval_program``: the 10 operations, ``#k`` step
references, ``const_*`` constants, ``x%`` as x/100, the result ``round(., 5)``) runs without error and its result
``== qa.exe_ans`` (a float rounded to 5 decimals, or ``yes``/``no``). There is no other tolerance in evaluate.py:
the rounding to 5 decimals is it. One departure: evaluate.py only scores programs; an answer that is a bare number
(``0.10964``, ``11%``) is scored here as that number, by the same test (``round(x, 5) == exe_ans``, ``%`` read as
/100), so a model that answers in numbers is held to the authors' 5-decimal equality rather than scored 0.
Program accuracy (evaluate.py's ``equal_program``, a sympy comparison with the gold program) is not computed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import datasets

DATA = Path(__file__).resolve().parent / "data" / "finqa"
ALL_OPS = ("add", "subtract", "multiply", "divide", "exp", "greater",
           "table_max", "table_min", "table_sum", "table_average")
_BARE_NUMBER = re.compile(r"[-+]?\$?\s*(?:\d[\d,]*(?:\.\d+)?|\.\d+)\s*%?")


# ---------------------------------------------------------------- data and prompt
def facts(entry: dict, mode: str = "retrieved") -> list[str]:
    """The context sentences of a FinQA entry: ``qa.model_input`` texts (``retrieved``) or ``qa.gold_inds`` values
    in their stored order (``gold``), as finqa_utils.read_mathqa_entry concatenates them."""
    if mode == "retrieved":
        return [text for _, text in entry["qa"]["model_input"]]
    if mode == "gold":
        return list(entry["qa"]["gold_inds"].values())
    raise ValueError(f"facts must be 'retrieved' or 'gold', got {mode!r}")


def _items(path: Path, mode: str) -> list[dict]:
    items = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                e = json.loads(line)
                items.append({"id": e["id"], "doc_group": e["id"].rsplit("-", 1)[0], "facts": "\n".join(facts(e, mode)),
                              "question": e["qa"]["question"], "program": e["qa"]["program"],
                              "exe_ans": json.dumps(e["qa"]["exe_ans"]), "table": json.dumps(e["table"])})
    return items


def load_data(facts: str = "retrieved", **_: object) -> dict[str, datasets.Dataset]:
    """lm-eval ``custom_dataset`` hook: ``{"test": 155 questions, "fewshot": 3 worked examples}``.

    Each item: id, doc_group (the report page), facts (one per line), question, program (the gold program),
    exe_ans (JSON: the gold execution result), table (JSON: the page's table, for the ``table_*`` operations).
    Raises ValueError for an unknown ``facts`` mode.
    """
    return {"test": datasets.Dataset.from_list(_items(DATA / "test_subset.jsonl", facts)),
            "fewshot": datasets.Dataset.from_list(_items(DATA / "fewshot.jsonl", facts))}


# ---------------------------------------------------------------- evaluate.py
def str_to_num(text: str) -> float | str:
    """evaluate.str_to_num: commas dropped; a float; else ``x%`` as x/100, ``const_k`` as k (``const_m1`` -1);
    else ``"n/a"``. A malformed constant raises ValueError, as upstream (the caller counts it invalid)."""
    text = text.replace(",", "")
    try:
        return float(text)
    except ValueError:
        if "%" in text:
            try:
                return float(text.replace("%", "")) / 100.0
            except ValueError:
                return "n/a"
        if "const" in text:
            text = text.replace("const_", "")
            return float("-1" if text == "m1" else text)
        return "n/a"


def process_row(row_in: list[str]) -> list[float] | str:
    """evaluate.process_row: a table row's cells as numbers (``$`` dropped, text from ``(`` on dropped), or
    ``"n/a"`` if any cell is not a number."""
    out = []
    for cell in row_in:
        num = str_to_num(cell.replace("$", "").strip().split("(")[0].strip())
        if num == "n/a":
            return "n/a"
        out.append(num)
    return out


def program_tokenization(program: str) -> list[str]:
    """evaluate.program_tokenization: ``"divide(a, b), add(#0, c)"`` -> ``["divide(", "a", "b", ")", "add(", "#0",
    "c", ")", "EOF"]`` (split on ``", "``; ``(`` ends an op token, ``)`` is a token of its own)."""
    tokens = []
    for tok in program.split(", "):
        cur = ""
        for c in tok:
            if c == ")" and cur:
                tokens.append(cur)
                cur = ""
            cur += c
            if c in "()":
                tokens.append(cur)
                cur = ""
        if cur:
            tokens.append(cur)
    return tokens + ["EOF"]


def _arg(arg: str, results: dict[int, object]) -> object:
    return results[int(arg.replace("#", ""))] if "#" in arg else str_to_num(arg)


def _steps(tokens: list[str]) -> list[tuple[str, str, str]] | None:
    """(op, arg1, arg2) per step of a tokenized program (EOF removed), or None if the structure is invalid."""
    for i, tok in enumerate(tokens):
        if (i % 4 == 0 and tok.strip("(") not in ALL_OPS) or ((i + 1) % 4 == 0 and tok != ")"):
            return None
    steps = []
    for step in "|".join(tokens).split(")")[:-1]:
        parts = step.strip().split("(")
        if len(parts) > 2:
            return None
        args = parts[1].strip("|").strip().split("|")
        steps.append((parts[0].strip("|").strip(), args[0].strip(), args[1].strip()))
    return steps


def eval_program(program: list[str], table: list[list[str]]) -> tuple[int, object]:
    """evaluate.eval_program: ``(invalid_flag, result)`` of a tokenized program (ending in ``EOF``) on ``table``.

    Arithmetic ops take numbers, constants or ``#k`` (step k's result); ``greater`` gives ``yes``/``no``;
    ``table_*`` reduce the row whose first cell equals arg1. The result is ``round(., 5)``. Any error (unknown op,
    malformed structure, a missing row or step, division by zero) gives ``(1, ...)``, as upstream.
    """
    result: object = "n/a"
    try:
        steps = _steps(program[:-1])
        if steps is None:
            return 1, "n/a"
        results: dict[int, object] = {}
        rows = {row[0]: row[1:] for row in table}
        for ind, (op, arg1, arg2) in enumerate(steps):
            if "table" in op:
                if "#" in arg1 or arg1 not in rows:  # upstream: a step reference here fails (num_row unset)
                    return 1, result
                nums = process_row(rows[arg1])
                if nums == "n/a":
                    return 1, result
                result = {"table_max": max, "table_min": min, "table_sum": sum}.get(op, lambda r: sum(r) / len(r))(nums)
            else:
                a, b = _arg(arg1, results), _arg(arg2, results)
                if a == "n/a" or b == "n/a":
                    return 1, result
                result = {"add": lambda: a + b, "subtract": lambda: a - b, "multiply": lambda: a * b,
                          "divide": lambda: a / b, "exp": lambda: a ** b,
                          "greater": lambda: "yes" if a > b else "no"}[op]()
            results[ind] = result
        if result not in ("yes", "no", "n/a"):
            result = round(result, 5)
    except Exception:  # noqa: BLE001 - upstream's bare except: any failure of the program is "invalid"
        return 1, result
    return 0, result


def answer_value(text: str, table: list[list[str]]) -> tuple[bool, object]:
    """``(valid, value)`` of a generation: its first line executed as a FinQA program, or read as a bare number
    (``str_to_num``, then ``round(., 5)``: the departure described in the module doc)."""
    line = text.strip().split("\n", 1)[0].strip()
    if _BARE_NUMBER.fullmatch(line):
        num = str_to_num(line.replace("$", "").replace(" ", ""))
        return (False, "n/a") if num == "n/a" else (True, round(num, 5))
    invalid, value = eval_program(program_tokenization(line), table)
    return invalid == 0 and value != "n/a", value


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """Per-item metrics of ``results[0]``: exe_acc (1.0 iff the answer's value ``== exe_ans``, evaluate.py's test)
    and valid (1.0 iff it was an executable program or a number)."""
    valid, value = answer_value(results[0] if results else "", json.loads(doc["table"]))
    return {"exe_acc": float(valid and value == json.loads(doc["exe_ans"])), "valid": float(valid)}
