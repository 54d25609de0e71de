"""The long-task tables (docs/measurements/longgen.md) from ``evalgate run --suites longgen`` run directories.

Usage: ``python benchmarks/longgen_table.py RUN_DIR [RUN_DIR ...]``. Prints, per run, the row accuracy of both
sides with the paired Δ and its interval, the share of identical outputs, the decode-time KL (nats/token, along
the tokens both sides produced alike), and per output-position bucket: baseline and candidate accuracy of the
rows starting there, Δ, the share of items still identical through the bucket, and the bucket's mean KL. All
read from ``verdict.json`` (``tasks[].evidence.by_position``, ``divergence``, ``decode``); nothing recomputed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from evalgate.fmt import num


def _e(x: float | None) -> str:
    return "–" if x is None else f"{x:.1e}"


def table(run: Path) -> str:
    """One run's Markdown table (raises KeyError / FileNotFoundError on a run without the long task)."""
    v = json.loads((run / "verdict.json").read_text())
    t = next(t for t in v["tasks"] if t["task"] == "longgen_shipments")
    ev = t["evidence"]
    lines = [f"**{run.name}**: row_acc {t['baseline']:.1f} % → {t['candidate']:.1f} % (Δ {num(t['delta'], 2)} pts, "
             f"90 % CI [{num(t['ci_low'], 2)}, {num(t['ci_high'], 2)}]), identical outputs "
             f"{ev['divergence']['identical_share']:.0%}, decode KL mean {_e(ev['decode']['kl_mean'])} / max "
             f"{_e(ev['decode']['kl_max'])} nats/token; verdict {t['verdict']}", "",
             "| output tokens | baseline | candidate | Δ pts | identical | KL mean |", "|---|--:|--:|--:|--:|--:|"]
    for b in ev["by_position"]:
        if not b["reaching"]:
            lines.append(f"| {b['lo']}– | no output reaches it ({b['baseline']:.1f} % of its rows right) | | | | |")
            continue
        hi = "" if b["hi"] is None else b["hi"]
        lines.append(f"| {b['lo']}–{hi} | {b['baseline']:.1f} % | {b['candidate']:.1f} % | {num(b['delta'], 2)} | "
                     f"{b['identical_share']:.0%} | {_e(b['kl_mean'])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print("\n\n".join(table(Path(a)) for a in sys.argv[1:]))
