"""``evalgate score``: one config alone. The runner is stubbed (no engine); the intervals are recomputed here from
their closed forms (Wilson 1927; Student t with the CR1 cluster-robust standard error), not through evalgate."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy.stats import norm
from scipy.stats import t as student_t

import evalgate.evaluate.runner
from evalgate import cli
from evalgate.commands.score import INTERVAL_MEAN, INTERVAL_WILSON, task_score
from evalgate.results.records import ItemResult, TaskResult

G = Path(__file__).resolve().parents[1] / "bad_inputs" / "good"


def _task(name: str, suite: str, scores: list[float], clusters: list[str | None] | None = None) -> TaskResult:
    clusters = clusters or [None] * len(scores)
    items = tuple(ItemResult(task=name, item_id=i, item_hash=f"h{name}{i}", prompt="p", target="t", output="o",
                             score=s, metrics={"exact_match": s}, cluster=c)
                  for i, (s, c) in enumerate(zip(scores, clusters)))
    return TaskResult(task=name, suite=suite, metric="exact_match", items=items)


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    """Wilson's score interval written out: (p + z²/2n ∓ z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)."""
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


def test_binary_task_gets_the_wilson_interval() -> None:
    s = task_score(_task("t", "s", [1.0] * 7 + [0.0] * 13))
    lo, hi = _wilson(7, 20, norm.ppf(0.975))
    assert (s.items, s.correct, s.interval, s.warning) == (20, 7, INTERVAL_WILSON, None)
    assert s.mean == pytest.approx(35.0)
    assert (s.low, s.high) == (pytest.approx(100 * lo), pytest.approx(100 * hi))
    assert 100 * lo == pytest.approx(18.12, abs=0.01) and 100 * hi == pytest.approx(56.71, abs=0.01)


def test_graded_task_gets_the_t_interval_with_clustered_se() -> None:
    scores = [0.5, 1.0, 0.0, 0.25, 0.75, 1.0]
    clusters = ["a", "a", "b", "b", "c", "c"]
    s = task_score(_task("t", "s", scores, clusters))
    mean = sum(scores) / 6  # 0.5833
    sums = [sum(x - mean for x, c in zip(scores, clusters) if c == g) for g in "abc"]
    se = math.sqrt(3 / 2 * sum(v * v for v in sums)) / 6
    q = student_t.ppf(0.975, 2)
    assert (s.interval, s.correct, s.items, s.clusters) == (INTERVAL_MEAN, None, 6, 3)
    assert s.mean == pytest.approx(100 * mean)
    assert s.low == pytest.approx(100 * max(0.0, mean - q * se))
    assert s.high == pytest.approx(100 * min(1.0, mean + q * se))


@pytest.mark.parametrize(("scores", "fragment"), [
    ([0.0] * 20, "docparse_x: 0/20 correct: the gate cannot see a loss on it"),
    ([1.0] * 5, "docparse_x: 5/5 correct: at the ceiling, the gate cannot see a gain on it"),
    ([0.0, 0.0], "docparse_x: 0/2 correct"),
])
def test_a_task_at_0_or_100_percent_is_warned_about(scores: list[float], fragment: str) -> None:
    assert fragment in (task_score(_task("docparse_x", "s", scores)).warning or "")


def _stub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tasks: dict[str, TaskResult]) -> list[dict]:
    calls: list[dict] = []

    def evaluate_config(cfg, suites, **kw):
        calls.append({"config": cfg.name, "suites": [s.name for s in suites], **kw})
        return evalgate.evaluate.runner.ConfigRun(config=cfg, tasks=tasks, effective={"engine_args": {"dtype": "float32"}},
                                         cached=["s2"], device={"platform": "cpu"})

    monkeypatch.setattr(evalgate.evaluate.runner, "evaluate_config", evaluate_config)
    monkeypatch.setattr("evalgate.commands.score.check_suites", lambda suites, **kw: {"seconds": 0.0, "tasks": {}})
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    return calls


