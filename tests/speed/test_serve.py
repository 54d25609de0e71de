"""Unit tests of ``evalgate.engine.serve`` / ``evalgate.speed.serve`` with a fake server (tests/fake_vllm.py), no vLLM.

Covered: engine args -> ``vllm serve`` flags, start / health / stop of the process group (also when it ignores
SIGTERM or leaves a lingering child), fail-fast when the server exits, the start-up timeout, stop on an error
and on Ctrl-C (a real SIGINT to a parent process), parsing of vLLM's ``--save-result`` JSON, and the interleaved
pair measurement with its ratios and intervals computed here independently.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scipy.stats import t as student_t

from evalgate.engine import serve
from evalgate.engine.serve import ServeError, Server, parse_bench_result, run_bench, serve_flags
from evalgate.report.wording import latency_headline, latency_properties
from evalgate.speed import serve as servespeed
from evalgate.speed.block import SpeedBlock
from evalgate.speed.speedup import TrafficProfile

FAKE = Path(__file__).parents[1] / "fake_vllm.py"


@pytest.fixture(autouse=True)
def _fake_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve, "LAUNCHER", [str(FAKE)])
    monkeypatch.setattr(serve, "STOP_GRACE_S", 2.0)


def _pids(pid_file: Path) -> list[int]:
    return [int(x) for x in pid_file.read_text().split()] if pid_file.exists() else []


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie whose parent has not reaped it yet is gone for our purpose
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        return f.read().split(")")[-1].split()[0] == "Z"


def _fake_server(tmp_path: Path, mode: str = "ok", timeout: float = 20.0, **numbers: object) -> Server:
    port = serve.free_port()
    args = {"mode": mode, "pid_file": str(tmp_path / "pids"), **numbers}
    argv = serve.server_command("fake-model", args, port)
    return Server(argv, serve.server_env({}, cuda=False), tmp_path / "serve.log", port, startup_timeout_s=timeout)


def test_engine_args_become_vllm_serve_flags_as_vllms_parser_spells_them() -> None:
    flags = serve_flags({"dtype": "float32", "enforce_eager": True, "async_scheduling": False,
                         "speculative_config": {"num_speculative_tokens": 1, "method": "mtp"}, "seed": 0,
                         "kv_cache_memory_bytes": 1073741824, "gpu_memory_utilization": 0.2,
                         "hf_overrides": {"dtype": "float32"}, "cudagraph_capture_sizes": [1, 2, 4],
                         "disable_log_stats": False, "mamba_cache_dtype": None})
    assert flags == ["--dtype", "float32", "--enforce-eager", "--no-async-scheduling",
                     "--speculative-config", '{"method":"mtp","num_speculative_tokens":1}', "--seed", "0",
                     "--kv-cache-memory-bytes", "1073741824", "--gpu-memory-utilization", "0.2",
                     "--hf-overrides", '{"dtype":"float32"}', "--cudagraph-capture-sizes", "1", "2", "4"]
    assert serve_flags({"disable_log_stats": True}) == ["--disable-log-stats"]
    with pytest.raises(ServeError, match=r"engine_args\.hf_overrides: a function cannot be passed to vllm serve"):
        serve_flags({"hf_overrides": lambda c: c})


def test_the_server_command_serves_the_model_on_127_0_0_1_through_the_launcher() -> None:
    argv = serve.server_command("/m", {"dtype": "bfloat16"}, 12345)
    assert argv == [sys.executable, str(FAKE), "serve", "/m", "--host", "127.0.0.1", "--port", "12345",
                    "--dtype", "bfloat16"]
    bench = serve.bench_command("/m", 12345, input_len=16, output_len=8, num_prompts=8, concurrency=2,
                                result_dir=Path("/r"), result_file="x.json")
    pairs = dict(zip(bench, bench[1:]))
    assert pairs["--max-concurrency"] == "2" and pairs["--request-rate"] == "inf" and pairs["--num-prompts"] == "8"
    assert pairs["--random-input-len"] == "16" and pairs["--random-output-len"] == "8"
    assert pairs["--percentile-metrics"] == "ttft,tpot,itl" and pairs["--metric-percentiles"] == "50,99"
    assert pairs["--result-dir"] == "/r" and "--save-result" in bench and "--ignore-eos" in bench
    assert "--random-range-ratio" not in bench  # exact lengths: vLLM's default, the flag left out
    spread = serve.bench_command("/m", 12345, input_len=16, output_len=8, num_prompts=8, concurrency=2,
                                 result_dir=Path("/r"), result_file="x.json", range_ratio=0.25)
    assert dict(zip(spread, spread[1:]))["--random-range-ratio"] == "0.25"
    exact = serve.bench_command("/m", 12345, input_len=16, output_len=8, num_prompts=8, concurrency=2,
                                result_dir=Path("/r"), result_file="x.json", range_ratio=0.9999999)
    assert dict(zip(exact, exact[1:]))["--random-range-ratio"] == "0.9999999"  # never rounded up to 1


def test_a_server_starts_answers_health_and_its_whole_group_is_gone_after_the_block(tmp_path: Path) -> None:
    with _fake_server(tmp_path, mode="child") as srv:
        assert srv.alive() and srv.startup_s > 0
        time.sleep(0.5)  # the lingering grandchild has registered itself
        pids = _pids(tmp_path / "pids")
        assert len(pids) == 2 and not any(_gone(p) for p in pids)
    assert srv.proc is None and all(_gone(p) for p in pids)  # the grandchild ignored SIGTERM: SIGKILL reached it


def test_a_server_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    srv = _fake_server(tmp_path, mode="ignore-term")
    with srv:
        pid = srv.proc.pid
    assert _gone(pid)


def test_a_server_that_exits_fails_fast_with_its_log_line(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(ServeError, match=r"vllm serve exited with code 3 before it was healthy \(log .*serve\.log: "
                                         r"ValueError: unrecognized engine argument \(fake\)\)"):
        with _fake_server(tmp_path, mode="die", timeout=60):
            pass
    assert time.monotonic() - t0 < 30  # did not wait for the 60 s timeout


def test_a_server_that_never_gets_healthy_times_out_and_is_stopped(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match=r"vllm serve did not come up in 2 s \(log .*serve\.log"):
        with _fake_server(tmp_path, mode="hang", timeout=2):
            pass
    pids = _pids(tmp_path / "pids")
    assert pids and all(_gone(p) for p in pids)


def test_an_error_inside_the_block_stops_the_server(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with _fake_server(tmp_path):
            raise RuntimeError("boom")
    assert all(_gone(p) for p in _pids(tmp_path / "pids"))


def test_ctrl_c_in_the_parent_stops_the_server(tmp_path: Path) -> None:
    """A real SIGINT to a process that holds a server: KeyboardInterrupt unwinds the block, the server is gone."""
    # The child raises KeyboardInterrupt on SIGINT whatever disposition it inherits: in a full-suite run something in
    # the pytest process leaves SIGINT ignored, and an ignored signal stays ignored across exec (Python then installs
    # no handler), so the child slept through it (session 5, twice; never alone).
    script = (f"import signal, sys, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
              f"sys.path.insert(0, {str(Path(__file__).parents[1])!r}); "
              "from pathlib import Path; from evalgate.engine import serve; "
              f"serve.LAUNCHER = [{str(FAKE)!r}]; serve.STOP_GRACE_S = 2.0; "
              "port = serve.free_port(); "
              f"argv = serve.server_command('m', {{'mode': 'ok', 'pid_file': {str(tmp_path / 'pids')!r}}}, port); "
              f"srv = serve.Server(argv, serve.server_env({{}}, False), Path({str(tmp_path / 'log')!r}), port, 20)\n"
              "with srv:\n    print('up', flush=True); time.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    err = tmp_path / "parent.err"  # its traceback, should it ever hang (seen once in a full-suite run, session 5)
    with err.open("w") as err_fh:
        parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=err_fh, text=True,
                                  env=env)
        assert parent.stdout.readline().strip() == "up"
        server_pid = _pids(tmp_path / "pids")[0]
        assert not _gone(server_pid)
        parent.send_signal(signal.SIGINT)
        try:
            assert parent.wait(timeout=60) != 0  # KeyboardInterrupt
        except subprocess.TimeoutExpired:
            parent.kill()
            pytest.fail(f"the parent did not exit 60 s after SIGINT; its stderr: {err.read_text()[-2000:]}")
    assert _gone(server_pid)


def _result(tmp_path: Path, **over: object) -> Path:
    doc = {"duration": 2.0, "completed": 8, "failed": 0, "total_input_tokens": 128, "total_output_tokens": 64,
           "request_throughput": 4.0, "output_throughput": 32.0, "total_token_throughput": 96.0}
    for i, m in enumerate(("ttft", "tpot", "itl")):
        doc.update({f"p50_{m}_ms": 10.0 + i, f"p99_{m}_ms": 20.0 + i, f"median_{m}_ms": 10.0 + i})
    doc.update(over)
    path = tmp_path / "r.json"
    path.write_text(json.dumps({k: v for k, v in doc.items() if v is not None}))
    return path


def test_bench_results_are_read_from_vllms_save_result_keys(tmp_path: Path) -> None:
    run = parse_bench_result(_result(tmp_path), num_prompts=8, concurrency=2, repeat=1)
    assert (run.concurrency, run.repeat, run.requests, run.elapsed_s) == (2, 1, 8, 2.0)
    assert (run.output_tok_s, run.total_tok_s, run.request_s) == (32.0, 96.0, 4.0)
    assert (run.prompt_tokens, run.output_tokens) == (128, 64)
    assert (run.ttft_p50_ms, run.ttft_p99_ms, run.tpot_p50_ms, run.tpot_p99_ms, run.itl_p50_ms, run.itl_p99_ms) == \
        (10.0, 20.0, 11.0, 21.0, 12.0, 22.0)


@pytest.mark.parametrize(("over", "message"), [
    ({"completed": 0, "failed": 8}, r"vllm bench serve: 0 of 8 requests completed, 8 failed"),
    ({"completed": 7, "failed": 1}, r"7 of 8 requests completed, 1 failed"),
    ({"p99_tpot_ms": None}, r"result .*r\.json lacks 'p99_tpot_ms'"),
])
def test_a_bench_result_with_failed_requests_or_missing_keys_is_an_error(tmp_path: Path, over: dict,
                                                                         message: str) -> None:
    with pytest.raises(ServeError, match=message):
        parse_bench_result(_result(tmp_path, **over), num_prompts=8, concurrency=2)


def test_an_unreadable_bench_result_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text("{not json")
    with pytest.raises(ServeError, match=r"vllm bench serve wrote no readable result"):
        parse_bench_result(tmp_path / "r.json", num_prompts=8, concurrency=2)


def test_run_bench_measures_a_live_server_and_reports_a_crashed_benchmark(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with _fake_server(tmp_path, tok_s=200.0, ttft_ms=40.0) as srv:
        run = run_bench(srv, "fake-model", input_len=16, output_len=8, num_prompts=8, concurrency=2)
        assert run.output_tok_s == pytest.approx(200.0) and run.ttft_p50_ms == pytest.approx(40.0)
        assert run.requests == 8 and run.output_tokens == 64 and run.prompt_tokens == 128
        monkeypatch.setenv("FAKE_BENCH", "crash")
        srv.env["FAKE_BENCH"] = "crash"
        with pytest.raises(ServeError, match=r"vllm bench serve exited with code 1 \(log .*serve\.log\.bench: "
                                             r"RuntimeError: fake benchmark crash\)"):
            run_bench(srv, "fake-model", input_len=16, output_len=8, num_prompts=8, concurrency=2)
    with pytest.raises(ServeError, match=r"vllm serve is not running"):
        run_bench(srv, "fake-model", input_len=16, output_len=8, num_prompts=8, concurrency=2)


def _t_interval(b: list[float], c: list[float], level: float = 0.95) -> tuple[float, float]:
    d = [math.log(y / x) for x, y in zip(b, c)]
    half = student_t.ppf(0.5 + level / 2, len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    return math.exp(statistics.fmean(d) - half), math.exp(statistics.fmean(d) + half)


@pytest.mark.parametrize("together", [True, False])
def test_measure_serve_interleaves_both_servers_and_compares_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  together: bool) -> None:
    monkeypatch.setenv("FAKE_ORDER_FILE", str(tmp_path / "order"))
    base_f, cand_f = [1.0, 1.1, 0.9], [1.0, 0.95, 1.05]
    sides = {role: servespeed.ServeSide("fake-model", {"tok_s": tok, "ttft_ms": ttft, "factors": ",".join(map(str, f)),
                                                       "counter_file": str(tmp_path / f"{role}.count"),
                                                       "pid_file": str(tmp_path / "pids")}, {}, tmp_path / f"{role}.log")
             for role, tok, ttft, f in (("baseline", 100.0, 50.0, base_f), ("candidate", 150.0, 40.0, cand_f))}
    profile = TrafficProfile(input_len=16, output_len=8, concurrency=(2,), num_prompts=8, repeats=3, mode="serve")
    block = servespeed.measure_serve(sides, profile, together=together)
    b, c = [100.0 * f for f in base_f], [150.0 * f for f in cand_f]
    row = block.levels[0]
    assert row.baseline.output_tok_s == pytest.approx(b) and row.candidate.output_tok_s == pytest.approx(c)
    assert block.ratio == pytest.approx(statistics.median(c) / statistics.median(b))
    assert (block.ci_low, block.ci_high) == pytest.approx(_t_interval(b, c))
    ttft = block.latency["ttft_p50_ms"]
    tb, tc = [50.0 / f for f in base_f], [40.0 / f for f in cand_f]
    assert ttft.baseline == pytest.approx(tb) and ttft.candidate == pytest.approx(tc)
    assert ttft.ratio == pytest.approx(statistics.median(tc) / statistics.median(tb))
    assert (ttft.ci_low, ttft.ci_high) == pytest.approx(_t_interval(tb, tc))
    assert block.latency["ttft_p99_ms"].baseline == pytest.approx([2 * x for x in tb])
    assert row.baseline.request_s == pytest.approx([x / 8 for x in b])  # 8 output tokens per request
    assert block.profile.mode == "serve" and block.status == "measured"
    ports = [int(p) for p in (tmp_path / "order").read_text().split()]
    argvs = {role: block.sides[role].server["argv"] for role in ("baseline", "candidate")}
    assert all(a[:2] == ["serve", "fake-model"] for a in argvs.values())
    port_of = {role: a[a.index("--port") + 1] for role, a in argvs.items()}
    roles = [next(r for r, p in port_of.items() if int(p) == q) for q in ports] if together else None
    if together:  # ABBA: B C, C B, B C; one start-up each
        assert roles == ["baseline", "candidate", "candidate", "baseline", "baseline", "candidate"]
        assert [len(block.sides[r].server["startups_s"]) for r in port_of] == [1, 1]
    else:  # one server at a time: a restart whenever the side changes (B | C C | B B | C)
        assert [len(block.sides[r].server["startups_s"]) for r in port_of] == [2, 2]
    assert all(_gone(p) for p in _pids(tmp_path / "pids"))


def test_measure_serve_stops_every_server_when_one_side_fails_to_start(tmp_path: Path) -> None:
    sides = {"baseline": servespeed.ServeSide("m", {"pid_file": str(tmp_path / "pids")}, {}, tmp_path / "b.log"),
             "candidate": servespeed.ServeSide("m", {"mode": "die", "pid_file": str(tmp_path / "pids")}, {},
                                               tmp_path / "c.log")}
    profile = TrafficProfile(input_len=16, output_len=8, concurrency=(2,), num_prompts=8, repeats=1, mode="serve")
    with pytest.raises(ServeError, match=r"vllm serve exited with code 3 .*c\.log"):
        servespeed.measure_serve(sides, profile)
    pids = _pids(tmp_path / "pids")
    assert len(pids) == 2 and all(_gone(p) for p in pids)


def test_a_latency_ratio_below_one_with_its_interval_reads_faster() -> None:
    faster = servespeed.compare_latency("ttft_p50_ms", [10.0, 11.0, 10.5], [5.0, 5.4, 5.3], 0.95)
    assert faster.ci_high < 1 and faster.verdict == "faster"
    slower = servespeed.compare_latency("ttft_p50_ms", [5.0, 5.4, 5.3], [10.0, 11.0, 10.5], 0.95)
    assert slower.ci_low > 1 and slower.verdict == "slower"
    one = servespeed.compare_latency("tpot_p50_ms", [10.0], [9.0], 0.95)
    assert one.ratio == pytest.approx(0.9) and math.isnan(one.ci_low) and one.verdict == "no measurable speed-up"


def test_serve_mode_refuses_suite_prompts_and_accepts_random_ones() -> None:
    random = TrafficProfile(input_len=16, output_len=8, concurrency=(2,), mode="serve")
    assert servespeed.serve_problems(random) == []
    suites = TrafficProfile(input_len=16, output_len=8, concurrency=(2,), mode="serve", prompts="suites")
    assert servespeed.serve_problems(suites) == [("prompts", "mode: serve measures vLLM's random dataset only, got "
                                                             "prompts: suites (use prompts: random, or mode: offline)")]


def test_measure_configs_turns_a_server_that_dies_into_a_failed_speed_block(tmp_path: Path) -> None:
    from types import SimpleNamespace

    pids = str(tmp_path / "pids")
    base = SimpleNamespace(model="fake-model", engine_args={"pid_file": pids}, env={})
    cand = SimpleNamespace(model="fake-model", engine_args={"mode": "die", "pid_file": pids}, env={"X": "1"})
    profile = TrafficProfile(input_len=16, output_len=8, concurrency=(2,), num_prompts=8, repeats=2, mode="serve")
    block = servespeed.measure_configs(base, cand, profile, tmp_path / "logs", cuda=False)
    assert block.status == "failed" and block.profile.as_dict() == profile.as_dict()
    assert block.error.startswith("vllm serve exited with code 3 before it was healthy (log ")
    assert str(tmp_path / "logs" / "candidate-serve.log") in block.error
    assert all(_gone(p) for p in _pids(tmp_path / "pids"))
    ok = servespeed.measure_configs(base, base, profile, tmp_path / "logs2", cuda=False)
    assert ok.status == "measured" and ok.ratio == pytest.approx(1.0)
    assert ok.sides["candidate"].server["log"] == str(tmp_path / "logs2" / "candidate-serve.log")


def _latency_block() -> SpeedBlock:
    """A serve block of 3 repeats at c=2: the candidate halves every latency (ms) and has 1.5x the throughput."""
    b = [servespeed.ServeRun(2, i, 1.0, 8, 128, 64, 64.0 * f, 192.0 * f, 8.0 * f, 40.0 / f, 80.0 / f, 10.0 / f,
                             20.0 / f, 10.0 / f, 30.0 / f) for i, f in enumerate([1.0, 1.1, 0.9])]
    c = [servespeed.ServeRun(2, i, 1.0, 8, 128, 64, 96.0 * f, 288.0 * f, 12.0 * f, 20.0 / f, 40.0 / f, 5.0 / f,
                             10.0 / f, 5.0 / f, 15.0 / f) for i, f in enumerate([1.0, 1.05, 0.95])]
    profile = TrafficProfile(input_len=16, output_len=8, concurrency=(2,), num_prompts=8, repeats=3, mode="serve")
    block = servespeed.serve_block({"baseline": b, "candidate": c}, profile, {"baseline": {}, "candidate": {}})
    return block


def test_the_latency_headline_names_ttft_and_tpot_with_their_intervals() -> None:
    block = _latency_block()
    ttft = block.latency["ttft_p50_ms"]
    lo, hi = _t_interval([40.0, 40 / 1.1, 40 / 0.9], [20.0, 20 / 1.05, 20 / 0.95])
    assert ttft.ratio == pytest.approx(20.0 / 40.0) and (ttft.ci_low, ttft.ci_high) == pytest.approx((lo, hi))
    assert latency_headline(block) == (
        f"latency c=2: TTFT p50 \u00d70.50 [{lo:.2f}, {hi:.2f}] faster (40.0 \u2192 20.0 ms), "
        f"TPOT p50 \u00d70.50 [{lo:.2f}, {hi:.2f}] faster (10.0 \u2192 5.0 ms)")
    assert latency_headline(SpeedBlock.model_validate({"levels": [{"concurrency": 2}]})) == ""
    props = dict(latency_properties(block))
    assert len(props) == 6 * 4 and props["ttft_p50_ratio_c2"] == "0.5000" and props["tpot_p99_ms_c2_baseline"] == "20.00"
    assert props["itl_p99_ratio_c2_ci"] == f"[{block.latency['itl_p99_ms'].ci_low}, " \
                                           f"{block.latency['itl_p99_ms'].ci_high}]"
    assert latency_properties(SpeedBlock(status="failed", error="x")) == []


def test_a_serve_mode_verdict_shows_its_latencies_in_terminal_markdown_and_junit() -> None:
    """The serve block goes through the typed Verdict (its extra keys kept) into every rendered output."""
    import xml.etree.ElementTree as ET

    from evalgate.report.outputs import render_junit, render_markdown
    from evalgate.report.render import render_terminal
    from evalgate.report.verdict import Verdict

    block = _latency_block()
    doc = json.loads((Path(__file__).parents[1] / "verdicts" / "v1" / "speed_pass.json").read_text())
    doc["speed"] = json.loads(json.dumps(block.model_dump(exclude_unset=True)))
    verdict = Verdict.model_validate(doc)
    line = latency_headline(block)
    assert line.startswith("latency c=2: TTFT p50 \u00d70.50")
    assert line in render_terminal(verdict).splitlines()
    assert line in render_markdown(verdict)
    root = ET.fromstring(render_junit(verdict))
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["ttft_p50_ratio_c2"] == "0.5000" and props["tpot_p50_ms_c2_candidate"] == "5.00"
    assert line in next(case for case in root.iter("testcase") if case.get("name") == "throughput").find(
        "system-out").text
