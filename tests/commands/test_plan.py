"""`evalgate plan` and compare.plan_tasks: items needed from a pilot's discordance; clusters end to end."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from evalgate.cli import main
from evalgate.commands.plan import pilot_cost
from evalgate.compare.pairing import TaskPlan, compare_tasks, plan_tasks
from evalgate.inputs.thresholds import Thresholds
from evalgate.results.records import ItemResult, TaskResult
from evalgate.results.store import tasks_from_json, tasks_to_json, write_json_atomic
from evalgate.worker.suite_eval import _cluster

K = norm.ppf(0.95) + norm.ppf(0.8)  # z_{1-alpha} + z_{power} (alpha 0.05, power 0.8), not evalgate.compare.power's z_sum


def _task(name: str, suite: str, scores: list[float], clusters: list[str | None] | None = None,
          outputs: list[str] | None = None) -> TaskResult:
    clusters = clusters or [None] * len(scores)
    outputs = outputs or ["out"] * len(scores)
    return TaskResult(task=name, suite=suite, metric="m", items=tuple(
        ItemResult(task=name, item_id=i, item_hash=f"{name}-{i}", prompt="p", target="t", output=o, score=s,
                   cluster=c) for i, (s, c, o) in enumerate(zip(scores, clusters, outputs))))


def _pilot() -> tuple[dict[str, TaskResult], dict[str, TaskResult]]:
    """400 binary items with 12 flips (6 each way, 3 %); 400 clustered items (100 docs of 4) with 2 flipped docs."""
    base_a = [1.0] * 200 + [0.0] * 200
    cand_a = list(base_a)
    for i in range(6):
        cand_a[i], cand_a[200 + i] = 0.0, 1.0
    docs = [f"doc{i // 4}" for i in range(400)]
    base_b = [1.0] * 400
    cand_b = [0.0] * 8 + [1.0] * 392  # documents 0 and 1 lost all four questions
    base = {"a": _task("a", "s", base_a), "b": _task("b", "f", base_b, docs)}
    cand = {"a": _task("a", "s", cand_a), "b": _task("b", "f", cand_b, docs)}
    return base, cand


def test_plan_binary_task_closed_form() -> None:
    base, cand = _pilot()
    plans = {p.task: p for p in plan_tasks(base, cand, Thresholds(alpha=0.05, default_margin=2.0).policy(None), margin=1.0)}
    a = plans["a"]
    assert (a.n, a.changed, a.n_clusters, a.clusters_needed) == (400, 12, 400, None)
    assert a.se == pytest.approx(100 * math.sqrt(12 / 400) / math.sqrt(400))
    assert a.items_needed == math.ceil(1e4 * 0.03 * K ** 2) == 1855


def test_plan_clustered_task_counts_documents() -> None:
    base, cand = _pilot()
    b = plan_tasks(base, cand, Thresholds(alpha=0.05, default_margin=2.0).policy(None), margin=1.0)[1]
    d = np.array([-1.0] * 8 + [0.0] * 392)
    sums = np.bincount(np.arange(400) // 4, weights=d - d.mean())
    se = 100 * math.sqrt(100 / 99 * float(np.sum(sums**2))) / 400
    assert (b.n_clusters, b.changed) == (100, 8)
    assert b.se == pytest.approx(se)
    assert b.items_needed == math.ceil(400 * se**2 * K ** 2)
    assert b.clusters_needed == math.ceil(b.items_needed / 4)


def _write_pilot(run: Path, config: str = "x") -> None:
    """A pilot run directory as ``evalgate run --config <config>`` writes it (each side names its config)."""
    base, cand = _pilot()
    for role, name, tasks in (("baseline", "baseline", base), ("candidate", config, cand)):
        write_json_atomic(run / f"{role}.json", {"config": name, "effective": {}, "tasks": tasks_to_json(tasks)})


def _configs(root: Path, *names: str) -> list[str]:
    """``--configs-dir`` holding (empty) configs ``names``: ``plan`` only checks that they exist."""
    root.mkdir(parents=True, exist_ok=True)
    for n in names:
        (root / f"{n}.yaml").write_text("")
    return ["--configs-dir", str(root)]


def test_cli_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "runs" / "bf16-20260101T000000Z"
    _write_pilot(run, "bf16")
    monkeypatch.chdir(tmp_path)
    cfgs = _configs(tmp_path / "configs", "bf16", "ngram")
    assert main(["plan", "--config", "bf16", "--margin", "1", *cfgs]) == 0  # newest runs/bf16-* by default
    out = capsys.readouterr().out
    assert "s/a" in out and "1855" in out and "docs)" in out
    assert main(["plan", "--config", "bf16", "--margin", "1", "--from", str(run)]) == 0
    assert main(["plan", "--config", "ngram", "--margin", "1", *cfgs]) == 2
    assert "no pilot run of 'ngram'" in capsys.readouterr().err
    assert main(["plan", "--config", "bf16", "--margin", "0", "--from", str(run)]) == 2


def test_plan_from_a_pilot_defaults_to_the_gates_margins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cand = _pilot()
    thr = Thresholds(alpha=0.05, default_margin=2.0)
    planned = {p.task: p for p in plan_tasks(base, cand, thr.policy(None), margin=None)}
    explicit = {p.task: p for p in plan_tasks(base, cand, thr.policy(None), margin=2.0)}
    assert {t: p.margin for t, p in planned.items()} == {"a": 2.0, "b": 2.0} and planned == explicit
    run = tmp_path / "run"
    _write_pilot(run)
    (tmp_path / "thresholds.yaml").write_text("alpha: 0.05\ndefault: {margin: 2.0}\nsuites: {s: {margin: 7.0}}\n")
    thresholds = ["--thresholds", str(tmp_path / "thresholds.yaml")]
    assert main(["plan", "--config", "x", "--from", str(run), *thresholds]) == 0
    out = capsys.readouterr().out
    assert "margin: each task's own, as the gate applies it (no --margin), from " in out
    assert "7 pts for a (suites.s.margin); 2 pts for b (default.margin)" in out

    def row(text: str, task: str) -> str:
        return next(line for line in text.splitlines() if line.startswith(task + " "))

    for task, margin in (("s/a", "7"), ("f/b", "2")):  # each row as --margin would plan it for that task alone
        assert main(["plan", "--config", "x", "--from", str(run), "--margin", margin, *thresholds]) == 0
        assert row(out, task) == row(capsys.readouterr().out, task)


def test_cli_plan_refuses_a_pilot_of_another_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "runs" / "mtp1-20260101T000000Z"
    _write_pilot(run, "mtp1")
    cfgs = _configs(tmp_path / "configs", "mtp1", "fp16-state")
    assert main(["plan", "--config", "fp16-state", "--margin", "1", "--from", str(run), *cfgs]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"evalgate: error: --config: pilot run {run} gated config 'mtp1', not 'fp16-state'; "
                            "pass --config mtp1 or a run of fp16-state\n")
    # The same config named by its file: accepted.
    assert main(["plan", "--config", str(tmp_path / "configs" / "mtp1.yaml"), "--margin", "1", "--from", str(run),
                 *cfgs]) == 0
    # A config that does not exist is said so, whether or not a pilot is given, and no run is suggested.
    for extra in ([], ["--from", str(run)]):
        capsys.readouterr()
        assert main(["plan", "--config", "nosuch", "--margin", "1", *extra, *cfgs]) == 2
        err = capsys.readouterr().err
        assert err.startswith("evalgate: error: --config: config 'nosuch' not found in ") and err.count("\n") == 1
        assert "evalgate run" not in err
    assert main(["plan", "--config", "mtp", "--margin", "1", *cfgs]) == 2
    assert "did you mean 'mtp1'?" in capsys.readouterr().err


def test_cluster_field_round_trips_and_old_records_load() -> None:
    t = _task("x", "s", [1.0, 0.0], ["d0", "d0"])
    back = tasks_from_json(tasks_to_json({"x": t}), "mem")["x"]
    assert back == t and back.items[0].cluster == "d0"
    old = tasks_to_json({"x": t})
    for item in old["x"]["items"]:
        del item["cluster"]  # a record stored before clusters existed
    assert [i.cluster for i in tasks_from_json(old, "mem")["x"].items] == [None, None]


def test_runner_reads_doc_group() -> None:
    assert _cluster({"doc": {"doc_group": "fin-003", "id": "fin-003-q1"}}) == "fin-003"
    assert _cluster({"doc": {"id": 7}}) is None and _cluster({}) is None
    assert _cluster({"doc": {"doc_group": 12}}) == "12"


def test_compare_uses_clusters_and_lists_differing_outputs() -> None:
    base, cand = _pilot()
    cand["a"] = _task("a", "s", [x.score for x in cand["a"].items], outputs=["out"] * 399 + ["other"])
    comps = {c.task: c for c in compare_tasks(base, cand, Thresholds(alpha=0.05, default_margin=2.0,
                                                                       bootstrap_resamples=1000).policy(None))}
    assert comps["b"].comparison.n_clusters == 100 and comps["a"].comparison.n_clusters == 400
    agree = comps["a"].agreement()
    assert (agree.identical, agree.n, agree.differing) == (399, 400, (399,))


def test_plan_without_any_change_reports_the_floor_not_an_estimate(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """40 identical items: nothing to extrapolate from; the figure is the floor ceil(100 K / m), whatever n is."""
    thr = Thresholds(alpha=0.05, default_margin=2.0)
    for n in (3, 40):
        base = {"a": _task("a", "s", [1.0] * n)}
        (p,) = plan_tasks(base, base, thr.policy(None), margin=2.0)
        assert (p.changed, p.items_needed, p.basis) == (0, math.ceil(100 * K / 2.0), "floor") == (0, 125, "floor")
    base, cand = _pilot()
    assert {p.basis for p in plan_tasks(base, cand, thr.policy(None), margin=1.0)} == {"discordance"}
    run = tmp_path / "run"
    for role in ("baseline", "candidate"):
        write_json_atomic(run / f"{role}.json", {"config": role.replace("candidate", "x"), "effective": {},
                                                 "tasks": tasks_to_json(
            {"a": _task("a", "s", [1.0] * 40)})})
    assert main(["plan", "--config", "x", "--margin", "2", "--from", str(run)]) == 0
    out = capsys.readouterr().out
    assert "\u2265125" in out and "N is a floor, not an estimate" in out and "387" not in out


def _tiny_suites(root: Path, n_items: int) -> Path:
    """Suite ``s`` (task ``a``, ``n_items`` generated items) and suite ``f`` (task ``b``, data from a hub: size unknown)."""
    (root / "s").mkdir(parents=True)
    (root / "s" / "a.yaml").write_text("task: a\ncustom_dataset: !function utils.load_data\n"
                                       f"dataset_kwargs: {{n: {n_items}}}\ntest_split: test\nmetric_list: [{{metric: m}}]\n")
    (root / "s" / "utils.py").write_text("def load_data(n, **_):\n    return {'test': [{'id': i} for i in range(n)]}\n")
    (root / "f").mkdir()
    (root / "f" / "b.yaml").write_text("task: b\ndataset_path: someone/b\ntest_split: test\nmetric_list: [{metric: m}]\n")
    return root


def test_plan_against_the_suite_size(tmp_path: Path) -> None:
    base, cand = _pilot()
    plans = {p.task: p for p in plan_tasks(base, cand, Thresholds(alpha=0.05, default_margin=2.0).policy(None), margin=1.0,
                                           available={"a": 200, "b": None})}
    a, b = plans["a"], plans["b"]
    assert (a.items_needed, a.available, a.exceeds_suite) == (1855, 200, True)
    # The whole suite's MDE at the pilot's 3 % discordance: K * 100 * sqrt(0.03 / 200) = 3.04 points.
    assert a.min_margin == pytest.approx(K * 100 * math.sqrt(0.03 / 200))
    assert (b.available, b.min_margin, b.exceeds_suite) == (None, None, False)
    fits = plan_tasks(base, cand, Thresholds(alpha=0.05, default_margin=2.0).policy(None), margin=1.0, available={"a": 1855})[0]
    assert not fits.exceeds_suite


def test_cli_plan_says_when_the_suite_is_too_small(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALGATE_SUITES", str(_tiny_suites(tmp_path / "suites", 50)))
    run = tmp_path / "run"
    _write_pilot(run)
    assert main(["plan", "--config", "x", "--margin", "1", "--from", str(run)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("s/a "))
    assert row.split()[-2:] == ["1855", "50"]
    # Smallest margin 50 items can be powered for at 3 % discordance, rounded up to 0.1 point.
    least = math.ceil(10 * K * 100 * math.sqrt(0.03 / 50)) / 10
    assert least == 6.1
    assert (f"s/a: needs 1855 items; suite has 50: cannot be powered at a 1-point margin; raise the margin to "
            f"{least:.1f} pts or more (the whole suite's MDE at this discordance) or add items") in out
    assert "b: suite size unknown (" in out and "no custom_dataset" in out
    # Within the suite's size: no such line.
    assert main(["plan", "--config", "x", "--margin", "7", "--from", str(run)]) == 0
    assert "cannot be powered" not in capsys.readouterr().out


def test_cli_plan_floor_beyond_the_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """No item changed and the floor ceil(100 K / m) = 249 (m = 1) exceeds a 200-item suite."""
    monkeypatch.setenv("EVALGATE_SUITES", str(_tiny_suites(tmp_path / "suites", 200)))
    run = tmp_path / "run"
    for role in ("baseline", "candidate"):
        write_json_atomic(run / f"{role}.json", {"config": role.replace("candidate", "x"), "effective": {},
                                                 "tasks": tasks_to_json(
            {"a": _task("a", "s", [1.0] * 40)})})
    assert main(["plan", "--config", "x", "--margin", "1", "--from", str(run)]) == 0
    out = capsys.readouterr().out
    least = math.ceil(10 * K * 100 / 200) / 10
    assert least == 1.3
    assert ("s/a: needs at least 249 items; suite has 200: cannot be powered at a 1-point margin; raise the margin to "
            "1.3 pts or more (the whole suite's MDE if no item changes) or add items") in out


def _plan_row(suite: str, task: str, n: int, needed: int | None, available: int | None) -> TaskPlan:
    return TaskPlan(suite=suite, task=task, n=n, n_clusters=n, changed=1, alpha=0.05, power=0.8, margin=3.0, se=1.0,
                    mde=2.5, items_needed=needed, clusters_needed=None, basis="discordance", available=available)


def test_pilot_cost_extrapolates_generation_per_item_and_holds_the_evidence() -> None:
    plans = [_plan_row("s", "a", 40, 100, 80), _plan_row("s", "c", 40, None, 200), _plan_row("f", "b", 20, 30, None)]
    timings = {"baseline:suite:s": 80.0, "baseline:logprobs:s": 8.0, "candidate:suite:s": 120.0,
               "candidate:logprobs:s": 10.0, "baseline:suite:f": 0.0, "baseline:logprobs:f": 0.0,  # f: from the store
               "candidate:suite:f": 30.0, "baseline:total": 999.0}
    rows = {(r.role, r.suite): r for r in pilot_cost(plans, timings)}
    assert list(rows) == [("baseline", "s"), ("baseline", "f"), ("candidate", "s"), ("candidate", "f")]
    bs, bf, cs, cf = rows.values()
    # s: 80 pilot items; planned = min(100, 80) for a + the pilot's 40 for c (no figure); full = 80 + 200.
    assert (bs.items, bs.planned_items, bs.full_items) == (80, 120, 280)
    assert (bs.seconds, bs.per_item, bs.projected(120), bs.projected(280)) == (88.0, 1.0, 128.0, 288.0)
    assert (cs.seconds, cs.per_item, cs.projected(120), cs.projected(280)) == (130.0, 1.5, 190.0, 430.0)
    assert (bf.seconds, bf.per_item, bf.projected(30)) == (None, None, None)  # taken from the store: not measured
    assert (cf.items, cf.planned_items, cf.full_items, cf.seconds, cf.projected(30)) == (20, 30, None, 30.0, 45.0)


def test_cli_plan_states_the_pilots_cost_and_the_planned_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALGATE_SUITES", str(_tiny_suites(tmp_path / "suites", 50)))
    run = tmp_path / "run"
    _write_pilot(run)
    args = ["plan", "--config", "x", "--margin", "7", "--from", str(run)]
    assert main(args) == 0
    assert "cost: the pilot has no manifest with timings" in capsys.readouterr().out
    write_json_atomic(run / "manifest.json", {
        "timings": {"baseline:suite:s": 40.0, "baseline:logprobs:s": 4.0, "candidate:suite:s": 60.0,
                    "candidate:logprobs:s": 4.0, "baseline:suite:f": 20.0, "candidate:suite:f": 20.0},
        "candidate": {"device": {"platform": "cpu", "cpu": "Some CPU", "isa": ["avx2", "avx512f"]}}})
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "measured in the pilot on Some CPU (CPU; avx512f)" in out
    # s/a at a 7-point margin and the pilot's 3 % discordance needs ceil(1e4 * 0.03 * K^2 / 49) = 38 items (suite: 50).
    need = math.ceil(1e4 * 0.03 * K ** 2 / 49)
    assert need == 38
    row = next(line for line in out.splitlines() if line.startswith("baseline/s "))
    # 400 pilot items, 44 s (4 of evidence), 0.10 s/item; planned 38 items: 3.8 + 4 s; full 50 items: 5 + 4 s.
    assert row.split()[1:] == ["400", "44.0", "4.0", "0.10", "38", "7.8", "50", "9.0"]
    row = next(line for line in out.splitlines() if line.startswith("candidate/s "))
    assert row.split()[1:] == ["400", "64.0", "4.0", "0.15", "38", "9.7", "50", "11.5"]
    assert "full-size run: a suite's size is unknown; no total" in out  # suite f's size is unknown
    planned_b = next(line for line in out.splitlines() if line.startswith("f/b ")).split()[6]
    b_items = int(planned_b)
    total = (3.8 + 4 + 5.7 + 4 + 2 * 20.0 / 400 * b_items) / 60
    assert f"planned run: at most about {total:.1f} min of suite time, both sides (the pilot's: {(44 + 64 + 40) / 60:.1f} min)" \
        in out