def test_score_command_prints_the_table_warns_and_writes_score_json(monkeypatch, tmp_path: Path, capsys,
                                                                   caplog) -> None:
    tasks = {"s1_task": _task("s1_task", "s1", [1.0, 0.0, 1.0, 1.0]), "s2_task": _task("s2_task", "s2", [0.0] * 3)}
    calls = _stub(monkeypatch, tmp_path, tasks)
    out = tmp_path / "run"
    code = cli.main(["score", "--config", "baseline", "--configs-dir", str(G / "configs"), "--suites-dir",
                     str(G / "suites"), "--limit", "4", "--logprob-items", "2", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    # the baseline side as `run` computes it: no reference, the same limit and log-prob items (so the same store key)
    assert calls == [{"config": "baseline", "suites": ["s1", "s2"], "limit": 4, "store": calls[0]["store"],
                      "log_path": out / "logs" / "score.log", "timeout_s": 3 * 3600, "reference": None,
                      "logprob_items": 2}]
    lo, hi = _wilson(3, 4, norm.ppf(0.975))
    rows = {line.split()[0]: line.split() for line in captured.out.splitlines() if line.startswith("s")}
    assert rows["s1_task"][:5] == ["s1_task", "s1", "exact_match", "3/4", "75.0"]
    assert " ".join(rows["s1_task"][5:7]) == f"[{100 * lo:.1f}, {100 * hi:.1f}]"
    assert rows["s2_task"][3:6] == ["0/3", "0.0", "[0.0,"]
    assert "warning: s2_task: 0/3 correct: the gate cannot see a loss on it" in captured.out
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "s2_task: 0/3 correct: the gate cannot see a loss on it"]  # one warning line per such task
    doc = json.loads((out / "score.json").read_text())
    assert doc["config"] == "baseline" and doc["limit"] == 4 and doc["cached_suites"] == ["s2"]
    assert [t["task"] for t in doc["tasks"]] == ["s1_task", "s2_task"]
    t1 = doc["tasks"][0]
    assert (t1["correct"], t1["items"], t1["interval"]) == (3, 4, INTERVAL_WILSON)
    assert (t1["low"], t1["high"]) == (pytest.approx(100 * lo), pytest.approx(100 * hi))
    assert doc["warnings"] == ["s2_task: 0/3 correct: the gate cannot see a loss on it"]
    md = (out / "summary.md").read_text()
    assert "| s1_task | s1 | exact_match | 3/4 | 75.0 |" in md and "0/3 correct: the gate cannot see a loss" in md
    assert "verdict" not in json.dumps(doc)


def test_score_needs_no_baseline_and_escapes_markdown(monkeypatch, tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "alone.yaml"
    cfg.write_text((G / "configs" / "baseline.yaml").read_text())
    calls = _stub(monkeypatch, tmp_path, {"s1_task": _task("s1_task", "s1", [0.5, 1.0])})
    out = tmp_path / "run"
    assert cli.main(["score", "--config", str(cfg), "--suites-dir", str(G / "suites"), "--suites", "s1",
                     "--out", str(out)]) == 0
    assert calls[0]["suites"] == ["s1"] and calls[0]["limit"] is None
    doc = json.loads((out / "score.json").read_text())
    assert doc["tasks"][0]["interval"] == INTERVAL_MEAN and doc["warnings"] == []


def test_one_document_has_no_interval_and_the_table_says_why() -> None:
    from evalgate.commands.score import render_table

    s = task_score(_task("t", "s", [1.0, 0.0, 1.0], ["doc-a"] * 3))
    assert (s.interval, s.clusters, s.mean) == (INTERVAL_MEAN, 1, pytest.approx(200 / 3))
    assert math.isnan(s.low) and math.isnan(s.high)
    row = next(line for line in render_table("c", [s]).splitlines() if line.startswith("t "))
    assert row.split()[3:9] == ["2/3", "66.7", "n/a", "(1", "document)", "t,"]
