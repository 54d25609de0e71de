"""coding_mbpp: MBPP (sanitized), 3-shot, scored by running each problem's asserts in evalgate's sandbox.

Data: ``data/mbpp/`` (the 257 problems of the sanitized test split, task_id 11-510, and the 7 of its prompt
split, task_id 1-10; CC BY 4.0, see its README.md). The hub copy is ``google-research-datasets/mbpp``, config
``sanitized``. Prompt: lm-eval's ``mbpp`` task template (Austin et al., 2021, "Program Synthesis with Large
Language Models", the format of their few-shot prompts): the problem text, its first three asserts, ``[BEGIN]``;
the three shots (task_id 2, 3, 4, lm-eval's ``first_n`` sampler over the prompt split) end their code in
``[DONE]``, the stop string. pass@1 as MBPP defines it: greedy completion passes iff the program
``test_imports + completion + every assert of test_list`` exits 0, run exactly as ``coding_humaneval`` runs its
programs (:func:`evalgate.suites.sandbox.run_python`, the same limits).
"""

from __future__ import annotations

import json
from pathlib import Path

import datasets

from evalgate.suites import scoring

DATA = Path(__file__).resolve().parent / "data" / "mbpp"
TIMEOUT_S = 10.0  # wall-clock seconds per program, as coding_humaneval; MBPP's asserts take well under 1 s


def read_split(name: str) -> list[dict]:
    """Problems of ``data/mbpp/<name>.jsonl`` (``test`` or ``prompt``) in task_id order: dicts with task_id,
    prompt (the problem text), code (the reference solution), test_imports, test_list (assert lines)."""
    with (DATA / f"{name}.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _item(p: dict) -> dict:
    tid = f"mbpp/{p['task_id']}"
    return {"id": tid, "doc_group": tid, "task_id": p["task_id"], "text": p["prompt"], "code": p["code"],
            "test_imports": p["test_imports"], "test_list": p["test_list"]}


def problem_chars(p: dict) -> int:
    """Characters of a problem's own part of the prompt: its text and the three asserts shown."""
    return len(p["prompt"]) + sum(len(a) for a in p["test_list"][:3])


def load_data(max_problem_chars: int | None = 2000, **_: object) -> dict[str, datasets.Dataset]:
    """lm-eval ``custom_dataset`` hook: ``{"test": the test problems, "prompt": the 7 few-shot problems}``, each with
    id = doc_group = ``"mbpp/<task_id>"``, task_id, text, code, test_imports, test_list.

    ``max_problem_chars`` (``dataset_kwargs``) leaves out test problems whose :func:`problem_chars` exceed it: at
    2000 (the default) one of the 257, task 462, whose 3-shot prompt (2,405 tokens of the embedded hybrid's
    tokenizer) does not fit the embedded models' 2,048-token window; ``null`` keeps all 257.
    """
    test = [p for p in read_split("test") if max_problem_chars is None or problem_chars(p) <= int(max_problem_chars)]
    return {"test": datasets.Dataset.from_list([_item(p) for p in test]),
            "prompt": datasets.Dataset.from_list([_item(p) for p in read_split("prompt")])}


def build_program(doc: dict, completion: str) -> str:
    """The program that passes iff ``completion`` solves ``doc``: its test imports, the completion, its asserts."""
    return "\n".join([*doc["test_imports"], completion, *doc["test_list"]]) + "\n"


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """Per-item metric from the completion ``results[0]`` (text up to the stop string ``[DONE]``): pass_at_1
    (1.0 iff every assert passes in the sandbox within ``TIMEOUT_S``)."""
    completion = results[0] if results else ""
    outcome = scoring.pool().run(build_program(doc, completion), timeout_s=TIMEOUT_S)
    return {"pass_at_1": float(outcome.passed)}


# Completions start in the sandbox pool as they are generated (evalgate.suites.scoring); process_results picks them up.
scoring.register_program("coding_mbpp", build_program, timeout_s=TIMEOUT_S)
