"""``evalgate.evaluate.placement``: the placement decision (pure, a table of cases), the alternation of fake workers (order,
never two sides awake, sleep/wake counts, restarts of a side whose wake or pass failed), the manifest/report record,
and ``run`` / ``ablate`` end to end with fake workers on a pretended CUDA host; on this CPU host ``alternate`` is
refused before any engine starts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evalgate.errors import ConfigError
from evalgate.evaluate import placement as pl

GiB = 2**30


# ----------------------------------------------------------------------------------------------- the decision
@pytest.mark.parametrize(
    "requested, cuda, problem, utils, weights, gpu, mode, why",
    [
        # CPU: together, whatever the utilizations (vLLM's CPU build has no sleep mode)
        ("auto", False, "no sleep", (0.9, 0.9), (None, None), None, "together", "CPU"),
        # CUDA, vLLM's defaults on both sides (0.9 + 0.9 = 1.8 > 0.95): alternate
        ("auto", True, None, (0.9, 0.9), (None, None), 140 * GiB, "alternate", "0.9 (baseline) + 0.9 (candidate) = 1.8 > 0.95"),
        # 0.45 + 0.45 = 0.9 fits, small weights: together
        ("auto", True, None, (0.45, 0.45), (10 * GiB, 10 * GiB), 140 * GiB, "together", "0.45 (baseline) + 0.45 (candidate) = 0.9 <= 0.95"),
        # exactly 0.95 still fits (the limit is "above 0.95")
        ("auto", True, None, (0.5, 0.45), (None, None), 140 * GiB, "together", "0.5 (baseline) + 0.45 (candidate) = 0.95 <= 0.95"),
        # the utilizations fit but the two checkpoints (2 x 70 GiB) exceed 0.95 of 140 GiB: alternate
        ("auto", True, None, (0.45, 0.45), (70 * GiB, 70 * GiB), 140 * GiB, "alternate", "140.0 GiB"),
        # one weight size unknown: decided on the utilizations only
        ("auto", True, None, (0.45, 0.45), (70 * GiB, None), 140 * GiB, "together", "<= 0.95"),
        # both cannot be resident, but this vLLM has no sleep mode: together, and the reason says why
        ("auto", True, "the installed vLLM lacks vllm.LLM.sleep", (0.8, 0.8), (None, None), 140 * GiB, "together",
         "lacks vllm.LLM.sleep: together anyway"),
        # asked for: honoured
        ("together", True, None, (0.9, 0.9), (None, None), 140 * GiB, "together", "asked for"),
        ("alternate", True, None, (0.3, 0.3), (None, None), 140 * GiB, "alternate", "asked for"),
    ])
def test_decide_table(requested, cuda, problem, utils, weights, gpu, mode, why) -> None:  # type: ignore[no-untyped-def]
    got = pl.decide(requested, source="default", cuda=cuda, sleep_problem=problem, utilizations=utils,
                    weight_bytes=weights, gpu_bytes=gpu)
    assert got.mode == mode and got.requested == requested
    assert why in got.reason
    rec = got.as_dict()
    assert rec["mode"] == mode and rec["figures"]["gpu_memory_utilization"] == list(utils)
    assert ("sleep_level" in rec) == (mode == "alternate")


def test_kv_cache_bytes_bound_what_a_side_holds() -> None:
    """A side whose KV cache is sized by ``kv_cache_memory_bytes`` holds its weights plus those bytes, not its
    ``gpu_memory_utilization``: the shipped baseline (1 GiB KV cache, a tiny model) beside a candidate at vLLM's 0.9
    fits (0.0075 + 0.9); an 8B-shaped pair at 0.8 each does not; with the baseline's weights unknown its utilization
    counts."""
    tiny = pl.decide("auto", source="default", cuda=True, sleep_problem=None, utilizations=(0.9, 0.9),
                     weight_bytes=(20 * 2**20, 20 * 2**20), gpu_bytes=140 * GiB, kv_bytes=(GiB, GiB))
    assert tiny.mode == "together"
    assert tiny.figures["baseline_share"] == pytest.approx((GiB + 20 * 2**20) / (140 * GiB), abs=1e-4)
    assert tiny.figures["candidate_share"] == 0.9
    big = pl.decide("auto", source="default", cuda=True, sleep_problem=None, utilizations=(0.8, 0.8),
                    gpu_bytes=140 * GiB)
    assert big.mode == "alternate" and "0.8 (baseline) + 0.8 (candidate) = 1.6 > 0.95" in big.reason
    unknown = pl.decide("auto", source="default", cuda=True, sleep_problem=None, utilizations=(0.9, 0.9),
                        weight_bytes=(None, 20 * 2**20), gpu_bytes=140 * GiB, kv_bytes=(GiB, GiB))
    assert unknown.mode == "alternate"


def test_alternate_without_sleep_mode_is_refused_naming_the_field(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "cand.yaml"
    with pytest.raises(ConfigError) as err:
        pl.decide("alternate", source=str(cfg), cuda=False, sleep_problem="this platform is CPU", utilizations=(0.9, 0.9),
                  path=cfg, fld="placement")
    assert err.value.field == "placement" and "cand.yaml" in str(err.value) and "this platform is CPU" in str(err.value)


def test_utilization_defaults_to_vllms() -> None:
    assert pl.utilization({}) == 0.9 and pl.utilization({"gpu_memory_utilization": 0.8}) == 0.8


def test_weight_bytes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert pl.weight_bytes("org/some-hub-model") is None
    (tmp_path / "config.json").write_text("{}")
    assert pl.weight_bytes(tmp_path) is None  # config-only (load_format: dummy)
    (tmp_path / "a.safetensors").write_bytes(b"x" * 1000)
    (tmp_path / "b.safetensors").write_bytes(b"x" * 24)
    assert pl.weight_bytes(tmp_path) == 1024
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16_000_000_000}}))
    assert pl.weight_bytes(tmp_path) == 16_000_000_000


# ----------------------------------------------------------------------------------------------- fake workers
class Gpu:
    """What the fake workers share: who is awake now, and every call in order."""

    def __init__(self) -> None:
        self.awake: set[str] = set()
        self.calls: list[tuple[str, str]] = []
        self.most_awake = 0
        self.exclusive = True  # alternate: a pass may run only while its side alone is awake

    def wake(self, name: str) -> None:
        self.awake.add(name)
        self.most_awake = max(self.most_awake, len(self.awake))


class FakeWorker:
    """A live worker: awake when started; ``die_on_wake`` / ``die_on_measure``: its Nth wake / pass fails and the
    worker is then dead (``died``); ``error_on_wake`` / ``error_on_measure``: its Nth wake / pass is answered with an
    error by the live worker; ``timeout_on_measure``: ``--timeout`` runs out in its Nth pass; ``kill_leaves``: the pids
    its kill leaves running."""

    def __init__(self, gpu: Gpu, name: str, speed: float, die_on_wake: int | None = None,
                 die_on_measure: int | None = None, error_on_wake: int | None = None,
                 error_on_measure: int | None = None, timeout_on_measure: int | None = None,
                 kill_leaves: list[int] | None = None) -> None:
        self.gpu, self.name, self.speed = gpu, name, speed
        self.die_on_wake, self.die_on_measure = die_on_wake, die_on_measure
        self.error_on_wake, self.error_on_measure, self.timeout_on_measure = error_on_wake, error_on_measure, \
            timeout_on_measure
        self.kill_leaves = kill_leaves or []
        self.log_tail = ""  # appended to a death's message, as runner.Worker quotes the engine log's last lines
        self.wakes = self.measures = 0
        self.dead = self.closed = False
        self.info = {"event": "ready", "device": "fake GPU", "isa": [], "versions": {}, "sleep_mode": True}
        gpu.wake(name)
        gpu.calls.append((name, "start"))

    def sleep(self, level: int) -> float:
        assert level == 1 and not self.dead
        self.gpu.awake.discard(self.name)
        self.gpu.calls.append((self.name, "sleep"))
        return 0.4

    def wake(self) -> float:
        from evalgate.evaluate.runner import SpeedError

        assert not self.dead
        self.wakes += 1
        if self.wakes == self.die_on_wake:
            self.dead = True
            self.gpu.calls.append((self.name, "wake-died"))
            raise SpeedError(f"engine for {self.name} exited with code 1 while waking up{self.log_tail}", died=True)
        if self.wakes == self.error_on_wake:
            self.gpu.calls.append((self.name, "wake-error"))
            raise SpeedError(f"{self.name} failed while waking up: CUDA Error: invalid argument")
        self.gpu.wake(self.name)
        self.gpu.calls.append((self.name, "wake"))
        return 0.6

    def measure(self, cmd: dict[str, Any]) -> dict[str, Any]:
        from evalgate.evaluate.runner import SpeedError

        assert not self.dead
        assert self.name in self.gpu.awake, f"{self.name} measured asleep"
        if self.gpu.exclusive:
            assert self.gpu.awake == {self.name}, f"{self.name} measured while {self.gpu.awake} awake"
        self.measures += 1
        if self.measures == self.die_on_measure:
            self.dead = True
            self.gpu.awake.discard(self.name)
            self.gpu.calls.append((self.name, "measure-died"))
            raise SpeedError(f"engine for {self.name} was killed by signal 9", died=True)
        if self.measures == self.error_on_measure:
            self.gpu.calls.append((self.name, "measure-error"))
            raise SpeedError(f"throughput measurement of {self.name} failed: ValueError: bad prompt")
        if self.measures == self.timeout_on_measure:
            self.dead = True  # runner.Worker kills a worker whose deadline passed
            self.gpu.awake.discard(self.name)
            self.gpu.calls.append((self.name, "measure-timeout"))
            raise SpeedError(f"engine for {self.name} timed out after 60 s while measuring", timed_out=True)
        self.gpu.calls.append((self.name, f"measure {cmd.get('label')}"))
        return {"output_tok_s": self.speed, "total_tok_s": 2 * self.speed}

    def kill(self) -> list[int]:
        self.dead = True
        self.gpu.awake.discard(self.name)
        self.gpu.calls.append((self.name, "kill"))
        return list(self.kill_leaves)

    def close(self) -> None:
        self.closed = True
        self.gpu.awake.discard(self.name)


def _profile(repeats: int = 2, concurrency: tuple[int, ...] = (4,)) -> Any:
    from evalgate.speed.speedup import resolve_profile

    return resolve_profile({"input_len": 8, "output_len": 8, "concurrency": list(concurrency), "repeats": repeats},
                           cuda=True)


def test_alternation_order_and_never_two_awake() -> None:
    """The baseline sleeps before the candidate starts; then the speed phase (one warm-up per side, two repeats in
    ABBA order) wakes one side at a time, never two: sleeps and wakes exactly where the order changes side."""
    from evalgate.speed.measure import measure_speed

    gpu = Gpu()
    alt = pl.Alternation("alternate")
    alt.started("baseline", FakeWorker(gpu, "baseline", 100.0))
    alt.before_start("candidate")
    alt.started("candidate", FakeWorker(gpu, "candidate", 150.0))
    block = measure_speed({r: alt.proxy(r) for r in ("baseline", "candidate")}, _profile(), progress=lambda s: None)
    assert gpu.most_awake == 1
    assert gpu.calls == [
        ("baseline", "start"), ("baseline", "sleep"), ("candidate", "start"),
        # warm-up: baseline then candidate
        ("candidate", "sleep"), ("baseline", "wake"), ("baseline", "measure warm-up"),
        ("baseline", "sleep"), ("candidate", "wake"), ("candidate", "measure warm-up"),
        # repeat 1: baseline, candidate; repeat 2: candidate (still awake: no switch), baseline
        ("candidate", "sleep"), ("baseline", "wake"), ("baseline", "measure repeat 1/2"),
        ("baseline", "sleep"), ("candidate", "wake"), ("candidate", "measure repeat 1/2"),
        ("candidate", "measure repeat 2/2"),
        ("candidate", "sleep"), ("baseline", "wake"), ("baseline", "measure repeat 2/2"),
    ]
    rec = alt.record()
    assert rec["baseline"]["sleeps"] == 3 and rec["baseline"]["wakes"] == 3
    assert rec["candidate"]["sleeps"] == 3 and rec["candidate"]["wakes"] == 2
    assert rec["baseline"]["sleep_s"] == [0.4] * 3 and rec["candidate"]["wake_s"] == [0.6] * 2
    assert rec["baseline"]["restarts"] == rec["candidate"]["restarts"] == 0
    assert block.levels[0].ratio == pytest.approx(1.5)
    record = pl.placement_record(pl.decide("alternate", source="--placement", cuda=True, sleep_problem=None,
                                           utilizations=(0.8, 0.8)), alt)
    assert (record["sleeps"], record["wakes"], record["restarts"]) == (6, 5, 0)
    assert record["sides"]["baseline"]["sleep_mode"] is True
    assert pl.summary_line(record) == ("placement alternate: baseline 3 sleeps (max 0.40 s), 3 wakes (max 0.60 s), "
                                       "0 restarts; candidate 3 sleeps (max 0.40 s), 2 wakes (max 0.60 s), 0 restarts")


def test_together_never_sleeps() -> None:
    gpu = Gpu()
    alt = pl.Alternation("together")
    alt.started("baseline", FakeWorker(gpu, "baseline", 100.0))
    alt.before_start("candidate")
    alt.started("candidate", FakeWorker(gpu, "candidate", 100.0))
    assert alt.awake == {"baseline", "candidate"}
    assert alt.use("baseline") is alt.workers["baseline"]
    assert [c for _, c in gpu.calls] == ["start", "start"] and alt.record()["baseline"]["sleeps"] == 0


def test_a_wake_that_dies_restarts_that_side_and_the_pass_runs() -> None:
    """The candidate's 2nd wake fails (its engine died): that side is restarted (a new worker, started only after the
    baseline sleeps), the pass it was woken for runs on the new worker, and the restart is recorded."""
    from evalgate.speed.measure import measure_speed

    gpu = Gpu()
    started: list[str] = []

    def restart(role: str) -> FakeWorker:
        assert gpu.awake == set(), "a side restarted while another is awake"
        started.append(role)
        return FakeWorker(gpu, role, 150.0)

    alt = pl.Alternation("alternate", restart=restart)
    alt.started("baseline", FakeWorker(gpu, "baseline", 100.0))
    alt.before_start("candidate")
    alt.started("candidate", FakeWorker(gpu, "candidate", 150.0, die_on_wake=2))
    block = measure_speed({r: alt.proxy(r) for r in ("baseline", "candidate")}, _profile(), progress=lambda s: None)
    assert started == ["candidate"] and gpu.most_awake == 1
    i = gpu.calls.index(("candidate", "wake-died"))
    assert gpu.calls[i:i + 5] == [("candidate", "wake-died"), ("candidate", "kill"), ("candidate", "start"),
                                  ("candidate", "measure warm-up"), ("candidate", "measure repeat 1/2")]
    assert len(block.sides["candidate"].runs) == 2  # no pass lost
    assert [r.get("after_restart", False) for r in block.sides["candidate"].runs] == [True, False]
    rec = alt.record()["candidate"]
    assert rec["restarts"] == 1 and "wake failed" in rec["restart_reasons"][0]


def test_a_long_restart_reason_is_cut_at_a_word_and_counted_in_the_singular() -> None:
    """A death whose message quotes a long engine log is recorded (and shown) cut at a space before
    ``REASON_CHARS``, ending in an ellipsis, never mid-word; one restart reads "1 restart"."""
    from evalgate.speed.measure import measure_speed

    gpu = Gpu()
    line = "INFO It took 0.376621 seconds to fall asleep. | evalgate: slept in 0.38 s | "
    dying = FakeWorker(gpu, "candidate", 150.0, die_on_wake=2)
    dying.log_tail = "; last log lines: " + line * 8
    alt = pl.Alternation("alternate", restart=lambda role: FakeWorker(gpu, role, 150.0))
    alt.started("baseline", FakeWorker(gpu, "baseline", 100.0))
    alt.before_start("candidate")
    alt.started("candidate", dying)
    measure_speed({r: alt.proxy(r) for r in ("baseline", "candidate")}, _profile(), progress=lambda s: None)
    why = alt.record()["candidate"]["restart_reasons"][0]
    full = "wake failed: engine for candidate exited with code 1 while waking up" + dying.log_tail
    assert len(full) > pl.REASON_CHARS and len(why) <= pl.REASON_CHARS and why.endswith("\u2026")
    kept = why[:-1]
    assert full.startswith(kept) and full[len(kept)] == " "  # the cut falls on a space: no word cut in two
    assert "wake failed" in why and "1 restart;" in pl.summary_line(pl.placement_record(
        pl.decide("alternate", source="--placement", cuda=True, sleep_problem=None, utilizations=(0.8, 0.8)), alt)) + ";"


def test_a_pass_that_dies_is_repeated_on_a_restarted_side() -> None:
    from evalgate.speed.measure import measure_speed

    gpu = Gpu()
    alt = pl.Alternation("alternate", restart=lambda role: FakeWorker(gpu, role, 100.0))
    alt.started("baseline", FakeWorker(gpu, "baseline", 100.0, die_on_measure=2))
    alt.before_start("candidate")
    alt.started("candidate", FakeWorker(gpu, "candidate", 100.0))
    block = measure_speed({r: alt.proxy(r) for r in ("baseline", "candidate")}, _profile(), progress=lambda s: None)
    labels = [c for n, c in gpu.calls if n == "baseline" and c.startswith("measure")]
    # the restarted engine runs the level's warm-up (untimed) before the lost pass is repeated
    assert labels == ["measure warm-up", "measure-died", "measure warm-up", "measure repeat 1/2", "measure repeat 2/2"]
    assert len(block.sides["baseline"].runs) == 2 and alt.record()["baseline"]["restarts"] == 1
    assert [r.get("after_restart", False) for r in block.sides["baseline"].runs] == [True, False]
    assert [r.get("after_restart", False) for r in block.sides["candidate"].runs] == [False, False]


def test_restarts_are_bounded_then_the_speed_part_fails() -> None:
    """Every wake of the candidate dies: 2 restarts, then SpeedError (exit 3) naming the side and the count; via
    ``measure_speed_safely`` the speed block is ``failed`` (the quality verdict is kept)."""
    from evalgate.evaluate.runner import SpeedError
    from evalgate.speed.measure import measure_speed_safely

    gpu = Gpu()
    made: list[FakeWorker] = []

    def restart(role: str) -> FakeWorker:
        made.append(FakeWorker(gpu, role, 1.0, die_on_wake=1))
        return made[-1]

    alt = pl.Alternation("alternate", restart=restart)
    alt.started("baseline", FakeWorker(gpu, "baseline", 1.0))
    alt.before_start("candidate")
    alt.started("candidate", FakeWorker(gpu, "candidate", 1.0, die_on_wake=1))
    # each restarted candidate is awake at start: its first pass runs; then the baseline's turn puts it to sleep and
    # its next wake dies. Bound: 2 restarts per side.
    with pytest.raises(SpeedError, match=r"candidate: wake failed: .* \(after 2 restart\(s\) of that side"):
        for _ in range(4):
            alt.measure("baseline", {"label": "b"})
            alt.measure("candidate", {"label": "c"})
    assert len(made) == 2 and alt.record()["candidate"]["restarts"] == 2 and "candidate" not in alt.workers
    # and through the speed phase's safety net
    gpu2 = Gpu()
    alt2 = pl.Alternation("alternate", restart=lambda role: FakeWorker(gpu2, role, 1.0, die_on_wake=1))
    alt2.started("baseline", FakeWorker(gpu2, "baseline", 1.0))
    alt2.before_start("candidate")
    alt2.started("candidate", FakeWorker(gpu2, "candidate", 1.0, die_on_wake=1))
    block = measure_speed_safely({r: alt2.proxy(r) for r in ("baseline", "candidate")}, _profile(repeats=3))
    assert block.status == "failed" and "after 2 restart(s)" in block.error


def test_without_a_restart_a_failure_is_raised_unchanged() -> None:
    """Without a ``restart`` (a caller that gives none) a failed pass is the worker's own error, as before placement
    existed."""
    from evalgate.evaluate.runner import SpeedError

    gpu = Gpu()
    alt = pl.Alternation("together")
    w = alt.started("baseline", FakeWorker(gpu, "baseline", 1.0, die_on_measure=1))
    with pytest.raises(SpeedError, match="^engine for baseline was killed by signal 9$"):
        alt.measure("baseline", {"label": "x"})
    assert w.dead and alt.record()["baseline"]["restarts"] == 0


def _together(gpu: Gpu, restart: Any, **candidate: Any) -> pl.Alternation:
    """A together-mode alternation of a baseline (100 tok/s) and a candidate (150 tok/s, ``candidate``: its
    FakeWorker's die_on_* arguments), both resident."""
    gpu.exclusive = False
    alt = pl.Alternation("together", restart=restart)
    alt.started("baseline", FakeWorker(gpu, "baseline", 100.0))
    alt.before_start("candidate")
    alt.started("candidate", FakeWorker(gpu, "candidate", 150.0, **candidate))
    return alt


def test_together_a_pass_that_dies_is_repeated_on_a_restarted_side() -> None:
    """Both resident: the candidate's engine dies in its 2nd pass (repeat 1/2). Its worker is killed before the new
    one starts (never two copies of a side), nothing sleeps or wakes, the lost pass runs again on the new worker,
    the baseline's worker is left alone, and the restart is recorded with its reason."""
    from evalgate.speed.measure import measure_speed

    gpu = Gpu()
    old: list[FakeWorker] = []

    def restart(role: str) -> FakeWorker:
        assert role not in alt.workers and old[0].dead, "a side restarted beside its old worker"
        assert alt.awake == {"baseline"}
        return FakeWorker(gpu, role, 150.0)

    alt = _together(gpu, restart, die_on_measure=2)
    old.append(alt.workers["candidate"])
    base = alt.workers["baseline"]
    block = measure_speed({r: alt.proxy(r) for r in ("baseline", "candidate")}, _profile(), progress=lambda s: None)
    i = gpu.calls.index(("candidate", "measure-died"))
    assert gpu.calls[i:i + 5] == [("candidate", "measure-died"), ("candidate", "kill"), ("candidate", "start"),
                                  ("candidate", "measure warm-up"), ("candidate", "measure repeat 1/2")]
    assert block.sides["candidate"].runs[0]["after_restart"] is True
    assert [c for _, c in gpu.calls if c in ("sleep", "wake")] == []
    assert len(block.sides["candidate"].runs) == 2 and len(block.sides["baseline"].runs) == 2  # no pass lost
    assert block.levels[0].ratio == pytest.approx(1.5)
    assert alt.workers["baseline"] is base and not base.dead and alt.awake == {"baseline", "candidate"}
    rec = alt.record()
    assert rec["baseline"]["restarts"] == 0 and rec["candidate"]["restarts"] == 1
    assert rec["candidate"]["restart_reasons"] == ["pass 'repeat 1/2' failed: engine for candidate was killed by "
                                                   "signal 9"]
    assert (rec["candidate"]["sleeps"], rec["candidate"]["wakes"]) == (0, 0)
    record = pl.placement_record(pl.decide("together", source="--placement", cuda=False, sleep_problem=None,
                                           utilizations=(0.9, 0.9)), alt)
    assert (record["mode"], record["sleeps"], record["wakes"], record["restarts"]) == ("together", 0, 0, 1)
    assert pl.summary_line(record) == ("placement together: baseline 0 sleeps, 0 wakes, 0 restarts; candidate "
                                       "0 sleeps, 0 wakes, 1 restart")


def test_together_restarts_are_bounded_then_the_speed_part_fails() -> None:
    """Both resident, every candidate worker dies in its first pass: 2 restarts, then SpeedError (exit 3) naming the
    side and the count, no candidate worker left; via ``measure_speed_safely`` the speed block is ``failed``."""
    from evalgate.evaluate.runner import SpeedError
    from evalgate.speed.measure import measure_speed_safely

    gpu = Gpu()
    made: list[FakeWorker] = []

    def restart(role: str) -> FakeWorker:
        made.append(FakeWorker(gpu, role, 1.0, die_on_measure=1))
        return made[-1]

    alt = _together(gpu, restart, die_on_measure=1)
    first = alt.workers["candidate"]
    with pytest.raises(SpeedError, match=r"^candidate: pass 'c' failed: engine for candidate was killed by signal 9 "
                                         r"\(after 2 restart\(s\) of that side, the most allowed\)$"):
        alt.measure("candidate", {"label": "c"})
    assert len(made) == 2 and all(w.dead for w in (first, *made)) and "candidate" not in alt.workers
    assert alt.record()["candidate"]["restarts"] == 2 and alt.awake == {"baseline"}
    gpu2 = Gpu()
    alt2 = _together(gpu2, lambda role: FakeWorker(gpu2, role, 1.0, die_on_measure=1), die_on_measure=1)
    block = measure_speed_safely({r: alt2.proxy(r) for r in ("baseline", "candidate")}, _profile(repeats=3))
    assert block.status == "failed" and block.error.endswith("(after 2 restart(s) of that side, the most allowed)")


@pytest.mark.parametrize("mode", ["together", "alternate"])
def test_an_error_reply_fails_the_speed_part_without_a_restart(mode: str) -> None:
    """A live worker that answers a pass with an error (vLLM raised ValueError) did not die: no restart, the error is
    raised as it came, in either placement; via ``measure_speed_safely`` the speed block is ``failed`` (exit 3)."""
    from evalgate.evaluate.runner import SpeedError
    from evalgate.speed.measure import measure_speed_safely

    gpu = Gpu()
    gpu.exclusive = mode == "alternate"
    made: list[str] = []
    alt = pl.Alternation(mode, restart=lambda role: made.append(role) or FakeWorker(gpu, role, 1.0))
    alt.started("baseline", FakeWorker(gpu, "baseline", 1.0))
    alt.before_start("candidate")
    alt.started("candidate", FakeWorker(gpu, "candidate", 1.0, error_on_measure=2))
    with pytest.raises(SpeedError, match="^throughput measurement of candidate failed: ValueError: bad prompt$"):
        for _ in range(2):
            alt.measure("candidate", {"label": "c"})
    assert made == [] and alt.record()["candidate"]["restarts"] == 0 and not alt.workers["candidate"].dead
    gpu2 = Gpu()
    gpu2.exclusive = mode == "alternate"
    alt2 = pl.Alternation(mode, restart=lambda role: made.append(role) or FakeWorker(gpu2, role, 1.0))
    alt2.started("baseline", FakeWorker(gpu2, "baseline", 1.0, error_on_measure=1))
    alt2.before_start("candidate")
    alt2.started("candidate", FakeWorker(gpu2, "candidate", 1.0))
    block = measure_speed_safely({r: alt2.proxy(r) for r in ("baseline", "candidate")}, _profile())
    assert block.status == "failed" and block.error.endswith("ValueError: bad prompt") and made == []


def test_a_timeout_fails_the_speed_part_without_a_restart() -> None:
    """``--timeout`` running out in a pass is no engine death: no restart (a new worker would get a fresh deadline);
    the side is forgotten, and a later pass on it says why it has no engine."""
    from evalgate.evaluate.runner import SpeedError

    gpu = Gpu()
    made: list[str] = []
    alt = _together(gpu, lambda role: made.append(role) or FakeWorker(gpu, role, 1.0), timeout_on_measure=1)
    with pytest.raises(SpeedError, match="timed out after 60 s") as err:
        alt.measure("candidate", {"label": "c"})
    assert err.value.timed_out and made == [] and "candidate" not in alt.workers
    with pytest.raises(SpeedError, match=r"^candidate: no engine \(it timed out earlier: engine for candidate timed "
                                         r"out after 60 s while measuring\)$"):
        alt.measure("candidate", {"label": "c"})


def test_a_wake_answered_with_an_error_still_restarts_that_side() -> None:
    """Alternate: a wake that fails on a live worker (the CUDA errors of issue 25) restarts that side, as before."""
    gpu = Gpu()
    alt = pl.Alternation("alternate", restart=lambda role: FakeWorker(gpu, role, 1.0))
    alt.started("baseline", FakeWorker(gpu, "baseline", 1.0))
    alt.before_start("candidate")
    alt.started("candidate", FakeWorker(gpu, "candidate", 1.0, error_on_wake=1))
    alt.measure("baseline", {"label": "b"})
    assert alt.measure("candidate", {"label": "c"}) == {"output_tok_s": 1.0, "total_tok_s": 2.0,
                                                        "after_restart": True}
    assert alt.record()["candidate"]["restarts"] == 1
    assert alt.record()["candidate"]["restart_reasons"][0].startswith("wake failed: candidate failed while waking up")


def test_a_side_whose_restarts_ran_out_says_so_on_its_next_pass() -> None:
    """After a side's restarts ran out, a later pass on it (``ablate``'s next variant uses the baseline) is a
    SpeedError naming the side and why, not a KeyError."""
    from evalgate.evaluate.runner import SpeedError

    gpu = Gpu()
    alt = _together(gpu, lambda role: FakeWorker(gpu, role, 1.0, die_on_measure=1), die_on_measure=1)
    with pytest.raises(SpeedError, match="the most allowed"):
        alt.measure("candidate", {"label": "c"})
    with pytest.raises(SpeedError, match=r"^candidate: no engine \(its restarts ran out earlier: pass 'c' failed: "
                                         r"engine for candidate was killed by signal 9\)$"):
        alt.measure("candidate", {"label": "c2"})
    assert alt.proxy("candidate").info == {}


def test_a_restart_whose_engine_fails_to_start_is_a_speed_error_naming_the_side() -> None:
    from evalgate.errors import EngineError
    from evalgate.evaluate.runner import SpeedError

    gpu = Gpu()

    def restart(role: str) -> FakeWorker:
        raise EngineError("engine for candidate exited with code 1 while evaluating its suites")

    alt = _together(gpu, restart, die_on_measure=1)
    with pytest.raises(SpeedError, match=r"^candidate: restart after pass 'c' failed: engine for candidate was killed "
                                         r"by signal 9 failed: the new engine did not start: engine for candidate "
                                         r"exited with code 1 while evaluating its suites$"):
        alt.measure("candidate", {"label": "c"})
    with pytest.raises(SpeedError, match=r"^candidate: no engine \(its restart failed earlier: engine for candidate"):
        alt.measure("candidate", {"label": "c"})
    assert alt.record()["candidate"]["restarts"] == 1


def test_an_old_engine_that_outlives_its_kill_is_not_started_beside() -> None:
    """Some of the dead worker's process group still runs after its kill: no second copy of the side is started."""
    from evalgate.evaluate.runner import SpeedError

    gpu = Gpu()
    made: list[str] = []
    alt = _together(gpu, lambda role: made.append(role) or FakeWorker(gpu, role, 1.0), die_on_measure=1,
                    kill_leaves=[4242, 4243])
    with pytest.raises(SpeedError, match=r"^candidate's old engine still alive after 30 s: pids 4242, 4243; not "
                                         r"starting a second copy \(pass 'c' failed: "):
        alt.measure("candidate", {"label": "c"})
    assert made == [] and "candidate" not in alt.workers and alt.record()["candidate"]["restarts"] == 0


def test_a_pair_with_a_restart_is_left_out_of_the_pair_duration_mean() -> None:
    """Precision mode: each pass takes 1 s (fake clock), the candidate's restart 200 s. The pair it fell in is left
    out of the pair-duration mean (the second stage's budget estimate, and the ``pair_seconds`` recorded)."""
    from evalgate.speed.measure import measure_speed
    from evalgate.speed.speedup import resolve_profile

    now = [0.0]
    gpu = Gpu()
    gpu.exclusive = False

    class Ticking(FakeWorker):
        def measure(self, cmd: dict[str, Any]) -> dict[str, Any]:
            now[0] += 1.0
            return super().measure(cmd)

    def restart(role: str) -> FakeWorker:
        now[0] += 200.0
        return Ticking(gpu, role, 150.0)

    alt = pl.Alternation("together", restart=restart, clock=lambda: now[0])
    alt.started("baseline", Ticking(gpu, "baseline", 100.0))
    alt.started("candidate", Ticking(gpu, "candidate", 150.0, die_on_measure=2))
    profile = resolve_profile({"input_len": 8, "output_len": 8, "concurrency": [4], "repeats": 3}, cuda=True,
                              precision=0.05, max_seconds=100_000)
    block = measure_speed({r: alt.proxy(r) for r in ("baseline", "candidate")}, profile, progress=lambda s: None,
                          clock=lambda: now[0])
    assert alt.record()["candidate"]["restarts"] == 1
    assert block.levels[0].precision.pair_seconds == pytest.approx(2.0)


# ----------------------------------------------------------------------------------------------- run / ablate
@pytest.fixture
def fake_cuda(monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    """A pretended CUDA host with sleep mode and a 140 GiB GPU; ``runner.start_config`` returns fake workers on
    one shared fake GPU (``started``: (config, sleep_mode) in order)."""
    from evalgate.engine import platform
    from evalgate.evaluate import runner
    from evalgate.evaluate.runner import ConfigRun
    from runfixtures import kill_fakes, task

    gpu = Gpu()
    started: list[tuple[str, bool]] = []

    def start(cfg, suites, **kw):  # type: ignore[no-untyped-def]
        assert gpu.awake == set() or not kw.get("sleep_mode"), f"{cfg.name} started while {gpu.awake} awake"
        started.append((cfg.name, bool(kw.get("sleep_mode"))))
        n = 40
        t = {"t": task("t", "docparse", ["ok"] * n, [1.0] * n)}
        eff = {"engine_args": dict(cfg.engine_args), "env": dict(cfg.env)}
        role = "baseline" if cfg.name == "baseline" else "candidate"
        w = FakeWorker(gpu, role, 100.0 if role == "baseline" else 150.0)
        w.info["sleep_mode"] = bool(kw.get("sleep_mode"))
        return w, ConfigRun(config=cfg, tasks=t, effective=eff, journal=str(tmp_path / f"{len(started)}.jsonl"))

    monkeypatch.setattr(runner, "start_config", start)
    monkeypatch.setattr(runner, "kill_workers", kill_fakes)
    monkeypatch.setattr(runner, "check_engine_values", lambda cfg, log, timeout: {"max_model_len": 2048,
                                                                                 "max_num_seqs": 256})
    monkeypatch.setattr(platform, "_has_cuda", lambda: True)
    monkeypatch.setattr(platform, "_gpu_capabilities", lambda visible: ((9, 0),))
    monkeypatch.setattr(platform, "sleep_mode_problem", lambda: None)
    monkeypatch.setattr(platform, "gpu_memory_bytes", lambda visible=None: 140 * GiB)
    (tmp_path / "t.yaml").write_text("alpha: 0.05\ndefault: {margin: 10.0}\nbootstrap_resamples: 1000\n"
                                     "traffic: {input_len: 8, output_len: 8, concurrency: 4, repeats: 2}\n")
    return gpu, started


def test_run_alternate_records_placement(fake_cuda, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    """``evalgate run --placement alternate`` on a (fake) CUDA host: both workers started in sleep mode, the
    candidate only after the baseline slept; the manifest, verdict and report say so."""
    import logging

    from evalgate import cli

    gpu, started = fake_cuda
    out = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="evalgate"):
        code = cli.main(["run", "--config", "fp16-state", "--suites", "docparse", "--thresholds",
                         str(tmp_path / "t.yaml"), "--out", str(out), "--placement", "alternate"])
    assert code in (0, 5)
    assert started == [("baseline", True), ("fp16-state", True)] and gpu.most_awake == 1
    assert gpu.calls[:3] == [("baseline", "start"), ("baseline", "sleep"), ("candidate", "start")]
    man = json.loads((out / "manifest.json").read_text())
    p = man["placement"]
    assert p["mode"] == "alternate" and p["requested"] == "alternate" and p["source"] == "--placement"
    assert p["reason"] == "asked for: one engine awake at a time (sleep mode, level 1)" and p["sleep_level"] == 1
    # warm-up B,C; repeats B C | C B: the baseline slept after start + 2 more times, woke 3 times; the candidate
    # slept 3 times, woke twice (it was awake after its start)
    assert p["sides"]["baseline"]["sleeps"] == 3 and p["sides"]["baseline"]["wakes"] == 3
    assert p["sides"]["candidate"]["sleeps"] == 3 and p["sides"]["candidate"]["wakes"] == 2
    assert p["sides"]["candidate"]["sleep_mode"] is True and p["restarts"] == 0
    assert "requested" not in json.dumps(man["candidate"]["requested"].get("engine_args", {}))
    assert "enable_sleep_mode" not in json.dumps(man["candidate"]["requested"])  # not part of the identity
    assert json.loads((out / "verdict.json").read_text())["manifest"]["placement"]["mode"] == "alternate"
    html = (out / "report.html").read_text()
    assert "<b>alternate</b> (asked: alternate, from --placement)" in html and "6 sleeps, 5 wakes, 0 restarts" in html
    assert "placement: alternate (asked for" in caplog.text
    assert "placement alternate: baseline 3 sleeps" in caplog.text


def test_run_auto_keeps_the_shipped_configs_together(fake_cuda, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The shipped baseline sizes its KV cache (1 GiB) and the embedded model is tiny: on a 140 GiB GPU it holds
    under 1 %, so the candidate's 0.9 fits beside it: auto -> together, nothing sleeps."""
    from evalgate import cli
    from evalgate.models.embedded import resolve_model

    gpu, started = fake_cuda
    gpu.exclusive = False
    out = tmp_path / "run"
    assert cli.main(["run", "--config", "fp16-state", "--suites", "docparse", "--thresholds", str(tmp_path / "t.yaml"),
                     "--out", str(out)]) in (0, 5)
    assert started == [("baseline", False), ("fp16-state", False)] and gpu.most_awake == 2
    p = json.loads((out / "manifest.json").read_text())["placement"]
    assert (p["mode"], p["requested"], p["source"], p["sleeps"], p["wakes"]) == ("together", "auto", "default", 0, 0)
    weights = pl.weight_bytes(resolve_model("embedded:nemotron-h-tiny"))
    assert weights and p["figures"]["weight_bytes"] == [weights, weights]
    share = (2**30 + weights) / (140 * GiB)
    assert p["figures"]["baseline_share"] == pytest.approx(share, abs=1e-4)
    assert p["reason"] == f"both fit at once (GPU share {share:.3g} (baseline) + 0.9 (candidate) = {share + 0.9:.3g} <= 0.95)"


def test_ablate_keeps_the_baseline_asleep_between_variants(fake_cuda, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``evalgate ablate --placement alternate``: the baseline sleeps before each variant's engine starts; at most one
    side awake throughout; the ablation's meta and each variant's manifest record the placement."""
    from evalgate import cli

    gpu, started = fake_cuda
    out = tmp_path / "ab"
    code = cli.main(["ablate", "--config", "cline-recipe", "--suites", "docparse", "--thresholds",
                     str(tmp_path / "t.yaml"), "--out", str(out), "--kind", "alone", "--switches",
                     "OMP_NUM_THREADS,async_scheduling", "--placement", "alternate"])
    assert code == 0
    assert started == [("baseline", True), ("async-sched", True), ("omp1", True)] and gpu.most_awake == 1
    starts = [i for i, c in enumerate(gpu.calls) if c == ("candidate", "start")]
    assert len(starts) == 2 and all(gpu.calls[i - 1] == ("baseline", "sleep") for i in starts)
    meta = json.loads((out / "ablation.json").read_text())["meta"]
    assert meta["placement"]["mode"] == "alternate" and meta["placement"]["source"] == "--placement"
    assert meta["placement"]["sides"]["baseline"]["sleeps"] == 6  # 3 per variant: before its start and twice in speed
    variant = json.loads((out / "variants" / "omp1" / "manifest.json").read_text())["placement"]
    assert variant["sides"]["candidate"]["wakes"] == 2 and variant["sides"]["candidate"]["sleeps"] == 3


def _dies(monkeypatch, role: str, die_on_measure: int, workers: int = 1) -> list[Any]:  # type: ignore[no-untyped-def]
    """Make the first ``workers`` fake workers started for ``role`` die in their ``die_on_measure``-th pass; returns
    every worker started (in order)."""
    from evalgate.evaluate import runner

    start, made, dying = runner.start_config, [], [workers]

    def wrapped(cfg, suites, **kw):  # type: ignore[no-untyped-def]
        w, run = start(cfg, suites, **kw)
        made.append(w)
        if w.name == role and dying[0]:
            w.die_on_measure, dying[0] = die_on_measure, dying[0] - 1
        return w, run

    monkeypatch.setattr(runner, "start_config", wrapped)
    return made


def test_run_together_restarts_a_side_whose_engine_died(fake_cuda, tmp_path, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    """``evalgate run --placement together``: the candidate's engine dies in its 2nd speed pass; that side is
    restarted (without sleep mode, its suites from the store), the pass repeated, the verdict's exit code kept; the
    manifest, report and one terminal line record the restart."""
    import logging

    from evalgate import cli

    gpu, started = fake_cuda
    gpu.exclusive = False
    made = _dies(monkeypatch, "candidate", 2)
    out = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="evalgate"):
        code = cli.main(["run", "--config", "fp16-state", "--suites", "docparse", "--thresholds",
                         str(tmp_path / "t.yaml"), "--out", str(out), "--placement", "together"])
    assert code in (0, 5)
    assert started == [("baseline", False), ("fp16-state", False), ("fp16-state", False)]
    assert made[1].dead and not made[0].dead and gpu.most_awake == 2
    man = json.loads((out / "manifest.json").read_text())
    p = man["placement"]
    assert (p["mode"], p["sleeps"], p["wakes"], p["restarts"]) == ("together", 0, 0, 1)
    assert p["sides"]["baseline"]["restarts"] == 0 and p["sides"]["candidate"]["restarts"] == 1
    assert p["sides"]["candidate"]["restart_reasons"] == ["pass 'repeat 1/2' failed: engine for candidate was "
                                                          "killed by signal 9"]
    speed = json.loads((out / "verdict.json").read_text())["speed"]
    assert speed["status"] == "measured" and [len(speed["sides"][r]["runs"]) for r in ("baseline", "candidate")] == [2, 2]
    html = (out / "report.html").read_text()
    assert "<b>together</b>" in html and "1 restart<br>candidate: 1 restart" in html
    assert "placement together: baseline 0 sleeps, 0 wakes, 0 restarts; candidate 0 sleeps, 0 wakes, 1 restart" \
        in caplog.text


def test_run_together_keeps_the_quality_verdict_when_restarts_run_out(fake_cuda, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every candidate engine dies in its first pass: 2 restarts, then the speed part fails (exit 3) with the
    quality results written."""
    from evalgate import cli

    gpu, started = fake_cuda
    gpu.exclusive = False
    _dies(monkeypatch, "candidate", 1, workers=3)
    out = tmp_path / "run"
    code = cli.main(["run", "--config", "fp16-state", "--suites", "docparse", "--thresholds",
                     str(tmp_path / "t.yaml"), "--out", str(out), "--placement", "together"])
    assert code == 3
    assert started == [("baseline", False)] + [("fp16-state", False)] * 3
    doc = json.loads((out / "verdict.json").read_text())
    assert doc["speed"]["status"] == "failed"
    assert doc["speed"]["error"].endswith("(after 2 restart(s) of that side, the most allowed)")
    assert [t["task"] for t in doc["tasks"]] == ["t"] and doc["tasks"][0]["n"] == 40
    assert json.loads((out / "manifest.json").read_text())["placement"]["sides"]["candidate"]["restarts"] == 2


def test_ablate_together_restarts_the_baseline(fake_cuda, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``evalgate ablate --placement together``: the baseline's engine dies in the first variant's speed phase; the
    baseline is restarted (no sleep mode) and serves the rest of the ablation; both variants are gated and the
    restart is in the ablation's meta and the first variant's manifest."""
    from evalgate import cli

    gpu, started = fake_cuda
    gpu.exclusive = False
    made = _dies(monkeypatch, "baseline", 2)
    out = tmp_path / "ab"
    code = cli.main(["ablate", "--config", "cline-recipe", "--suites", "docparse", "--thresholds",
                     str(tmp_path / "t.yaml"), "--out", str(out), "--kind", "alone", "--switches",
                     "OMP_NUM_THREADS,async_scheduling", "--placement", "together"])
    assert code == 0
    assert started == [("baseline", False), ("async-sched", False), ("baseline", False), ("omp1", False)]
    assert made[0].dead and made[0].name == made[2].name == "baseline" and made[2].closed and not made[2].dead
    meta = json.loads((out / "ablation.json").read_text())["meta"]
    assert meta["placement"]["mode"] == "together" and meta["placement"]["sides"]["baseline"]["restarts"] == 1
    first = json.loads((out / "variants" / "async-sched" / "manifest.json").read_text())["placement"]
    assert first["restarts"] == 1 and first["sides"]["baseline"]["restart_reasons"] == [
        "pass 'repeat 1/2' failed: engine for baseline was killed by signal 9"]
    rows = json.loads((out / "ablation.json").read_text())["rows"]
    assert all(r["speed"] and not r.get("skipped") for r in rows)


def test_ablate_after_the_baselines_restarts_ran_out_the_next_variant_says_why(fake_cuda, tmp_path, monkeypatch,  # type: ignore[no-untyped-def]
                                                                                capsys) -> None:
    """Every baseline engine dies in its first pass: its restarts run out in the first variant's speed phase (that
    budget covers the whole ablation); the next variant's speed part fails naming the baseline and why, not an
    ``internal error: KeyError``."""
    from evalgate import cli

    gpu, started = fake_cuda
    gpu.exclusive = False
    _dies(monkeypatch, "baseline", 1, workers=3)
    out = tmp_path / "ab"
    code = cli.main(["ablate", "--config", "cline-recipe", "--suites", "docparse", "--thresholds",
                     str(tmp_path / "t.yaml"), "--out", str(out), "--kind", "alone", "--switches",
                     "OMP_NUM_THREADS,async_scheduling", "--placement", "together"])
    assert code == 3
    assert started == [("baseline", False), ("async-sched", False), ("baseline", False), ("baseline", False),
                       ("omp1", False)]
    err = capsys.readouterr().err
    assert "internal error" not in err
    assert ("omp1: speed measurement failed: baseline: no engine (its restarts ran out earlier: pass 'warm-up' "
            "failed: engine for baseline was killed by signal 9)") in err


def test_alternate_on_cpu_is_refused_before_any_engine(monkeypatch, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """On this CPU host, ``--placement alternate`` and a config's ``placement: alternate`` are exit 2, one line naming
    the option / the file and field, before any engine (or the engine-value check) starts."""
    from evalgate import cli
    from evalgate.engine import platform
    from evalgate.evaluate import runner

    def tripwire(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("an engine started")

    monkeypatch.setattr(runner, "start_config", tripwire)
    monkeypatch.setattr(runner, "evaluate_config", tripwire)
    monkeypatch.setattr(runner, "check_engine_values", tripwire)
    monkeypatch.setattr(platform, "_has_cuda", lambda: False)
    out = tmp_path / "run"
    assert cli.main(["run", "--config", "fp16-state", "--suites", "docparse", "--out", str(out),
                     "--placement", "alternate"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--placement" in err and "CPU" in err and "sleep mode" in err
    cfg = tmp_path / "alt.yaml"
    cfg.write_text("extends: fp16-state\nplacement: alternate\n")
    assert cli.main(["run", "--config", str(cfg), "--suites", "docparse", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "alt.yaml" in err and "placement" in err and "sleep mode" in err
    assert cli.main(["ablate", "--config", "cline-recipe", "--suites", "docparse", "--out", str(tmp_path / "ab"),
                     "--placement", "alternate"]) == 2
    assert "--placement" in capsys.readouterr().err
    assert not (out / "logs").exists()


def test_placement_is_not_part_of_the_identity(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from evalgate.inputs.config import CONFIGS_DIR, load_config

    base = load_config("fp16-state", CONFIGS_DIR, check_engine_args=False)
    (tmp_path / "alt.yaml").write_text(f"extends: {CONFIGS_DIR / 'fp16-state.yaml'}\nplacement: together\n")
    alt = load_config(tmp_path / "alt.yaml", CONFIGS_DIR, check_engine_args=False)
    assert (base.placement, alt.placement) == ("auto", "together")
    assert alt.placement_from == (tmp_path / "alt.yaml").resolve() and base.placement_from is None
    assert alt.identity() == base.identity()
