"""The verdict builder (evalgate.report.document): the gate's health level, escalation and NO-OP sentences end up in it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from evalgate.compare.pairing import compare_tasks  # noqa: E402
from evalgate.gate import decide  # noqa: E402
from evalgate.inputs.thresholds import Thresholds  # noqa: E402
from evalgate.report.verdict import Verdict  # noqa: E402
from runfixtures import (  # noqa: E402
    manifest,
    side,
    task,
    verdict_of,  # noqa: E402
)

THR = Thresholds(alpha=0.05, default_margin=50.0, bootstrap_resamples=200, on_inconclusive="warn")
N, WORSE = 40, 6  # six items newly degenerate, none recovered: one-sided McNemar p = 0.5^6 = 0.0156


def _verdict(tasks: list[str], same_config: bool = False) -> Verdict:
    base = {t: task(t, "s", ["fine"] * N, [1.0] * N) for t in tasks}
    cand = {t: task(t, "s", ["0 " * 20] * WORSE + ["fine"] * (N - WORSE), [1.0] * N) for t in tasks}
    comps = compare_tasks(base, cand, THR.policy(None))
    b, c = side("baseline", "float32"), side("cand", "float32" if same_config else "bfloat16")
    if same_config:
        c["requested"] = {"engine_args": {"dtype": "float32", "async_scheduling": True}, "sampling": b["requested"]["sampling"]}
    decision = decide([(x.suite, x.task, x.comparison) for x in comps], THR.policy(None), baseline_effective=b["effective"],
                      candidate_effective=c["effective"])
    return verdict_of(decision, comps, manifest(b, c, tasks))


def test_the_health_level_is_corrected_for_the_number_of_tasks() -> None:
    assert 0.05 / (3 * 2) < 0.5**WORSE <= 0.05 / 3
    one = _verdict(["a"])
    assert one.verdict == "BLOCK" and one.reasons[0].startswith("a: degenerate outputs: 0% baseline, 15% candidate")
    assert one.reasons[0].endswith(f"p={0.5**WORSE:.2g} <= {0.05 / 3:.2g})")
    two = _verdict(["a", "b"])  # the same shift is now only a warning on each task
    # No score changed (delta 0) and the MDE at n=40 is the floor's, 2.486 * 100/40 = 6.2 <= margin 50: PASS.
    assert two.verdict == "PASS" and [t.verdict for t in two.tasks] == ["PASS", "PASS"]
    assert all(t.evidence.failures == [] for t in two.tasks)
    assert two.tasks[0].evidence.contradictions[-1].endswith(f"> {0.05 / 6:.2g}: not significant, not gated)")


def test_a_no_op_is_never_escalated_and_says_what_the_engine_applied() -> None:
    v = _verdict(["a"], same_config=True)
    assert v.verdict == "NO-OP" and v.tasks[0].evidence.failures and not v.tasks[0].gated
    assert v.reasons[-1] == ("engine_args.async_scheduling: requested True (baseline: <absent>), but the engine applied "
                             "not reported to both")
