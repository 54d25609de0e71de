"""The rules that BLOCK whatever accuracy says (evalgate.gate.overrides): health, Bonferroni, floors, overrule."""

from __future__ import annotations

import numpy as np
import pytest

from evalgate.compare.evidence import HealthShift
from evalgate.compare.stats import paired_comparison
from evalgate.gate import Decision, Verdict, decide, health_alpha, health_failures, is_near_tie, overrule
from evalgate.inputs.thresholds import SpecDecodeFloors, SpeedFloors, Thresholds
from evalgate.speed.block import SpeedBlock

THR = Thresholds(alpha=0.05, default_margin=5.0, bootstrap_resamples=200)
SHARES = {"degenerate": (0.0, 0.5), "empty": (0.1, 0.2), "truncated": (0.0, 0.0)}


def _passing() -> Decision:
    same = np.r_[np.ones(150), np.zeros(50)]
    cmp = paired_comparison(same, same, alpha=0.05, rng=np.random.default_rng(0), interval="auto")
    d = decide([("s", "t", cmp)], THR.policy(None), baseline_effective={"a": 1}, candidate_effective={"a": 2})
    assert d.verdict is Verdict.PASS
    return d


def test_health_level_is_bonferroni_over_indicators_and_tasks() -> None:
    assert health_alpha([0.05, 0.01], 4) == pytest.approx(0.01 / 12)
    assert health_alpha([], 0) == pytest.approx(0.05 / 3)
    assert health_alpha([0.1], 2, n_indicators=5) == pytest.approx(0.01)


def test_health_failures_by_kind_and_level() -> None:
    shifts = [HealthShift("degenerate", 4, 0, 0.0625), HealthShift("empty", 1, 0, 0.5), HealthShift("truncated", 0, 0, 1)]
    fails, warns = health_failures(decode_nonfinite=2, prefill_nonfinite=0, shifts=shifts, shares=SHARES,
                                   lossless=False, alpha=0.1)
    assert fails[0] == "2 item(s) with NaN/inf log-probs while the candidate decoded"
    assert fails[1].startswith("degenerate outputs: 0% baseline, 50% candidate (4 item(s) newly degenerate, 0 "
                               "recovered; one-sided McNemar p=0.062 <= 0.1)")
    assert len(fails) == 2 and warns == ["empty outputs: 10% baseline, 20% candidate (1 item(s) newly empty, 0 "
                                         "recovered; one-sided McNemar p=0.5 > 0.1: not significant, not gated)"]
    # Lossless: one new degenerate item fails at any p; at a stricter level the lossy rise is only a warning.
    fails, _ = health_failures(decode_nonfinite=0, prefill_nonfinite=0, shifts=shifts[:1], shares=SHARES,
                               lossless=True, alpha=0.001)
    assert fails[0].endswith("a lossless switch must never make an output degenerate)")
    fails, warns = health_failures(decode_nonfinite=0, prefill_nonfinite=1, shifts=shifts[:1], shares=SHARES,
                                   lossless=False, alpha=0.05)
    assert fails == ["1 item(s) with NaN/inf log-probs under the candidate engine"] and len(warns) == 1


def test_overrule_puts_every_failure_first_and_keeps_a_no_op() -> None:
    d = _passing()
    assert overrule(d, {"t": []}, expect="lossy") is d
    speed = SpeedBlock.model_validate({"status": "measured",
                                       "levels": [{"concurrency": 4, "ratio": 1.0, "ci_low": 0.9, "ci_high": 1.1}]})
    spec = type("Spec", (), {"acceptance_rate": 0.2, "mean_acceptance_length": 1.6})()
    out = overrule(d, {"t": ["1 item(s) bad"]}, expect="lossy", spec=spec, speculative=True,
                   spec_floors=SpecDecodeFloors(0.5, None), speed=speed, speed_floors=SpeedFloors(min_speedup=1.2))
    assert out.verdict is Verdict.BLOCK and out.tasks == d.tasks
    assert [r.split(":")[0] for r in out.reasons] == ["t", "speculative decoding", "speed", "s/t"]
    assert out.reasons[1] == "speculative decoding: acceptance rate 20.0% < floor 50.0%"
    # A failed speed measurement is not checked against the floors (the run fails with exit 3 instead).
    assert overrule(d, {}, expect="lossy", speed=SpeedBlock(status="failed"), speed_floors=SpeedFloors(min_speedup=9)) is d
    # A floor on a candidate without speculative decoding does not apply.
    assert overrule(d, {}, expect="lossy", spec=None, speculative=False, spec_floors=SpecDecodeFloors(0.9, 3)) is d
    noop = Decision(Verdict.NO_OP, ("same",), d.tasks)
    assert overrule(noop, {"t": ["bad"]}, expect="lossy") is noop


def test_a_near_tie_is_at_most_the_tolerance() -> None:
    assert is_near_tie(0.01, 0.01) and not is_near_tie(0.0101, 0.01) and not is_near_tie(None, 1.0)
