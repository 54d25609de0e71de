"""The ``speed`` block of ``verdict.json`` in each speed mode, as evalgate writes it: key for key, in key order.

``tests/verdicts/speed/*.json`` were written by ``document.build_verdict`` (through ``runfixtures``) from the
fixtures below before the speed block was typed (issue 24), while it still travelled as a dict: an offline sweep
with a precision target, economics and a missed speed floor; a serve-mode block with latency, goodput and a latency
objective; and a failed measurement. Today's builder must write the same keys, in the same order, with the same
values and JSON types, and a stored document must dump back byte-identical.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from evalgate.evaluate.runner import SpeedError  # noqa: E402
from evalgate.inputs.thresholds import SpeedFloors  # noqa: E402
from evalgate.report.verdict import Verdict  # noqa: E402
from evalgate.speed import serve as servespeed  # noqa: E402
from evalgate.speed.block import SpeedBlock  # noqa: E402
from evalgate.speed.measure import measure_speed, measure_speed_safely  # noqa: E402
from evalgate.speed.precision import METHOD as PRECISION_METHOD  # noqa: E402
from evalgate.speed.speedup import METHOD, UNMEASURABLE, SpeedComparison, TrafficProfile, speed_block  # noqa: E402
from runfixtures import equal_sides_document, same_json  # noqa: E402

GOLDEN = Path(__file__).parents[1] / "verdicts" / "speed"
NAMES = ("failed", "offline_precision", "serve")


class _Worker:
    """Answers measurement commands with the given output tok/s in order (warm-ups excluded)."""

    def __init__(self, values: list[float], *, fail: bool = False) -> None:
        self.values, self.fail = list(values), fail
        self.info = {"event": "ready", "device": "test CPU", "isa": ["avx2"], "versions": {"vllm": "x"}}

    def measure(self, cmd: dict[str, Any]) -> dict[str, Any]:
        if cmd["label"] == "warm-up":
            return {"output_tok_s": 1.0, "total_tok_s": 2.0}
        if self.fail:
            raise SpeedError("the engine died in the speed phase")
        v = self.values.pop(0)
        return {"output_tok_s": v, "total_tok_s": 2 * v, "elapsed_s": 1.5, "request_s": v / 8}


def _offline_precision() -> dict[str, Any]:
    """Two levels, Stein's rule capped at 5 pairs; a missed min_speedup (BLOCK) and economics with an API price."""
    base = [100.0, 104.0, 98.0, 101.0, 99.0]
    cand = [150.0, 140.0, 160.0, 152.0, 148.0]
    workers = {"baseline": _Worker(base + [200.0, 205.0, 198.0, 202.0, 199.0]),
               "candidate": _Worker(cand + [210.0, 190.0, 220.0, 205.0, 200.0])}
    profile = TrafficProfile(input_len=8, output_len=8, concurrency=(2, 4), repeats=3, precision=0.01, max_repeats=5)
    ticks = iter(range(0, 10_000, 5))  # a clock that advances 5 s per reading: each pair reads it twice, 5 s apart
    block = measure_speed(workers, profile, progress=lambda _: None, clock=lambda: float(next(ticks)))
    return equal_sides_document(speed=block, speed_floors=SpeedFloors(min_speedup=1.2),
                                economics={"gpu_hour_usd": 3.6, "api_usd_per_mtok": 2.0})


def _serve() -> dict[str, Any]:
    """One level, 3 repeats: the candidate halves every latency, with goodput and a met TTFT p99 objective."""
    def run(i: int, f: float, tok: float, ms: float, good: float) -> servespeed.ServeRun:
        return servespeed.ServeRun(2, i, 1.0, 8, 128, 64, tok * f, 3 * tok * f, tok * f / 8, ms / f, 2 * ms / f,
                                   ms / 4 / f, ms / 2 / f, ms / 4 / f, 3 * ms / 4 / f, good * f)

    b = [run(i, f, 64.0, 40.0, 6.0) for i, f in enumerate([1.0, 1.1, 0.9])]
    c = [run(i, f, 96.0, 20.0, 10.0) for i, f in enumerate([1.0, 1.05, 0.95])]
    profile = TrafficProfile(input_len=16, output_len=8, concurrency=(2,), num_prompts=8, repeats=3, mode="serve",
                             goodput={"ttft": 50.0})
    info = {role: {"device": "test CPU", "isa": [], "versions": {"vllm": "x"},
                   "server": {"argv": ["serve", "m"], "startups_s": [1.5]}} for role in ("baseline", "candidate")}
    block = servespeed.serve_block({"baseline": b, "candidate": c}, profile, info)
    return equal_sides_document(speed=block, speed_floors=SpeedFloors(min_speedup=1.0, max_ttft_p99_ms=90.0))


def _failed() -> dict[str, Any]:
    """A measurement that failed (no floors: ``thresholds`` null)."""
    workers = {"baseline": _Worker([100.0] * 3), "candidate": _Worker([], fail=True)}
    block = measure_speed_safely(workers, TrafficProfile(input_len=8, output_len=8, concurrency=(4,), repeats=3))
    return equal_sides_document(speed=block)


BUILD = {"failed": _failed, "offline_precision": _offline_precision, "serve": _serve}


def _dumps(obj: object) -> str:
    """As ``store.write_json_atomic`` writes JSON."""
    return json.dumps(obj, indent=1, ensure_ascii=False, allow_nan=True)


