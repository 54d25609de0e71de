"""The notice `evalgate run --limit N` prints before any engine starts when at N items the run cannot PASS
(planner.limit_notice): its numbers against an independent computation of the gate's MDE floor, and its wiring
(one stderr line after the checks, before the baseline's engine; nothing without --limit or at a powered limit)."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from statistics import NormalDist

import pytest
import yaml

from evalgate import cli
from evalgate.commands import jobs
from evalgate.commands.plan import limit_notice
from evalgate.evaluate import runner

ROOT = Path(__file__).resolve().parents[2]


def _k(alpha: float = 0.05, power: float = 0.8) -> float:
    """z_{1-alpha} + z_power from the standard library (not scipy, as the product uses)."""
    return NormalDist().inv_cdf(1 - alpha) + NormalDist().inv_cdf(power)


def _least_items(margin: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """The fewest n with MDE floor (z_{1-alpha} + z_power) * 100 / n <= margin, by counting up (no closed form)."""
    n = 1
    while _k(alpha, power) * 100 / n > margin:
        n += 1
    return n


def _fp16_state_margins() -> dict[str, float]:
    """Per suite, the fp16-state margin read straight from the shipped thresholds.yaml."""
    raw = yaml.safe_load((ROOT / "thresholds.yaml").read_text())
    return {s: float(v["margin"]) for s, v in raw["configs"]["fp16-state"]["suites"].items()}


def test_the_least_items_by_hand() -> None:
    # The anchors the issue and the README quote: 40 items have an MDE floor of ~6.2 points; a 4-point margin
    # needs 63 items, a 3-point margin 83, a 2-point margin 125.
    assert round(_k() * 100 / 40, 1) == 6.2
    assert (_least_items(4.0), _least_items(3.0), _least_items(2.0), _least_items(6.0)) == (63, 83, 125, 42)


def test_at_40_items_no_fp16_state_task_can_pass_and_the_notice_names_the_least_powered_limit() -> None:
    margins = _fp16_state_margins()  # docparse 4, coding 6, finance 4, longgen 4
    tasks = [(f"{suite}_task", m, 0.05, None) for suite, m in margins.items()]
    notice = limit_notice(tasks, 40, 0.8)
    assert notice is not None
    assert notice.startswith("notice: at --limit 40 no task can PASS")
    need = max(_least_items(m) for m in margins.values())
    assert need == 63
    assert notice.endswith(f"every task could PASS from --limit {need}")
    assert f"{_k() * 100 / 40:.2f} pts or more" in notice  # the floor at n = 40: 6.22
    assert f"margin of {min(margins.values()):g}-{max(margins.values()):g} pts" in notice
    assert "\n" not in notice


@pytest.mark.parametrize("margin", [2.0, 3.0, 4.0, 5.0, 6.0, 2.5, 3.7])
def test_the_threshold_is_exactly_the_least_powered_limit(margin: float) -> None:
    need = _least_items(margin)
    tasks = [("t", margin, 0.05, None)]
    assert limit_notice(tasks, need, 0.8) is None
    assert limit_notice(tasks, need + 100, 0.8) is None
    notice = limit_notice(tasks, need - 1, 0.8)
    assert notice is not None and notice.endswith(f"from --limit {need}")


def test_the_tasks_alpha_and_the_power_enter_the_floor() -> None:
    # A task at alpha 0.01 and power 0.9 needs more items than the defaults for the same margin.
    need = _least_items(4.0, alpha=0.01, power=0.9)
    assert need == math.ceil(_k(0.01, 0.9) * 100 / 4.0) and need > _least_items(4.0)
    tasks = [("strict", 4.0, 0.01, None)]
    assert limit_notice(tasks, need, 0.9) is None
    assert limit_notice(tasks, need - 1, 0.9).endswith(f"from --limit {need}")


def test_some_tasks_unpowered_means_the_run_cannot_pass_and_names_them() -> None:
    # Coding's 6-point margin is powered from 42 items; the 4-point tasks are not at 50: PASS needs every task.
    tasks = [("coding_small", 6.0, 0.05, None), ("docparse_hard", 4.0, 0.05, None), ("finance_hard", 4.0, 0.05, None)]
    notice = limit_notice(tasks, 50, 0.8)
    assert notice is not None
    assert notice.startswith("notice: at --limit 50 the run cannot PASS: 2 of 3 tasks cannot (docparse_hard, "
                             "finance_hard:")
    assert "coding_small" not in notice
    assert f"{_k() * 100 / 50:.2f} pts or more" in notice and "margin of 4 pts" in notice
    assert notice.endswith("every task could PASS from --limit 63")
    assert limit_notice(tasks, 63, 0.8) is None


def test_a_suites_own_limit_caps_the_items_and_can_make_every_limit_too_small() -> None:
    # The suite YAML's `limit: 50` caps the task at 50 items whatever --limit says: no --limit makes it PASS.
    tasks = [("capped", 4.0, 0.05, 50), ("free", 4.0, 0.05, None)]
    notice = limit_notice(tasks, 500, 0.8)
    assert notice is not None and "1 of 2 tasks cannot (capped:" in notice
    assert notice.endswith("no --limit can make capped PASS (its margin or its suite's own limit is too small)")
    assert limit_notice([("capped", 4.0, 0.05, 63)], 500, 0.8) is None


# --- wiring: evalgate run prints it once, on stderr, before any engine starts ------------------------------------

class _EngineWouldStart(BaseException):
    """Raised where the baseline's engine would start (a BaseException: the CLI's error boundary lets it through)."""


@pytest.fixture
def no_engines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """vLLM's value pre-flight answers "no limits reported"; evaluating a side stops the run instead."""
    calls: list[str] = []
    monkeypatch.setattr(runner, "check_engine_values", lambda cfg, log_path, timeout_s: calls.append("check") or {})

    def evaluate(self, thresholds):  # noqa: ANN001
        calls.append("evaluate")
        raise _EngineWouldStart

    monkeypatch.setattr(jobs.EngineJob, "evaluate", evaluate)
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    return calls


