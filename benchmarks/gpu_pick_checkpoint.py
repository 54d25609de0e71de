"""Pick the retrained hybrid checkpoint that makes the most suites informative (issue 15), from device runs.

Usage: python benchmarks/gpu_pick_checkpoint.py NAME=RUN_DIR[,RUN_DIR...] ...  -> prints JSON, last line the name.
A suite counts as informative when one of its tasks has an FP32 baseline score in [0.2, 0.8] (the verdict's
``baseline`` of the primary metric). Ties go to the first name; a name without a readable verdict scores -1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def baselines(run_dirs: list[str]) -> dict[str, tuple[str, float]]:
    """task -> (suite, baseline score) over the given run directories' verdict.json files."""
    out: dict[str, tuple[str, float]] = {}
    for d in run_dirs:
        path = Path(d) / "verdict.json"
        if path.is_file():
            for t in json.loads(path.read_text())["tasks"]:
                if t.get("baseline") is not None:
                    out[t["task"]] = (t["suite"], float(t["baseline"]))
    return out


def score(tasks: dict[str, tuple[str, float]]) -> tuple[int, float]:
    """(informative suites, -distance of the coding and longgen tiers from 0.5) for ranking."""
    if not tasks:
        return -1, 0.0
    suites = {s for s, b in tasks.values() if 0.2 <= b <= 0.8}
    dist = sum(abs(tasks[t][1] - 0.5) for t in ("coding_small", "longgen_shipments") if t in tasks)
    return len(suites), -dist


def main(argv: list[str]) -> str:
    rows = {}
    for arg in argv:
        name, _, dirs = arg.partition("=")
        tasks = baselines(dirs.split(","))
        rows[name] = {"tasks": tasks, "score": score(tasks)}
    best = max(rows, key=lambda n: rows[n]["score"])  # max keeps the first of equal scores
    print(json.dumps(rows, indent=1))
    print(best)
    return best


if __name__ == "__main__":
    main(sys.argv[1:])
