"""Speed measurement: statistics, profile, thresholds, gate and outputs, all with injected timings (no engine)."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path
from typing import Any

import pytest

from evalgate.errors import ConfigError, ExitCode
from evalgate.gate import speed_floor_failures
from evalgate.inputs.thresholds import load_thresholds
from evalgate.speed.block import MeasuredSide, SpeedBlock, SpeedLevel
from evalgate.speed.measure import measure_speed
from evalgate.speed.speedup import (
    CPU_PROFILE,
    CUDA_PROFILE,
    FASTER,
    MAX_REPEATS,
    SLOWER,
    UNMEASURABLE,
    TrafficProfile,
    coefficient_of_variation,
    compare_speed,
    describe,
    detectable_ratio,
    headline,
    paired_log_interval,
    paired_t_power,
    profile_problems,
    profile_words,
    repeats_needed,
    resolve_profile,
)

T_975_DF2 = 4.302652729911275  # Student t quantile 0.975 at 2 degrees of freedom (tables)
T_975_DF4 = 2.7764451051977987
T_975_DF5 = 2.5705818356363146
# H200 session 7, the whole recipe at c=16 (benchmarks/results/h200-vllm-0.26.0/session7/): slower in each of the
# three repeats, yet the 95 % interval [0.34, 1.25] contains 1.
C16_BASE = [1984.6548757475775, 2280.469574106774, 2252.771380003915]
C16_CAND = [1720.8148594097447, 1186.2148553759284, 1372.1329992423068]

BASE = "alpha: 0.05\ndefault: {margin: 2.0}\n"


def test_paired_log_interval_matches_hand_computation() -> None:
    base, cand = [100.0, 100.0, 100.0], [110.0, 121.0, 100.0]
    d = [math.log(1.1), math.log(1.21), 0.0]
    mean = sum(d) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 2)
    lo, hi = paired_log_interval(base, cand, 0.95)
    assert lo == pytest.approx(math.exp(mean - T_975_DF2 * sd / math.sqrt(3)), rel=1e-9)
    assert hi == pytest.approx(math.exp(mean + T_975_DF2 * sd / math.sqrt(3)), rel=1e-9)


def test_pairing_removes_shared_drift() -> None:
    # The host slows down 30 % over the run; the candidate is 20 % faster in every pair: the interval is tight.
    drift = [1.0, 0.9, 0.8, 0.7, 0.75]
    base = [1000 * f for f in drift]
    cand = [1200 * f * (1 + 0.001 * (-1) ** i) for i, f in enumerate(drift)]
    s = compare_speed(16, base, cand)
    assert s.verdict == FASTER
    assert s.ci_low > 1.19 and s.ci_low < 1.2 < s.ci_high < 1.21
    assert s.ratio == pytest.approx(statistics.median(cand) / statistics.median(base))
    assert s.cv_baseline == pytest.approx(statistics.stdev(base) / statistics.fmean(base))


def test_ratio_is_ratio_of_medians_and_cv() -> None:
    s = compare_speed(4, [10.0, 30.0, 20.0], [44.0, 40.0, 10.0])
    assert s.ratio == pytest.approx(40.0 / 20.0)
    assert coefficient_of_variation([1.0, 2.0, 3.0]) == pytest.approx(0.5)
    assert math.isnan(coefficient_of_variation([5.0]))


def test_one_repeat_has_no_interval_and_is_never_a_win() -> None:
    s = compare_speed(1, [100.0], [300.0])
    assert s.ratio == 3.0 and math.isnan(s.ci_low) and math.isnan(s.ci_high)
    assert s.verdict == UNMEASURABLE


def _log_spread(base: list[float], cand: list[float]) -> tuple[float, float]:
    d = [math.log(c / b) for b, c in zip(base, cand)]
    mean = sum(d) / len(d)
    return mean, math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))


def _simulated_power(mean: float, sd: float, n: int, crit: float, runs: int = 20000, seed: int = 7) -> float:
    """Share of simulated paired t tests (normal log ratios) whose |t| exceeds ``crit``: the power, by simulation."""
    rng = random.Random(seed)
    hits = 0
    for _ in range(runs):
        d = [rng.gauss(mean, sd) for _ in range(n)]
        m = sum(d) / n
        s = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1))
        hits += abs(m) / (s / math.sqrt(n)) > crit
    return hits / runs


def test_detectable_ratio_has_the_wanted_power_by_simulation() -> None:
    mean, sd = _log_spread(C16_BASE, C16_CAND)
    mde = detectable_ratio(C16_BASE, C16_CAND)
    assert paired_t_power(math.log(mde) / sd, 3, 0.95) == pytest.approx(0.8, abs=1e-6)
    # 20,000 simulated runs: binomial SE 0.003 at 0.8.
    assert _simulated_power(math.log(mde), sd, 3, T_975_DF2) == pytest.approx(0.8, abs=0.012)
    assert mde == pytest.approx(2.349, abs=1e-3)  # at 3 repeats this spread hides anything inside x0.43..x2.35
    assert math.isnan(detectable_ratio([100.0], [90.0]))
    assert math.isnan(detectable_ratio([100.0, 200.0], [110.0, 220.0]))  # no spread: nothing to scale by
    with pytest.raises(ValueError, match="unpaired"):
        detectable_ratio([1.0, 2.0], [1.0])


def test_repeats_needed_is_the_first_count_whose_simulated_power_reaches_80_percent() -> None:
    mean, sd = _log_spread(C16_BASE, C16_CAND)
    at5 = _simulated_power(mean, sd, 5, T_975_DF4)
    at6 = _simulated_power(mean, sd, 6, T_975_DF5)
    assert at5 < 0.8 < at6  # exact: 0.784 and 0.892
    assert repeats_needed(C16_BASE, C16_CAND) == 6
    s = compare_speed(16, C16_BASE, C16_CAND)
    assert (s.verdict, s.repeats_needed) == (UNMEASURABLE, 6)
    assert s.mde_ratio == pytest.approx(detectable_ratio(C16_BASE, C16_CAND))


def test_level_and_power_reach_the_mde() -> None:
    at90 = compare_speed(16, C16_BASE, C16_CAND, level=0.9)
    mean, sd = _log_spread(C16_BASE, C16_CAND)
    assert _simulated_power(math.log(at90.mde_ratio), sd, 3, 2.9199855803537242) == pytest.approx(0.8, abs=0.012)
    assert at90.repeats_needed == 5 and at90.mde_ratio < compare_speed(16, C16_BASE, C16_CAND).mde_ratio
    strict = compare_speed(16, C16_BASE, C16_CAND, power=0.95)
    assert _simulated_power(math.log(strict.mde_ratio), sd, 3, T_975_DF2) == pytest.approx(0.95, abs=0.008)
    assert strict.repeats_needed > 6
    assert paired_t_power(0.0, 3, 0.95) == pytest.approx(0.05)  # no effect: the test's own false-positive rate
    assert paired_t_power(16.0, 3, 0.95) == pytest.approx(1.0)  # where scipy's lower tail underflows to NaN


def test_the_profile_takes_the_thresholds_power(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from evalgate.speed.measure import speed_profile

    path = tmp_path / "thresholds.yaml"
    path.write_text(BASE + "power: 0.9\ntraffic: {concurrency: 4}\n")
    options = SimpleNamespace(no_speed=False, wants_speed=False, concurrency=None, repeats=None)
    profile = speed_profile(options, load_thresholds(path).policy("cand"))
    assert profile.power == 0.9 and profile.as_dict()["power"] == 0.9


def test_repeats_needed_edges() -> None:
    # A/A: the mean log ratio is 0 against a 10 % spread: past the cap.
    assert repeats_needed([100.0, 100.0, 100.0], [110.0, 100.0, 100.0 ** 2 / 110.0]) == MAX_REPEATS + 1
    assert repeats_needed([100.0], [50.0]) is None
    assert repeats_needed([100.0, 100.0], [100.0, 100.0]) is None  # no spread: not estimable
    assert repeats_needed([100.0, 0.0], [90.0, 80.0]) is None
    # A resolved level carries no count: nothing is missing.
    assert compare_speed(1, [100.0, 101.0, 99.0], [150.0, 152.0, 149.0]).repeats_needed is None


def test_describe() -> None:
    assert describe(1.01, 1.2) == FASTER
    assert describe(0.5, 0.99) == SLOWER
    assert describe(0.9, 1.1) == UNMEASURABLE
    assert describe(1.0, 1.0) == UNMEASURABLE  # an interval touching 1 is no measured win
    assert describe(math.nan, math.nan) == UNMEASURABLE


def test_compare_speed_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="unpaired"):
        compare_speed(1, [1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="no throughput"):
        compare_speed(1, [], [])


def test_aa_coverage_of_the_interval_with_injected_noise() -> None:
    """Same config twice (log-normal noise, 5 % CV, slow drift): the 95 % interval covers 1 in >= 90 % of runs."""
    rng = random.Random(1)
    covered = 0
    runs = 2000
    for _ in range(runs):
        level = 1000 * math.exp(rng.gauss(0, 0.2))
        drift = [1 - 0.02 * i for i in range(3)]
        base = [level * f * math.exp(rng.gauss(0, 0.05)) for f in drift]
        cand = [level * f * math.exp(rng.gauss(0, 0.05)) for f in drift]
        lo, hi = paired_log_interval(base, cand, 0.95)
        covered += lo <= 1.0 <= hi
    assert covered / runs >= 0.93  # nominal 95 %; binomial SE at 2000 runs ~0.5 %


def test_profiles_and_resolution() -> None:
    assert (CUDA_PROFILE.input_len, CUDA_PROFILE.output_len, CUDA_PROFILE.concurrency) == (512, 512, (256,))
    assert resolve_profile(None, cuda=True) == CUDA_PROFILE
    assert resolve_profile({}, cuda=False) == CPU_PROFILE
    p = resolve_profile({"input_len": 64, "repeats": 5}, cuda=False)
    assert (p.input_len, p.output_len, p.repeats, p.concurrency, p.num_prompts) == (64, 256, 5, (64,), 192)
    # A concurrency from the command line wins, and the default prompt count becomes one wave per level.
    p = resolve_profile({"num_prompts": None}, cuda=True, concurrency=[1, 16, 256], repeats=2)
    assert p.concurrency == (1, 16, 256) and p.repeats == 2 and p.prompts_at(16) == 16
    p = resolve_profile({"concurrency": (8,), "num_prompts": 40}, cuda=False)
    assert p.prompts_at(8) == 40


def test_profile_problems_against_engine_limits() -> None:
    p = TrafficProfile(input_len=1500, output_len=600, concurrency=(16, 512))
    problems = dict(profile_problems(p, {"max_model_len": 2048, "max_num_seqs": 256}))
    assert "2100 tokens exceeds the engine's max_model_len 2048" in problems["input_len"]
    assert "concurrency 512 exceeds the engine's max_num_seqs 256" in problems["concurrency"]
    assert profile_problems(TrafficProfile(input_len=512, output_len=512, concurrency=(256,)), {"max_model_len": 2048, "max_num_seqs": 256}) == []
    assert profile_problems(p, {}) == []


def test_range_ratio_is_carried_shown_and_bounds_the_longest_request() -> None:
    p = resolve_profile({"range_ratio": 0.5, "num_prompts": 1024}, cuda=True)
    assert (p.range_ratio, p.num_prompts, p.input_len) == (0.5, 1024, 512)
    assert p.as_dict()["range_ratio"] == 0.5 and "range_ratio" not in CUDA_PROFILE.as_dict()
    assert profile_words(p) == "512 in / 512 out (lengths \u00b150 %)"
    assert profile_words(CUDA_PROFILE) == "512 in / 512 out"
    # vLLM's sampling range tops at ceil(512 * 1.5) = 768 prompt and 768 output tokens: 1,536 must fit.
    assert profile_problems(p, {"max_model_len": 1536}) == []
    # 1,024 exact tokens fit 1,535: the spread alone is too long, so the field named is range_ratio
    assert profile_problems(p, {"max_model_len": 1535}) == [("range_ratio", (
        "the longest request at range_ratio 0.5 = 1536 tokens (input_len + output_len, each times 1 + range_ratio, "
        "rounded up) exceeds the engine's max_model_len 1535"))]
    assert [f for f, _ in profile_problems(p, {"max_model_len": 1000})] == ["input_len"]  # 1,024 exact: too long
    odd = TrafficProfile(input_len=101, output_len=33, concurrency=(4,), range_ratio=0.3)
    assert dict(profile_problems(odd, {"max_model_len": 174}))["range_ratio"].startswith(
        "the longest request at range_ratio 0.3 = 175 tokens")
    assert profile_problems(odd, {"max_model_len": 175}) == []  # ceil(131.3) + ceil(42.9) = 132 + 43


def test_a_spread_whose_shortest_prompt_vllm_refuses_is_refused_first() -> None:
    """vLLM's RandomDataset needs floor((input_len - special tokens) * (1 - r)) >= 1; evalgate assumes up to 2."""
    from evalgate.speed.speedup import spread_problems

    def spread(n: int, r: float | None) -> list:
        return spread_problems(TrafficProfile(input_len=n, output_len=4, concurrency=(2,), range_ratio=r))

    assert [f for f, _ in spread(16, 0.95)] == ["range_ratio"]  # floor(14 * 0.05) = 0
    assert "at input_len 16 the shortest prompt" in spread(16, 0.95)[0][1]
    assert spread(16, 0.9) == []                                 # floor(14 * 0.1) = 1
    assert [f for f, _ in spread(256, 0.999)] == ["range_ratio"]  # floor(254 * 0.001) = 0
    assert spread(256, 0.99) == [] and spread(3, None) == [] and spread(3, 0.0) == []
    assert [f for f, _ in spread(2, 0.1)] == ["range_ratio"]     # nothing left after 2 special tokens