@pytest.mark.parametrize("name", NAMES)
def test_todays_builder_writes_the_speed_document_it_wrote_before(name: str) -> None:
    doc = json.loads(_dumps(BUILD[name]()))
    same_json(doc, json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", NAMES)
def test_a_stored_speed_document_dumps_back_byte_identical(name: str) -> None:
    text = (GOLDEN / f"{name}.json").read_text(encoding="utf-8")
    assert _dumps(Verdict.model_validate(json.loads(text)).to_dict()) == text


def test_the_golden_speed_documents_cover_each_mode() -> None:
    docs = {name: json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8")) for name in NAMES}
    assert docs["failed"]["speed"] == {"status": "failed", "error": "the engine died in the speed phase",
                                       "profile": TrafficProfile(input_len=8, output_len=8, concurrency=(4,), repeats=3).as_dict(), "thresholds": None}
    offline = docs["offline_precision"]
    assert [lv["precision"]["pairs"] for lv in offline["speed"]["levels"]] == [5, 5]
    assert offline["verdict"] == "BLOCK" and offline["economics"]["levels"]
    serve = docs["serve"]["speed"]
    assert list(serve)[-3:] == ["thresholds", "latency_method", "latency"]
    assert serve["thresholds"] == {"min_speedup": 1.0, "max_slowdown": None, "slos_ms": {"ttft_p99_ms": 90.0}}
    row = serve["levels"][0]
    assert list(row)[-4:] == ["baseline", "candidate", "latency", "goodput"]
    assert list(row["baseline"]) == ["output_tok_s", "median", "total_tok_s", "cv", "request_s"]
    assert serve["latency"] == row["latency"] and row["goodput"]["objectives_ms"] == {"ttft": 50.0}


def test_speed_block_is_typed_and_dumps_to_the_dict_it_always_was() -> None:
    """``speed_block`` returns a ``SpeedBlock`` whose dump (the keys that were set, as ``verdict.json`` writes them) is
    the dict the untyped builder returned for the same levels, written out here by hand: non-finite statistics as
    None, a level's ``precision`` only when it has one, an integer median kept an integer, the first level repeated
    at the top level."""
    nan = float("nan")
    record = {"target": 0.02, "achieved_half_width": 0.015, "pairs": 3, "stopped": "met", "pairs_needed": 3}
    levels = [
        SpeedComparison(2, (100.0, 110.0, 90.0), (150.0, 160.0, 140.0), 1.5, 1.2, 1.8, 0.95, 0.1, 0.0667, "faster",
                        (200.0, 220.0, 180.0), (300.0, 320.0, 280.0), 1.3, None, record),
        SpeedComparison(4, (200,), (210,), 1.05, nan, nan, 0.95, nan, nan, UNMEASURABLE, (), (), nan, None),
    ]
    profile = TrafficProfile(input_len=8, output_len=8, concurrency=(2, 4), repeats=3, precision=0.02)
    sides = {"baseline": {"device": "test CPU", "runs": [{"repeat": 0}]}, "candidate": {"device": "test CPU"}}
    expected = {
        "status": "measured", "method": f"{METHOD}; {PRECISION_METHOD}", "profile": profile.as_dict(),
        "levels": [
            {"concurrency": 2, "ratio": 1.5, "ci_low": 1.2, "ci_high": 1.8, "level": 0.95, "verdict": "faster",
             "mde_ratio": 1.3, "repeats_needed": None, "precision": record,
             "baseline": {"output_tok_s": [100.0, 110.0, 90.0], "median": 100.0, "total_tok_s": [200.0, 220.0, 180.0],
                          "cv": 0.1},
             "candidate": {"output_tok_s": [150.0, 160.0, 140.0], "median": 150.0,
                           "total_tok_s": [300.0, 320.0, 280.0], "cv": 0.0667}},
            {"concurrency": 4, "ratio": 1.05, "ci_low": None, "ci_high": None, "level": 0.95, "verdict": UNMEASURABLE,
             "mde_ratio": None, "repeats_needed": None,
             "baseline": {"output_tok_s": [200], "median": 200, "total_tok_s": [], "cv": None},
             "candidate": {"output_tok_s": [210], "median": 210, "total_tok_s": [], "cv": None}},
        ],
        "ratio": 1.5, "ci_low": 1.2, "ci_high": 1.8, "verdict": "faster", "concurrency": 2, "sides": sides,
    }
    block = speed_block(levels, profile, sides)
    assert isinstance(block, SpeedBlock) and block.measured
    assert block.model_dump(exclude_unset=True) == expected
    assert _dumps(block.model_dump(exclude_unset=True)) == _dumps(expected)  # the same key order and JSON types
    assert block.levels[1].baseline.median == 200 and isinstance(block.levels[1].baseline.median, int)
    assert block.levels[0].precision is not None and block.levels[0].precision.pairs_needed == 3
    # No level: the headline keys are there, all None; without a precision target the method is the plain one.
    plain = TrafficProfile(input_len=8, output_len=8, concurrency=(2,))
    assert speed_block([], plain, {}).model_dump(exclude_unset=True) == {
        "status": "measured", "method": METHOD, "profile": plain.as_dict(), "levels": [], "ratio": None,
        "ci_low": None, "ci_high": None, "verdict": None, "concurrency": None, "sides": {}}