def _run(argv: list[str], tmp_path: Path) -> None:
    with pytest.raises(_EngineWouldStart):
        cli.main(["run", "--config", "fp16-state", "--suites", "docparse", "coding", "--out", str(tmp_path / "r"),
                  *argv])


def _notices(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The notice records of logger "evalgate" (``cli.main`` sends them to stderr as "evalgate: <message>")."""
    return [r for r in caplog.records if r.name == "evalgate" and r.getMessage().startswith("notice:")]


def test_run_prints_the_notice_once_before_the_engine(no_engines: list[str], tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    _run(["--limit", "40"], tmp_path)
    assert no_engines == ["check", "evaluate"]
    notices = _notices(caplog)
    assert len(notices) == 1 and notices[0].levelno == logging.WARNING  # shown at the CLI's default level
    message = notices[0].getMessage()
    assert message.startswith("notice: at --limit 40 no task can PASS") and "\n" not in message
    assert message.endswith("every task could PASS from --limit 63")
    # The five tasks of docparse and coding have margins 4 and 6 (thresholds.yaml, fp16-state).
    assert "above every task's margin of 4-6 pts" in message


@pytest.mark.parametrize("argv", [[], ["--limit", "63"], ["--limit", "400"]])
def test_no_notice_without_a_limit_or_at_a_powered_one(argv: list[str], no_engines: list[str], tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    _run(argv, tmp_path)
    assert no_engines == ["check", "evaluate"] and _notices(caplog) == []


def test_the_notice_is_not_a_refusal(no_engines: list[str], tmp_path: Path) -> None:
    # At 3 items nothing can PASS, yet the run goes on to its engines (NO-OP and lossless BLOCKs need no power).
    _run(["--limit", "3"], tmp_path)
    assert no_engines == ["check", "evaluate"]  # a refusal would have ended before "evaluate"
