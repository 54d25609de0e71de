"""Build the real-data subsets shipped in suites/*/data/ from the datasets as their authors publish them.

Run by hand (evalgate never runs it and its tests never read the sources)::

    python scripts/build_real_data.py --src DIR      # DIR holds mbpp/, tatqa/, finqa/ as published

The selection is deterministic (same sources, same bytes out); each dataset's README.md in suites/*/data/
says what was selected and why. Sizes are kept to a few hundred KB per dataset.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITES = ROOT / "suites"

# TAT-QA: contexts rendered longer than this (characters, see suites/finance/tatqa.py) are skipped so that three
# worked examples plus the item fit the embedded models' max_model_len of 2048 tokens; the first N that fit are kept.
TATQA_MAX_CONTEXT_CHARS = 2000
TATQA_CONTEXTS = 50


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")


def build_mbpp(src: Path) -> None:
    """MBPP sanitized: the test split (task_id 11-510, 257 problems) and the prompt split (task_id 1-10, 7)."""
    data = json.loads((src / "mbpp" / "sanitized-mbpp.json").read_text(encoding="utf-8"))
    keep = ("task_id", "prompt", "code", "test_imports", "test_list")
    rows = sorted(({k: p[k] for k in keep} for p in data), key=lambda p: p["task_id"])
    out = SUITES / "coding" / "data" / "mbpp"
    _write_jsonl(out / "test.jsonl", [p for p in rows if 11 <= p["task_id"] <= 510])
    _write_jsonl(out / "prompt.jsonl", [p for p in rows if 1 <= p["task_id"] <= 10])


def _load_module(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_tatqa(src: Path) -> None:
    """TAT-QA dev: the first TATQA_CONTEXTS contexts (file order) whose rendered context fits, all their questions;
    three few-shot questions from the shortest remaining contexts (one span, one multi-span, one arithmetic)."""
    tatqa = _load_module(SUITES / "finance" / "tatqa.py")
    data = json.loads((src / "tatqa" / "tatqa_dataset_dev.json").read_text(encoding="utf-8"))
    fits = [c for c in data if len(tatqa.render_context(c)) <= TATQA_MAX_CONTEXT_CHARS]
    test = fits[:TATQA_CONTEXTS]
    rest = sorted((c for c in data if c not in test), key=lambda c: (len(tatqa.render_context(c)), c["table"]["uid"]))
    shots = []
    for answer_type in ("span", "multi-span", "arithmetic"):
        ctx, q = next((c, q) for c in rest for q in c["questions"] if q["answer_type"] == answer_type
                      and all(c is not s[0] for s in shots))
        shots.append((ctx, q))
    out = SUITES / "finance" / "data" / "tatqa"
    _write_jsonl(out / "dev_subset.jsonl", test)
    _write_jsonl(out / "fewshot.jsonl", [{**c, "questions": [q]} for c, q in shots])


def build_finqa(src: Path) -> None:
    """FinQA test subset: every question, the original fields the task reads (not the page's full text). Three
    worked examples (the shortest retrieved-facts context with a 1-, 2- and 3-step program whose numbers all appear
    in its facts) are written apart and left out of the test file."""
    data = json.loads((src / "finqa" / "finqa_test.json").read_text(encoding="utf-8"))
    rows = [{"id": e["id"], "table": e["table"],
             "qa": {k: e["qa"][k] for k in ("question", "answer", "program", "exe_ans", "gold_inds", "model_input")}}
            for e in data]

    def facts_len(e: dict) -> int:
        return sum(len(t) for _, t in e["qa"]["model_input"])

    def steps(e: dict) -> int:
        return e["qa"]["program"].count("(")

    def supported(e: dict) -> bool:  # a worked example must show facts that hold every number its program uses
        text = " ".join(t for _, t in e["qa"]["model_input"])
        args = [a.strip() for inner in re.findall(r"\(([^()]*)\)", e["qa"]["program"]) for a in inner.split(",")]
        return all(a.startswith(("const_", "#")) or a in text for a in args)

    shots = [min((e for e in rows if steps(e) == k and supported(e)), key=lambda e: (facts_len(e), e["id"]))
             for k in (1, 2, 3)]
    shot_ids = {e["id"] for e in shots}
    out = SUITES / "finance" / "data" / "finqa"
    _write_jsonl(out / "test_subset.jsonl", [e for e in rows if e["id"] not in shot_ids])
    _write_jsonl(out / "fewshot.jsonl", shots)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", required=True, type=Path, help="folder holding mbpp/, tatqa/, finqa/ as published")
    args = p.parse_args()
    build_mbpp(args.src)
    build_tatqa(args.src)
    build_finqa(args.src)


if __name__ == "__main__":
    main()
