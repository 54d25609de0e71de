"""Latency service-level objectives (issue 27 item 3): ``speed.max_<latency>_ms`` ceilings and goodput, measured in
serve mode and decided in the gate (``gate.slo_failures`` inside ``overrule``); no engine (a fake ``vllm bench serve``
in tests/fake_vllm.py, whose goodput follows vLLM's rule: a request is good when it meets every objective)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
from scipy.stats import t as student_t

from evalgate import gate
from evalgate.engine import serve
from evalgate.engine.serve import ServeError, bench_command, parse_bench_result
from evalgate.errors import ConfigError
from evalgate.inputs.thresholds import LatencySlos, SpeedFloors, load_thresholds
from evalgate.report.wording import goodput_words, latency_properties, slo_rows
from evalgate.speed import serve as servespeed
from evalgate.speed.block import SpeedBlock, SpeedLevel
from evalgate.speed.measure import with_latency_slos
from evalgate.speed.speedup import TrafficProfile

FAKE = Path(__file__).parents[1] / "fake_vllm.py"


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "thresholds.yaml"
    path.write_text("alpha: 0.05\ndefault: {margin: 2.0}\n" + body)
    return path


def test_objectives_are_read_per_config_over_the_speed_section(tmp_path: Path) -> None:
    thr = load_thresholds(_write(tmp_path, "speed: {max_ttft_p99_ms: 500, max_tpot_p50_ms: 40, min_speedup: 1.0}\n"
                                           "configs: {fast: {max_ttft_p99_ms: 250, max_itl_p99_ms: 80}}\n"))
    assert thr.speed_floors_for("other").slos() == {"ttft_p99_ms": 500.0, "tpot_p50_ms": 40.0}
    fast = thr.speed_floors_for("fast")
    assert fast.slos() == {"ttft_p99_ms": 250.0, "tpot_p50_ms": 40.0, "itl_p99_ms": 80.0}
    assert fast.min_speedup == 1.0
    assert fast.goodput() == {"ttft": 250.0, "tpot": 40.0}  # p99 when set, else p50; ITL has no per-request form
    assert SpeedFloors(max_tpot_p99_ms=30.0, max_tpot_p50_ms=10.0).goodput() == {"tpot": 30.0}
    assert LatencySlos().slos() == {} and LatencySlos().goodput() == {}


def _thresholds(tmp_path: Path, body: str) -> SimpleNamespace:
    return load_thresholds(_write(tmp_path, body))


def test_objectives_reach_the_serve_profile_as_goodput_and_are_refused_offline(tmp_path: Path) -> None:
    serve_profile = TrafficProfile(input_len=16, output_len=8, concurrency=(2,), mode="serve")
    offline = TrafficProfile(input_len=16, output_len=8, concurrency=(2,))
    thr = _thresholds(tmp_path, "speed: {max_ttft_p99_ms: 500, max_tpot_p99_ms: 50}\n")
    assert with_latency_slos(serve_profile, thr.policy("cand")).goodput == {"ttft": 500.0, "tpot": 50.0}
    assert with_latency_slos(serve_profile, thr.policy("cand")).as_dict()["goodput"] == {"ttft": 500.0, "tpot": 50.0}
    with pytest.raises(ConfigError) as ei:
        with_latency_slos(offline, thr.policy("cand"))
    assert ei.value.field == "speed.max_ttft_p99_ms" and "serve mode only" in str(ei.value)
    thr = _thresholds(tmp_path, "configs: {cand: {max_itl_p50_ms: 9}}\n")
    with pytest.raises(ConfigError) as ei:
        with_latency_slos(offline, thr.policy("cand"))
    assert ei.value.field == "configs.cand.max_itl_p50_ms"
    assert with_latency_slos(offline, thr.policy("other")) is offline  # no objective for this config: nothing to measure
    assert "goodput" not in with_latency_slos(serve_profile, thr.policy("cand")).as_dict()  # ITL only: no goodput key


def test_goodput_objectives_go_to_vllm_bench_serve_and_its_goodput_is_read(tmp_path: Path) -> None:
    argv = bench_command("m", 8000, input_len=16, output_len=8, num_prompts=8, concurrency=2, result_dir=tmp_path,
                         result_file="r.json", goodput={"ttft": 500.0, "tpot": 50.5})
    assert argv[-3:] == ["--goodput", "ttft:500", "tpot:50.5"]  # vLLM's KEY:VALUE pairs (ms)
    assert "--goodput" not in bench_command("m", 8000, input_len=16, output_len=8, num_prompts=8, concurrency=2,
                                            result_dir=tmp_path, result_file="r.json")
    doc = {"duration": 2.0, "completed": 8, "failed": 0, "total_input_tokens": 128, "total_output_tokens": 64,
           "request_throughput": 4.0, "output_throughput": 32.0, "total_token_throughput": 96.0,
           "request_goodput": 2.5}
    for m in ("ttft", "tpot", "itl"):
        doc.update({f"p50_{m}_ms": 10.0, f"p99_{m}_ms": 20.0})
    path = tmp_path / "r.json"
    path.write_text(__import__("json").dumps(doc))
    assert parse_bench_result(path, num_prompts=8, concurrency=2, goodput=True).goodput_s == 2.5
    assert parse_bench_result(path, num_prompts=8, concurrency=2).goodput_s is None
    doc["request_goodput"] = None  # vLLM writes null when no objective was given: asked for, it must be there
    path.write_text(__import__("json").dumps(doc))
    with pytest.raises(ServeError, match="lacks"):
        parse_bench_result(path, num_prompts=8, concurrency=2, goodput=True)


def _level(c: int, **medians: tuple[float, float]) -> SpeedLevel:
    return SpeedLevel.model_validate({"concurrency": c, "latency": {f: {"baseline_median": b, "candidate_median": k}
                                                                    for f, (b, k) in medians.items()}})


def test_a_candidate_over_a_ceiling_is_named_with_the_baseline_beside_it() -> None:
    levels = [_level(16, ttft_p99_ms=(300.0, 420.0), tpot_p99_ms=(20.0, 22.0)),
              _level(256, ttft_p99_ms=(900.0, 1200.0), tpot_p99_ms=(45.0, 49.9))]
    slos = {"ttft_p99_ms": 500.0, "tpot_p99_ms": 50.0}
    assert gate.slo_failures(levels, slos) == [
        "latency SLO: TTFT p99 1,200.0 ms at concurrency 256 exceeds max_ttft_p99_ms 500 ms; the baseline misses "
        "it too (900.0 ms)"]
    assert gate.slo_failures(levels[:1], {"ttft_p99_ms": 400.0}) == [
        "latency SLO: TTFT p99 420.0 ms at concurrency 16 exceeds max_ttft_p99_ms 400 ms; baseline 300.0 ms"]
    assert gate.slo_failures(levels, {"ttft_p99_ms": 1200.0, "tpot_p99_ms": 49.9}) == []  # at the ceiling: met
    assert gate.slo_failures(levels, {}) == []
    # Not measured (an offline block, a missing field): the objective cannot be checked, so it fails (closed).
    assert gate.slo_failures([SpeedLevel(concurrency=4)], {"itl_p50_ms": 5.0}) == [
        "latency SLO: ITL p50 at concurrency 4 was not measured, so max_itl_p50_ms 5 ms cannot be checked"]
    nan = _level(4, itl_p50_ms=(1.0, math.nan))
    assert gate.slo_failures([nan], {"itl_p50_ms": 5.0})[0].endswith("cannot be checked")


def _passing_decision() -> gate.Decision:
    return gate.Decision(verdict=gate.Verdict.PASS, tasks=(), reasons=())


def test_the_gate_blocks_a_faster_candidate_that_breaks_an_objective() -> None:
    speed = SpeedBlock(status="measured", levels=[_level(16, ttft_p99_ms=(300.0, 420.0)).model_copy(
        update={"concurrency": 16, "ratio": 1.4, "ci_low": 1.3, "ci_high": 1.5})])
    met = gate.overrule(_passing_decision(), {}, expect="lossy", speed=speed,
                        speed_floors=SpeedFloors(min_speedup=1.1, max_ttft_p99_ms=500.0))
    assert met.verdict is gate.Verdict.PASS
    missed = gate.overrule(_passing_decision(), {}, expect="lossy", speed=speed,
                           speed_floors=SpeedFloors(min_speedup=1.1, max_ttft_p99_ms=400.0))
    assert missed.verdict is gate.Verdict.BLOCK
    assert missed.reasons[0] == ("latency: latency SLO: TTFT p99 420.0 ms at concurrency 16 exceeds max_ttft_p99_ms "
                                 "400 ms; baseline 300.0 ms")
    failed = gate.overrule(_passing_decision(), {}, expect="lossy", speed=SpeedBlock(status="failed", error="x"),
                           speed_floors=SpeedFloors(max_ttft_p99_ms=400.0))
    assert failed.verdict is gate.Verdict.PASS  # a failed measurement is exit 3 (Outcome.check_speed), not a verdict


@pytest.fixture
def _fake_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve, "LAUNCHER", [str(FAKE)])
    monkeypatch.setattr(serve, "STOP_GRACE_S", 2.0)


def _t_interval(b: list[float], c: list[float], level: float = 0.95) -> tuple[float, float]:
    d = [math.log(y / x) for x, y in zip(b, c)]
    half = student_t.ppf(0.5 + level / 2, len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    return math.exp(statistics.fmean(d) - half), math.exp(statistics.fmean(d) + half)


def test_serve_mode_measures_goodput_per_level_and_the_report_shows_the_objectives(
        tmp_path: Path, _fake_launcher: None) -> None:
    """Baseline TTFT 50 ms, candidate 40 ms (fake servers, 3 repeats with throughput factors): with a TTFT objective
    of 45 ms per request only the candidate's requests are good, so the baseline's goodput is 0 (no log ratio, no
    interval); with 60 ms both are good and goodput is requests per second."""
    base_f, cand_f = [1.0, 1.1, 0.9], [1.0, 0.95, 1.05]
    sides = {role: servespeed.ServeSide("fake-model", {"tok_s": tok, "ttft_ms": ttft,
                                                       "factors": ",".join(map(str, f)),
                                                       "counter_file": str(tmp_path / f"{role}.count"),
                                                       "pid_file": str(tmp_path / "pids")}, {}, tmp_path / f"{role}.log")
             for role, tok, ttft, f in (("baseline", 100.0, 50.0, base_f), ("candidate", 150.0, 40.0, cand_f))}
    for objective, base_good in ((45.0, False), (60.0, True)):
        for role in sides:
            (tmp_path / f"{role}.count").unlink(missing_ok=True)
        profile = TrafficProfile(input_len=16, output_len=8, concurrency=(2,), num_prompts=8, repeats=3, mode="serve",
                                 goodput={"ttft": objective})
        row = servespeed.measure_serve(sides, profile).levels[0]
        req_b = [100.0 * f / 8 for f in base_f]  # 8 output tokens per request
        req_c = [150.0 * f / 8 for f in cand_f]
        gp = row.goodput
        assert gp.objectives_ms == {"ttft": objective}
        assert gp.candidate == pytest.approx(req_c)
        if base_good:
            assert gp.baseline == pytest.approx(req_b)
            assert gp.ratio == pytest.approx(statistics.median(req_c) / statistics.median(req_b))
            assert (gp.ci_low, gp.ci_high) == pytest.approx(_t_interval(req_b, req_c))
        else:
            assert gp.baseline == [0.0, 0.0, 0.0] and gp.ratio is None and gp.ci_low is None
    words = goodput_words(gp)
    assert words.startswith(f"goodput {statistics.median(req_b):.2f} \u2192 {statistics.median(req_c):.2f} req/s "
                            f"\u00d7{gp.ratio:.2f} [") and words.endswith("(TTFT \u2264 60 ms per request)")
    props = dict(latency_properties(SpeedBlock(status="measured", levels=[row])))
    assert props["goodput_req_s_c2_candidate"] == f"{statistics.median(req_c):.4f}"
    speed = SpeedBlock.model_validate({"status": "measured", "levels": [row],
                                       "thresholds": {"slos_ms": {"ttft_p99_ms": 90.0}}})
    # The fake's p99 is twice its median: baseline 100 ms (of the median repeat), candidate 80 ms.
    assert slo_rows(speed) == [{"concurrency": 2, "objective": "TTFT p99", "ceiling_ms": 90.0,
                                "baseline_ms": pytest.approx(100.0), "candidate_ms": pytest.approx(80.0),
                                "met": True}]


def test_an_objective_nobody_measured_fails_closed(tmp_path: Path) -> None:
    """An SLO with no speed phase (no traffic section, or --no-speed) is refused before any engine (exit 2, naming
    the objective); where it still reaches the gate unmeasured (a compare of stored runs), it BLOCKs."""
    from evalgate.inputs.options import RunOptions
    from evalgate.speed.measure import speed_profile

    thr = _thresholds(tmp_path, "speed: {max_ttft_p99_ms: 500}\n")
    for options, words in ((RunOptions(), "no speed is measured"), (RunOptions(no_speed=True), "--no-speed")):
        with pytest.raises(ConfigError) as ei:
            speed_profile(options, thr.policy("cand"))
        assert ei.value.field == "speed.max_ttft_p99_ms" and words in str(ei.value)
    assert speed_profile(RunOptions(), _thresholds(tmp_path, "speed: {min_speedup: 1.1}\n").policy("cand")) is None
    blocked = gate.overrule(_passing_decision(), {}, expect="lossy", speed=None,
                            speed_floors=SpeedFloors(max_ttft_p99_ms=500.0))
    assert blocked.verdict is gate.Verdict.BLOCK
    assert blocked.reasons == ("latency: latency SLO: max_ttft_p99_ms set, but no serve-mode speed was measured, so "
                               "the objective cannot be checked",)
    assert gate.overrule(_passing_decision(), {}, expect="lossy", speed=None,
                         speed_floors=SpeedFloors(min_speedup=1.1)).verdict is gate.Verdict.PASS


def test_a_missed_objective_is_a_junit_failure() -> None:
    """CI tools read the JUnit file: a BLOCK by a latency objective is a failure of the speed test case there."""
    import json
    import xml.etree.ElementTree as ET

    from evalgate.report.outputs import render_junit
    from evalgate.report.verdict import Verdict

    doc = json.loads((Path(__file__).parents[1] / "verdicts" / "v1" / "speed_pass.json").read_text())
    doc["verdict"] = "BLOCK"
    doc["reasons"] = ["latency: latency SLO: TTFT p99 420.0 ms at concurrency 16 exceeds max_ttft_p99_ms 400 ms"]
    root = ET.fromstring(render_junit(Verdict.model_validate(doc)))
    assert root.get("failures") == "1"
    case = next(c for c in root.iter("testcase") if c.get("name") == "throughput")
    assert case.find("failure").get("message") == doc["reasons"][0]


def test_ablate_refuses_serve_mode_before_any_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evalgate.cli import THRESHOLDS_FILE, main

    thr = tmp_path / "t.yaml"
    thr.write_text(THRESHOLDS_FILE.read_text(encoding="utf-8") + "traffic: {mode: serve}\n", encoding="utf-8")
    code = main(["ablate", "--config", "cline-recipe", "--thresholds", str(thr), "--out", str(tmp_path / "a")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"{thr}: traffic.mode: ablate measures speed offline" in err[0]
