"""`evalgate plan` at full size: each task's recorded baseline accuracy, items and MDE, from a pilot or an assumed
discordance (power.mde_at_discordance)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy.stats import norm

from evalgate.cli import main
from evalgate.compare.power import items_needed_at_discordance, mde_at_discordance
from evalgate.results.records import ItemResult, TaskResult
from evalgate.results.store import tasks_to_json, write_json_atomic

K = norm.ppf(0.95) + norm.ppf(0.8)  # z_{1-alpha} + z_{power} from scipy, not evalgate.compare.power's z_sum


def test_mde_at_discordance_by_hand() -> None:
    assert mde_at_discordance(0.03, 400, 0.05, 0.8) == pytest.approx(K * 100 * math.sqrt(0.03 / 400))
    assert mde_at_discordance(0.03, 400, 0.05, 0.8) == pytest.approx(2.153, abs=1e-3)
    assert mde_at_discordance(0.0, 100, 0.05, 0.8) == pytest.approx(K)  # the floor: one changed item in 100
    assert mde_at_discordance(0.001, 100, 0.05, 0.8) == pytest.approx(K)  # sqrt(0.001/100) < 1/100: floor wins
    for bad in ((-0.1, 10), (1.5, 10), (0.1, 0)):
        with pytest.raises(ValueError):
            mde_at_discordance(bad[0], bad[1], 0.05, 0.8)


def _suites(root: Path) -> Path:
    (root / "s").mkdir(parents=True)
    (root / "s" / "a.yaml").write_text(
        "task: a\ncustom_dataset: !function utils.load_data\ndataset_kwargs: {n: 400}\ntest_split: test\n"
        "metric_list: [{metric: m}]\nmetadata:\n  version: 1.0\n  evalgate:\n"
        "    baseline_accuracy: {\"embedded:nemotron-h-tiny\": 0.42, other: 0.9}\n    measured: \"2026-12-01, here\"\n")
    (root / "s" / "b.yaml").write_text(
        "task: b\ncustom_dataset: !function utils.load_data\ndataset_kwargs: {n: 100}\ntest_split: test\n"
        "metric_list: [{metric: m}]\n")
    (root / "s" / "utils.py").write_text("def load_data(n, **_):\n    return {'test': [{'id': i} for i in range(n)]}\n")
    return root


def _configs(root: Path) -> list[str]:
    root.mkdir(parents=True)
    (root / "baseline.yaml").write_text("model: embedded:nemotron-h-tiny\n")
    (root / "cand.yaml").write_text("extends: baseline\nexpect: lossy\n")
    return ["--configs-dir", str(root)]


def _row(out: str, task: str) -> list[str]:
    return next(line for line in out.splitlines() if line.startswith(task + " ")).split()


def test_plan_without_a_pilot_at_an_assumed_discordance(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALGATE_SUITES", str(_suites(tmp_path / "suites")))
    monkeypatch.chdir(tmp_path)  # no runs/ here
    cfgs = _configs(tmp_path / "configs")
    assert main(["plan", "--config", "cand", "--margin", "3", "--assume-discordance", "0.03", *cfgs]) == 0
    out = capsys.readouterr().out
    assert "assuming 3 % of items change score" in out and "an assumption, not a measurement" in out
    out = out.split("at full size, MDE at the assumed discordance", 1)[1]
    a, b = _row(out, "s/a"), _row(out, "s/b")
    # 42 % recorded for the config's model; 400 items; MDE K * 100 * sqrt(0.03 / 400) = 2.15; default margin 2
    assert a[:5] == ["s/a", "42.0%", "400", f"{K * 100 * math.sqrt(0.03 / 400):.2f}", "2"]
    assert " ".join(a[5:]) == "2026-12-01, here"
    assert b[:5] == ["s/b", "-", "100", f"{K * 100 * math.sqrt(0.03 / 100):.2f}", "2"]
    assert main(["plan", "--config", "cand", "--margin", "3", "--assume-discordance", "1.5", *cfgs]) == 2
    assert "--assume-discordance: must be a share in [0, 1]" in capsys.readouterr().err
    assert main(["plan", "--config", "cand", "--margin", "3", "--assume-discordance", "0.1", "--from", "x", *cfgs]) == 2
    assert main(["plan", "--config", "cand", "--margin", "3", *cfgs]) == 2  # no pilot and no assumption
    assert "--assume-discordance" in capsys.readouterr().err


def _least_items(p: float, margin: float) -> int:
    """The least n whose MDE at discordance p, K * max(100 * sqrt(p / n), 100 / n), is within ``margin``: by search."""
    n = 1
    while K * max(100 * math.sqrt(p / n), 100 / n) > margin:
        n += 1
    return n


def test_items_needed_at_discordance_is_the_least_powered_size() -> None:
    for p in (0.0, 0.001, 0.03, 0.05, 0.2, 1.0):
        for margin in (1.0, 2.0, 3.0, 4.5, 5.0, 10.0):
            assert items_needed_at_discordance(p, margin, 0.05, 0.8) == _least_items(p, margin), (p, margin)
    assert items_needed_at_discordance(0.03, 1.0, 0.05, 0.8) == 1855  # the worked figure of docs/concepts/how-evalgate-decides.md
    assert items_needed_at_discordance(0.05, 0.0, 0.05, 0.8) is None
    for bad in ((-0.1, 2.0), (1.5, 2.0), (0.1, -1.0)):
        with pytest.raises(ValueError):
            items_needed_at_discordance(bad[0], bad[1], 0.05, 0.8)


@pytest.mark.parametrize("margin", [1.5, 3.0, 5.0])
def test_plan_at_an_assumed_discordance_follows_the_margin(margin: float, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALGATE_SUITES", str(_suites(tmp_path / "suites")))
    monkeypatch.chdir(tmp_path)
    cfgs = _configs(tmp_path / "configs")
    assert main(["plan", "--config", "cand", "--margin", f"{margin:g}", "--assume-discordance", "0.03", *cfgs]) == 0
    out = capsys.readouterr().out
    need = _least_items(0.03, margin)  # 825 at 1.5 points, 207 at 3, 75 at 5
    assert f"items needed for a {margin:g}-point margin" in out
    plan_table = out.split("\nat full size", 1)[0]
    assert _row(plan_table, "s/a") == ["s/a", "0.05", str(need), "400"]
    assert _row(plan_table, "s/b") == ["s/b", "0.05", str(need), "100"]
    for task, size in (("a", 400), ("b", 100)):
        short = f"s/{task}: needs {need} items; suite has {size}: cannot be powered at a {margin:g}-point margin"
        assert (short in out) == (need > size), (task, need)
        if need > size:  # the margin the whole suite can be powered for: its MDE at full size, rounded up
            least = math.ceil(K * 100 * math.sqrt(0.03 / size) * 10) / 10
            assert f"{short}; raise the margin to {least:.1f} pts or more" in out


def test_plan_from_a_pilot_adds_the_full_size_table(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALGATE_SUITES", str(_suites(tmp_path / "suites")))
    base = [1.0] * 20 + [0.0] * 20
    cand = [0.0] + [1.0] * 19 + [1.0] + [0.0] * 19  # 2 of 40 changed: discordance 5 %
    run = tmp_path / "run"
    for role, name, scores in (("baseline", "baseline", base), ("candidate", "cand", cand)):
        items = tuple(ItemResult(task="a", item_id=i, item_hash=f"a{i}", prompt="p", target="t", output="o", score=s)
                      for i, s in enumerate(scores))
        write_json_atomic(run / f"{role}.json", {"config": name, "effective": {},
                                                 "tasks": tasks_to_json({"a": TaskResult("a", "s", "m", items)})})
    write_json_atomic(run / "manifest.json", {"model": "other"})
    assert main(["plan", "--config", "cand", "--margin", "3", "--from", str(run), *_configs(tmp_path / "c")]) == 0
    out = capsys.readouterr().out.split("at full size", 1)[1]
    row = _row(out, "s/a")
    # the pilot's model (manifest) picks the recorded accuracy; MDE of all 400 items at 2/40 discordance
    assert row[:5] == ["s/a", "90.0%", "400", f"{K * 100 * math.sqrt(0.05 / 400):.2f}", "2"]


def test_plan_defaults_to_each_tasks_margin_from_the_thresholds(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --margin, each task is planned for the margin the gate would apply to the config, and a line says
    which margin that is and which key of which file set it; --margin still applies one margin to every task."""
    monkeypatch.setenv("EVALGATE_SUITES", str(_suites(tmp_path / "suites")))
    monkeypatch.chdir(tmp_path)
    cfgs = _configs(tmp_path / "configs")
    thr = tmp_path / "thresholds.yaml"
    thr.write_text("alpha: 0.05\npower: 0.8\ndefault: {margin: 2.0}\n"
                   "configs:\n  cand: {margin: 3.0, tasks: {b: {margin: 5.0}}}\n")
    assert main(["plan", "--config", "cand", "--assume-discordance", "0.03", "--thresholds", str(thr), *cfgs]) == 0
    out = capsys.readouterr().out
    assert "items needed for each task's margin" in out
    assert (f"margin: each task's own, as the gate applies it (no --margin), from {thr}: 3 pts for a "
            "(configs.cand.margin); 5 pts for b (configs.cand.tasks.b.margin)") in out
    plan_table = out.split("\nat full size", 1)[0]
    assert _row(plan_table, "s/a") == ["s/a", "0.05", str(_least_items(0.03, 3.0)), "400"]
    assert _row(plan_table, "s/b") == ["s/b", "0.05", str(_least_items(0.03, 5.0)), "100"]
    assert main(["plan", "--config", "cand", "--margin", "4", "--assume-discordance", "0.03", "--thresholds", str(thr),
                 *cfgs]) == 0
    out = capsys.readouterr().out
    assert "margin: 4 pts for every task (--margin)" in out
    assert _row(out.split("\nat full size", 1)[0], "s/b")[2] == str(_least_items(0.03, 4.0))