def test_sample_requests_draws_vllm_random_lengths_within_the_range() -> None:
    """The worker's sampler hands range_ratio to vLLM's RandomDataset: output budgets within [8, 24] for 16 +/- 50 %,
    not all equal, the same for the same seed; exact lengths without it; refused with the suites' prompts."""
    pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from evalgate.models.hybrid import CHECKPOINT_DIR
    from evalgate.worker.throughput import sample_requests

    llm = SimpleNamespace(get_tokenizer=lambda: AutoTokenizer.from_pretrained(str(CHECKPOINT_DIR)))
    drawn = [r.expected_output_len for r in sample_requests(llm, 32, 16, 40, range_ratio=0.5)]
    assert 8 <= min(drawn) and max(drawn) <= 24 and len(set(drawn)) > 5
    assert drawn == [r.expected_output_len for r in sample_requests(llm, 32, 16, 40, range_ratio=0.5)]
    assert {r.expected_output_len for r in sample_requests(llm, 32, 16, 40)} == {16}
    with pytest.raises(ValueError, match="random prompts only"):
        sample_requests(llm, 32, 16, 4, suite_prompts=[[1, 2, 3]], range_ratio=0.5)


# ------------------------------------------------------------------------------------------ thresholds


def _load(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "t.yaml"
    path.write_text(BASE + text, encoding="utf-8")
    return load_thresholds(path)


def test_traffic_section_and_config_override(tmp_path: Path) -> None:
    t = _load(tmp_path, "traffic: {input_len: 128, concurrency: [1, 16], repeats: 4, prompts: suites}\n"
                        "speed: {min_speedup: 1.1}\n"
                        "configs:\n  mtp1: {traffic: {concurrency: 64}, max_slowdown: 0.05}\n  x: {margin: 1.0}\n")
    assert t.traffic_for("x") == {"input_len": 128, "concurrency": (1, 16), "repeats": 4, "prompts": "suites"}
    assert t.traffic_for("mtp1")["concurrency"] == (64,)
    assert t.traffic_for("mtp1")["input_len"] == 128
    assert (t.speed_floors_for("mtp1").min_speedup, t.speed_floors_for("mtp1").max_slowdown) == (1.1, 0.05)
    assert t.speed_floors_for("x").max_slowdown is None
    plain = _load(tmp_path, "")
    assert plain.traffic_for("x") is None  # no section: speed only when the command line asks
    assert _load(tmp_path, "traffic:\n").traffic_for("x") == {}  # an empty section: the platform's defaults


@pytest.mark.parametrize("text,field,fragment", [
    ("traffic: {input_len: 0}\n", "traffic.input_len", "integer >= 1"),
    ("traffic: {output_len: true}\n", "traffic.output_len", "a boolean"),
    ("traffic: {concurrency: []}\n", "traffic.concurrency", "a list"),
    ("traffic: {concurrency: [1, 1]}\n", "traffic.concurrency", "repeats a level"),
    ("traffic: {concurrency: [4, 0]}\n", "traffic.concurrency", "got 0"),
    ("traffic: {concurrency: '16'}\n", "traffic.concurrency", "(a string)"),
    ("traffic: {repeats: 0}\n", "traffic.repeats", "an integer with 1 <= traffic.repeats <= 100, got 0"),
    ("traffic: {num_prompts: -3}\n", "traffic.num_prompts",
     "an integer with 1 <= traffic.num_prompts <= 100_000, got -3"),
    ("traffic: {prompts: shared}\n", "traffic.prompts", "one of random, suites"),
    ("traffic: {mode: online}\n", "traffic.mode", "one of offline, serve"),
    ("traffic: {concurency: 4}\n", "traffic.concurency", "did you mean 'concurrency'"),
    ("traffic: [1]\n", "traffic", "must be a mapping"),
    ("speed: {min_speedup: 0}\n", "speed.min_speedup", "ratio > 0"),
    ("speed: {max_slowdown: 1.5}\n", "speed.max_slowdown", "0 <= max_slowdown < 1"),
    ("speed: {min_speed: 1}\n", "speed.min_speed", "did you mean 'min_speedup'"),
    ("configs:\n  c: {traffic: {repeats: 1.5}}\n", "configs.c.traffic.repeats",
     "an integer with 1 <= configs.c.traffic.repeats <= 100, got 1.5"),
    ("configs:\n  c: {min_speedup: .nan}\n", "configs.c.min_speedup", "ratio > 0"),
    ("suites:\n  s: {traffic: {repeats: 2}}\n", "suites.s.traffic", "unknown key"),
])
def test_bad_traffic_names_the_field(tmp_path: Path, text: str, field: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, text)
    assert info.value.field == field and fragment in str(info.value)
    assert str(info.value).startswith(f"{tmp_path / 't.yaml'}: {field}: ")
    assert info.value.exit_code == ExitCode.USAGE and "\n" not in str(info.value)


# ------------------------------------------------------------------------------------------------ gate


def _row(c: int, ratio: float, lo: float | None, hi: float | None) -> SpeedLevel:
    return SpeedLevel(concurrency=c, ratio=ratio, ci_low=lo, ci_high=hi)


def test_min_speedup_blocks_a_lossy_config_that_buys_no_measurable_speed() -> None:
    rows = [_row(16, 1.3, 1.2, 1.4), _row(256, 1.05, 0.95, 1.15)]
    out = speed_floor_failures(rows, expect="lossy", min_speedup=1.1, max_slowdown=None)
    assert len(out) == 1 and "costs quality, buys no measurable speed" in out[0] and "concurrency 256" in out[0]
    assert speed_floor_failures(rows[:1], expect="lossy", min_speedup=1.1, max_slowdown=None) == []
    # Not for a lossless config, and nothing without a threshold (report only).
    assert speed_floor_failures(rows, expect="lossless", min_speedup=1.1, max_slowdown=None) == []
    assert speed_floor_failures(rows, expect="lossy", min_speedup=None, max_slowdown=None) == []
    # Fail closed: no interval (one repeat) cannot show the speed.
    assert speed_floor_failures([_row(1, 2.0, None, None)], expect="lossy", min_speedup=1.1, max_slowdown=None)


def test_max_slowdown_blocks_a_lossless_config_shown_slower() -> None:
    slow = [_row(64, 0.8, 0.75, 0.85)]
    out = speed_floor_failures(slow, expect="lossless", min_speedup=None, max_slowdown=0.05)
    assert len(out) == 1 and "speed regression" in out[0]
    noisy = [_row(64, 0.9, 0.8, 0.99)]  # the interval reaches 0.95: no slowdown beyond 5 % is shown
    assert speed_floor_failures(noisy, expect="lossless", min_speedup=None, max_slowdown=0.05) == []
    assert speed_floor_failures(slow, expect="lossy", min_speedup=None, max_slowdown=0.05) == []


# --------------------------------------------------------------------------------- interleaved repeats


class FakeWorker:
    """Answers measurement commands with injected throughputs and records the order it was called in."""

    def __init__(self, role: str, values: dict[int, list[float]], calls: list[tuple[str, str]]) -> None:
        self.role, self.values, self.calls = role, {c: list(v) for c, v in values.items()}, calls
        self.info = {"event": "ready", "device": "test CPU", "isa": ["avx2"], "versions": {"vllm": "x"}}

    def measure(self, cmd: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((self.role, cmd["label"]))
        if cmd["label"] == "warm-up":
            assert cmd["output_len"] <= 16 and cmd["seed"] == 1
            return {"output_tok_s": 1.0, "total_tok_s": 2.0}
        v = self.values[cmd["concurrency"]].pop(0)
        return {"output_tok_s": v, "total_tok_s": 2 * v, "elapsed_s": 1.0}


def test_measure_speed_interleaves_and_builds_the_block() -> None:
    calls: list[tuple[str, str]] = []
    profile = TrafficProfile(input_len=8, output_len=8, concurrency=(2, 4), repeats=3)
    workers = {"baseline": FakeWorker("baseline", {2: [100, 110, 90], 4: [200, 210, 190]}, calls),
               "candidate": FakeWorker("candidate", {2: [150, 160, 140], 4: [190, 215, 200]}, calls)}
    block = measure_speed(workers, profile, progress=lambda _: None)
    # Per level: both warm-ups, then ABBA order of the timed repeats.
    assert [r for r, _ in calls[:8]] == ["baseline", "candidate", "baseline", "candidate", "candidate", "baseline",
                                         "baseline", "candidate"]
    assert block.status == "measured" and block.profile.as_dict()["concurrency"] == [2, 4]
    lvl = block.levels[0]
    assert lvl.baseline.output_tok_s == [100, 110, 90] and lvl.baseline.median == 100
    assert lvl.ratio == pytest.approx(1.5) and block.ratio == pytest.approx(1.5)
    assert lvl.candidate.total_tok_s == [300, 320, 280]
    lo, hi = paired_log_interval([100, 110, 90], [150, 160, 140], 0.95)
    assert (lvl.ci_low, lvl.ci_high) == (pytest.approx(lo), pytest.approx(hi)) and lvl.verdict == FASTER
    assert block.levels[1].verdict == UNMEASURABLE
    assert block.sides["candidate"].device == "test CPU" and len(block.sides["baseline"].runs) == 6
    assert "c=2: \u00d71.50" in headline(block) and "no measurable speed-up" in headline(block)
    # A sweep: the profile, then one indented line per level.
    first, *rest = headline(block).split("\n")
    assert first == "speed (8 in / 8 out, 3 repeats, offline):"
    assert [x.split(":")[0] for x in rest] == ["  c=2", "  c=4"]


# --------------------------------------------------------------------------------------------- outputs


def _doc_with_speed(min_speedup: float | None = None, evil: bool = False) -> dict[str, Any]:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from evalgate.inputs.thresholds import SpeedFloors
    from runfixtures import EVIL_SCRIPT, equal_sides_document

    workers = {"baseline": FakeWorker("baseline", {16: [100, 104, 98]}, []),
               "candidate": FakeWorker("candidate", {16: [101, 103, 99]}, [])}
    if evil:
        workers["candidate"].info["device"] = EVIL_SCRIPT
    block = measure_speed(workers, TrafficProfile(input_len=8, output_len=8, concurrency=(16,), repeats=3), progress=lambda _: None)
    return equal_sides_document(speed=block, speed_floors=SpeedFloors(min_speedup=min_speedup))


def test_speed_reaches_every_output() -> None:
    import xml.etree.ElementTree as ET

    from evalgate.report.outputs import render_junit, render_markdown
    from evalgate.report.render import render_html, render_terminal

    doc = _doc_with_speed(evil=True)
    assert doc["verdict"] == "PASS" and doc["speed"]["levels"][0]["verdict"] == UNMEASURABLE
    assert "speed (8 in / 8 out, 3 repeats, offline): c=16: \u00d7" in render_terminal(doc)
    md = render_markdown(doc)
    assert "**Speed**" in md and "| 16 | 100 | 101 | \u00d71.01 |" in md and "<script>" not in md
    root = ET.fromstring(render_junit(doc))
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["speedup_c16"] == f"{101 / 100:.4f}" and props["speed_c16"] == UNMEASURABLE
    assert root.get("tests") == "2" and root.get("failures") == "0"  # the task and the speed case
    html = render_html(doc)
    assert 'id="speed"' in html and "<svg" in html and "speed-up at concurrency 16" in html
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_speed_mde_and_repeats_needed_reach_markdown_html_and_the_headline() -> None:
    from evalgate.report.outputs import speed_markdown
    from evalgate.report.render import render_html

    workers = {"baseline": FakeWorker("baseline", {16: list(C16_BASE)}, []),
               "candidate": FakeWorker("candidate", {16: list(C16_CAND)}, [])}
    block = measure_speed(workers, TrafficProfile(input_len=512, output_len=512, concurrency=(16,), repeats=3), progress=lambda _: None)
    (lvl,) = block.levels
    assert lvl.repeats_needed == 6 and lvl.mde_ratio == pytest.approx(2.349, abs=1e-3)
    assert "c=16: ×0.61 [0.34, 1.25] (95%), no measurable speed-up, resolving it needs ≈6 repeats in all (2,253" in headline(block)
    md = "\n".join(speed_markdown(block))
    assert "| 16 | 2,253 | 1,372 | ×0.61 | 95% [0.34, 1.25] | ×2.35 | 7.5%/19.0% | no measurable speed-up; resolving it " \
           "needs ≈6 repeats in all |" in md
    assert "80 % power" in md
    from evalgate.report.outputs import speed_properties
    props = dict(speed_properties(block))
    assert props["speed_c16_repeats_needed"] == 6 and float(props["speedup_c16_mde"]) == pytest.approx(2.349, abs=1e-3)
    doc = _doc_with_speed()
    doc["speed"] = {**block.model_dump(exclude_unset=True), "thresholds": None}
    html = render_html(doc)
    assert "<td>×2.35</td>" in html and "no measurable speed-up; resolving it needs ≈6 repeats in all" in html
    assert "80 % power" in html
    # A document written before these fields renders them as n/a and says nothing about repeats.
    for key in ("mde_ratio", "repeats_needed"):
        del doc["speed"]["levels"][0][key]
    old = render_html(doc)
    assert "needs ≈6 repeats" not in old and "<td>n/a</td>" in old and "power at the spread" not in old


class _CapacityWorker(FakeWorker):
    """A ``FakeWorker`` whose timed passes also report what the engine held: ``streams`` (median requests decoding per
    step) and ``preemptions`` per pass, in order."""

    def __init__(self, role: str, values: dict[int, list[float]], held: list[tuple[float, int]]) -> None:
        super().__init__(role, values, [])
        self.held = list(held)

    def measure(self, cmd: dict[str, Any]) -> dict[str, Any]:
        r = super().measure(cmd)
        if cmd["label"] != "warm-up":
            streams, preempted = self.held.pop(0)
            r.update(streams=streams, preemptions=preempted)
        return r


def test_a_side_that_cannot_hold_the_concurrency_is_named_beside_the_speed_up() -> None:
    """At c=256 the baseline ran medians of 180, 190 and 200 streams (median 190) and preempted 3 + 0 + 5 = 8
    requests; the candidate held all 256 and preempted none. The level records both per repeat, and every place
    that shows the level (headline, summary.md, report.html, CI properties) says the baseline's shortfall; a level
    both sides held says nothing."""
    from evalgate.report.outputs import speed_markdown, speed_properties
    from evalgate.report.render import render_html
    from evalgate.speed.speedup import capacity_note

    workers = {"baseline": _CapacityWorker("baseline", {256: [5000, 5100, 4900], 16: [900, 910, 905]},
                                           [(180.0, 3), (190.0, 0), (200.0, 5), (16.0, 0), (16.0, 0), (16.0, 0)]),
               "candidate": _CapacityWorker("candidate", {256: [7000, 7050, 6990], 16: [910, 900, 915]},
                                            [(256.0, 0)] * 3 + [(16.0, 0)] * 3)}
    profile = TrafficProfile(input_len=512, output_len=512, concurrency=(256, 16), repeats=3)
    block = measure_speed(workers, profile, progress=lambda _: None)
    high, low = block.levels
    # The ABBA order swaps the sides of the second pair, but each side's records stay its own, in order.
    assert high.baseline.streams == [180.0, 190.0, 200.0] and high.baseline.preemptions == [3, 0, 5]
    assert high.candidate.streams == [256.0] * 3 and high.candidate.preemptions == [0, 0, 0]
    expected = ("baseline got tokens to a median of 190 of 256 streams per step, 8 preemptions: part of this ratio "
                "may be capacity (KV cache / SSM state), not kernel speed")
    assert capacity_note(high) == expected and capacity_note(low) == ""
    assert expected in headline(block).split("\n")[1] and "capacity" not in headline(block).split("\n")[2]
    assert expected in "\n".join(speed_markdown(block))
    props = dict(speed_properties(block))
    assert props["speed_c256_capacity"] == expected and "speed_c16_capacity" not in props
    doc = _doc_with_speed()
    doc["speed"] = {**block.model_dump(exclude_unset=True), "thresholds": None}
    assert f'<span class="capacity">{expected}</span>' in render_html(doc)
    # A document written before these fields (no streams, no preemptions) says nothing about capacity.
    for lv in doc["speed"]["levels"]:
        for role in ("baseline", "candidate"):
            lv[role].pop("streams"), lv[role].pop("preemptions")
    assert "capacity" not in render_html(doc).split('id="speed"')[1].split("</table>")[0]


def test_a_stream_shortfall_counts_only_beyond_what_async_scheduling_and_prefill_cost() -> None:
    """The allowance is max(2, 5 % of c) streams: at c=256, 12.8 (a median of 244 is held, 243 is short); at c=16,
    2 (14 held, 13 short). A single preemption is named on its own; a side with no window in some repeat keeps
    None there, and the median is over the repeats that had one."""
    from evalgate.report.verdict import SpeedLevel
    from evalgate.speed.speedup import capacity_note, capacity_short

    assert not capacity_short(255.0, 256) and not capacity_short(244.0, 256) and capacity_short(243.0, 256)
    assert not capacity_short(14.0, 16) and capacity_short(13.0, 16) and not capacity_short(2.0, 4)

    def level(c: int, cand_streams: list, preemptions: list) -> SpeedLevel:
        return SpeedLevel.model_validate({"concurrency": c, "baseline": {"streams": [c, c], "preemptions": [0, 0]},
                                          "candidate": {"streams": cand_streams, "preemptions": preemptions}})

    assert capacity_note(level(256, [255.5, 255.0], [0, 0])) == ""
    assert capacity_note(level(256, [None, 200.0, 240.0], [0, 1, 0])) == (
        "candidate got tokens to a median of 220 of 256 streams per step, 1 preemption: part of this ratio may be "
        "capacity (KV cache / SSM state), not kernel speed")
    assert capacity_note(level(16, [None, None], [0, 0])) == ""


def test_the_report_says_how_the_passes_were_timed() -> None:
    """Whole passes (the fake workers' records have no window), steady windows on every pass, or some of each."""
    from evalgate.report.render import render_html
    from evalgate.speed.speedup import window_words

    doc = _doc_with_speed()
    assert "; each pass whole). Device:" in render_html(doc)
    window = {"start_s": 1.0, "end_s": 3.0, "output_tokens": 40, "finished": 16, "output_tok_s": 20.0}
    for side in doc["speed"]["sides"].values():
        for run in side["runs"]:
            run["window"] = window
    assert "; each pass over its steady-state window (fill and drain excluded)). Device:" in render_html(doc)
    del doc["speed"]["sides"]["baseline"]["runs"][0]["window"]
    sides = SpeedBlock.model_validate(doc["speed"]).sides
    assert window_words(sides) == "5 of 6 passes over their steady-state window, the rest whole"
    assert window_words({}) == "" and window_words({"baseline": MeasuredSide(device="x")}) == ""


def test_min_speedup_blocks_through_the_document() -> None:
    import xml.etree.ElementTree as ET

    from evalgate.report.outputs import render_junit

    doc = _doc_with_speed(min_speedup=1.1)
    assert doc["verdict"] == "BLOCK"
    assert doc["reasons"][0].startswith("speed: costs quality, buys no measurable speed")
    root = ET.fromstring(render_junit(doc))
    assert root.get("failures") == "1"
    speed_case = [c for c in root.iter("testcase") if c.get("name") == "throughput"][0]
    assert speed_case.find("failure") is not None


def test_documents_without_speed_render_as_before() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from evalgate.report.outputs import render_junit, render_markdown
    from evalgate.report.render import render_html, render_terminal
    from runfixtures import blocking_document

    doc = blocking_document()
    assert "speed" not in doc
    assert "Speed" not in render_markdown(doc) and "speed" not in render_terminal(doc)
    assert "speed" not in render_junit(doc) and 'id="speed"' not in render_html(doc)


def test_tradeoff_and_sweep_plots_escape_labels_and_skip_missing_values() -> None:
    from evalgate.report.plot import sweep_plot, tradeoff_plot

    svg = tradeoff_plot([{"label": "<b>x</b>", "ratio": 1.5, "ratio_low": 1.2, "ratio_high": 1.8, "delta": -0.4,
                          "delta_low": -1.0, "delta_high": 0.2, "verdict": "PASS"},
                         {"label": "no ratio", "ratio": None, "delta": 1.0}])
    assert svg.count("<circle") == 1 and "&lt;b&gt;x&lt;/b&gt;" in svg and "<b>" not in svg
    assert tradeoff_plot([{"label": "a", "ratio": None, "delta": None}]) == ""
    sweep = sweep_plot([{"series": "mtp1", "concurrency": c, "ratio": r, "ci_low": r - 0.1, "ci_high": r + 0.1}
                        for c, r in ((1, 1.6), (16, 1.3), (256, 0.9))])
    assert sweep.count("<circle") == 3 and "mtp1" in sweep


@pytest.mark.parametrize(("key", "value"), [("mde_ratio", 0.5), ("repeats_needed", 1), ("repeats_needed", "lots")])
def test_a_stored_speed_level_with_an_impossible_mde_field_is_refused(key: str, value: Any) -> None:
    from pydantic import ValidationError

    from evalgate.report.verdict import SpeedLevel

    with pytest.raises(ValidationError, match=key):
        SpeedLevel.model_validate({"concurrency": 16, key: value})


def test_every_timed_pass_starts_with_an_empty_prefix_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same prompts go out every repeat: each pass resets vLLM's prefix cache first, so no pass is warmed by the
    one before it (under placement: alternate a wake resets it, which would make the pairs' passes uneven)."""
    from types import SimpleNamespace

    from evalgate.worker import throughput

    calls: list[str] = []
    out = SimpleNamespace(prompt_token_ids=[1, 2], outputs=[SimpleNamespace(token_ids=[3, 4, 5])])

    def run_limited(llm: object, requests: list, concurrency: int, *,
                    detokenize: bool = True) -> tuple[float, list, throughput.PassTrace]:
        calls.append("pass" if detokenize else "pass (token ids only)")
        return 2.0, [out] * len(requests), throughput.PassTrace()  # no steps: no steady window

    monkeypatch.setattr(throughput, "_run_limited", run_limited)
    llm = SimpleNamespace(reset_prefix_cache=lambda: calls.append("reset"))
    result = throughput.measure(llm, [object()] * 4, 2)
    assert calls == ["reset", "pass"] and result["output_tok_s"] == 4 * 3 / 2.0 and "detokenize" not in result
    throughput.measure(SimpleNamespace(), [object()] * 4, 2)  # an engine without the method is measured as it is
    assert calls == ["reset", "pass", "pass"]
    # Random weights (load_format: dummy): token ids only, and the pass says so.
    assert throughput.measure(SimpleNamespace(), [object()] * 4, 2, detokenize=False)["detokenize"] is False
    assert calls[-1] == "pass (token ids only)"


class _SteppedEngine:
    """A stand-in for ``LLMEngine`` (unit test of the refill loop): every request in flight gains one output token per
    ``step()``, which also advances a fake clock by one second; a request finishes at its ``max_tokens``. Outputs are
    cumulative, as vLLM's default ``RequestOutputKind.CUMULATIVE``. With ``capacity``, only the first ``capacity``
    requests in admission order run in a step (the rest wait, as in a full KV cache), and a request that was running
    when a later one overtook it never happens: the oldest run first."""

    def __init__(self, capacity: int | None = None) -> None:
        from types import SimpleNamespace

        self.now = 0.0
        self.running: dict[str, list] = {}  # request id -> [tokens so far, max_tokens]
        self.capacity = capacity
        self.ns = SimpleNamespace

    def add_request(self, request_id: str, prompt: object, params: object) -> None:
        self.running[request_id] = [0, params.max_tokens]

    def step(self) -> list:
        self.now += 1.0
        outs = []
        for rid, state in list(self.running.items())[:self.capacity]:
            state[0] += 1
            finished = state[0] >= state[1]
            outs.append(self.ns(request_id=rid, finished=finished, prompt_token_ids=[1, 2],
                                outputs=[self.ns(token_ids=[7] * state[0])]))
            if finished:
                del self.running[rid]
        return outs

    def has_unfinished_requests(self) -> bool:
        return bool(self.running)


def _stepped_pass(monkeypatch: pytest.MonkeyPatch, lengths: list[int], concurrency: int,
                  capacity: int | None = None) -> dict:
    from types import SimpleNamespace

    pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")  # SamplingParams, TokensPrompt
    from evalgate.worker import throughput

    engine = _SteppedEngine(capacity)
    monkeypatch.setattr(throughput, "time", SimpleNamespace(perf_counter=lambda: engine.now,
                                                            monotonic_ns=lambda: 0))
    requests = [SimpleNamespace(prompt={"prompt_token_ids": [1, 2]}, expected_output_len=n) for n in lengths]
    return throughput.measure(SimpleNamespace(llm_engine=engine), requests, concurrency)


def test_a_refilled_pass_reports_the_steady_window_between_the_first_finish_and_the_last_admission(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two slots, six requests: five of 2 tokens, the last of 8. By hand: r0, r1 run at t=1, 2 and finish at 2;
    r2, r3 at 3, 4; r4, r5 are admitted at t=4 (the last admission), r4 finishes at 6, r5 alone until 12 (the
    drain). Whole pass: 5*2 + 8 = 18 tokens in 12 s = 1.5 tok/s. Window (2, 4]: steps 3 and 4, 2 tokens each,
    2 requests finished (= the slots): 4 tokens in 2 s = 2.0 tok/s, the rate with both slots busy."""
    result = _stepped_pass(monkeypatch, [2, 2, 2, 2, 2, 8], concurrency=2)
    assert (result["elapsed_s"], result["output_tokens"], result["requests"]) == (12.0, 18, 6)
    assert result["pass_output_tok_s"] == 1.5
    assert result["window"] == {"start_s": 2.0, "end_s": 4.0, "output_tokens": 4, "finished": 2,
                                "output_tok_s": 2.0}
    assert result["output_tok_s"] == 2.0
    assert result["total_tok_s"] == (6 * 2 + 18) / 12.0  # the whole pass's, as before
    assert result["streams"] == 2.0  # both slots got a token in each of the window's steps
    assert "preemptions" not in result  # the stand-in reports no vLLM metrics: nothing claimed


def test_a_pass_whose_engine_holds_fewer_streams_than_slots_says_how_many_it_ran(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Four slots, an engine that runs only two requests a step (a full cache), twelve requests of 2 tokens. By hand:
    the engine runs pairs in admission order, each pair 2 steps: r0,r1 finish at t=2 (the first finish), r2,r3 at 4,
    and so on; a slot frees when its request finishes, so r4,r5 are admitted at t=2, ..., r10,r11 (the last) at t=8.
    Window (2, 8]: 6 steps of 2 tokens, 6 finished >= 4 slots: 2 streams per step, half the concurrency."""
    result = _stepped_pass(monkeypatch, [2] * 12, concurrency=4, capacity=2)
    assert result["window"]["start_s"] == 2.0 and result["window"]["end_s"] == 8.0
    assert result["streams"] == 2.0
    assert result["output_tok_s"] == 2.0


def test_preemptions_are_the_counter_growth_over_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """``vllm:num_preemptions`` (summed over its label sets) is read before and after the pass: the difference is the
    pass's. An engine whose metrics fail (stats disabled: vLLM asserts) or lack the counter reports none."""
    from types import SimpleNamespace

    from evalgate.worker import throughput

    out = SimpleNamespace(prompt_token_ids=[1], outputs=[SimpleNamespace(token_ids=[2, 3])])
    monkeypatch.setattr(throughput, "_run_limited", lambda llm, requests, c, detokenize=True: (
        1.0, [out] * len(requests), throughput.PassTrace()))
    reads = iter([[5.0, 2.0], [9.0, 4.0]])  # two engines' counters, before and after: 7 -> 13

    def metrics() -> list:
        return [SimpleNamespace(name="vllm:num_preemptions", value=v) for v in next(reads)] + [
            SimpleNamespace(name="vllm:num_requests_running", value=3.0)]

    assert throughput.measure(SimpleNamespace(get_metrics=metrics), [object()] * 3, 2)["preemptions"] == 6

    def broken() -> list:
        raise AssertionError("Stat logging disabled")

    assert "preemptions" not in throughput.measure(SimpleNamespace(get_metrics=broken), [object()] * 3, 2)
    none = SimpleNamespace(get_metrics=lambda: [SimpleNamespace(name="vllm:num_requests_running", value=1.0)])
    assert "preemptions" not in throughput.measure(none, [object()] * 3, 2)


def test_a_pass_of_two_waves_has_no_steady_window_and_keeps_the_whole_pass_rate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Four requests of 3 tokens in two slots: the last admission is the first finish (t=3), so no window; the rate
    is the whole pass's, 12 tokens in 6 s."""
    result = _stepped_pass(monkeypatch, [3, 3, 3, 3], concurrency=2)
    assert "window" not in result and "pass_output_tok_s" not in result
    assert (result["elapsed_s"], result["output_tok_s"]) == (6.0, 2.0)


def test_steady_window_needs_every_slot_to_turn_over_once() -> None:
    from evalgate.worker.throughput import steady_window

    # Three uniform waves of 2 requests (3 steps each, 2 tokens a step): the window is the middle wave.
    steps = [(float(t), 2, 2 if t % 3 == 0 else 0) for t in range(1, 10)]
    assert steady_window(steps, 6.0, 2) == {"start_s": 3.0, "end_s": 6.0, "output_tokens": 6, "finished": 2,
                                            "output_tok_s": 2.0}
    assert steady_window(steps, 6.0, 3) is None      # 2 finished inside, fewer than 3 slots
    assert steady_window(steps, 3.0, 2) is None      # the last admission at the first finish: empty
    assert steady_window(steps, None, 2) is None     # not every request admitted
    assert steady_window([(1.0, 4, 0), (2.0, 4, 0)], 2.0, 1) is None  # nothing finished


def test_speed_requests_skip_detokenization_on_random_weights() -> None:
    from types import SimpleNamespace

    pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")
    from evalgate.worker import throughput

    req = SimpleNamespace(expected_output_len=7)
    assert throughput._params(req).detokenize is True
    params = throughput._params(req, detokenize=False)
    assert params.detokenize is False and params.max_tokens == 7 and params.ignore_eos
