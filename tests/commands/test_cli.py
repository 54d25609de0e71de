"""The command line (``evalgate.cli``) as adapters: arguments become one job for ``pipeline.gate`` (the job is
captured, no engine), run options' defaults come from ``options.RunOptions``, and out-of-range values are one-line
errors with exit 2. The commands end to end are in test_speed_cli, test_ablate, test_runs and test_bad_inputs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from evalgate import cli
from evalgate.commands import pipeline
from evalgate.commands.jobs import EngineJob, StoredJob
from evalgate.errors import ExitCode
from evalgate.inputs.options import RunOptions
from evalgate.speed.block import SpeedBlock


def _parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(list(argv))


def test_run_and_ablate_defaults_are_the_run_options_defaults() -> None:
    defaults = RunOptions()
    for cmd in ("run", "ablate"):
        args = _parse(cmd, "--config", "x")
        assert RunOptions.from_args(args) == defaults
        assert (args.logprob_items, args.timeout, args.limit) == (8, 10800.0, None)
    assert defaults.logprob_items == 8 and defaults.timeout == 3 * 3600  # as docs/reference/cli.md shows them


def test_run_options_from_arguments() -> None:
    args = _parse("run", "--config", "x", "--limit", "5", "--logprob-items", "0", "--concurrency", "1,16",
                  "--repeats", "4", "--timeout", "60")
    opts = RunOptions.from_args(args)
    assert (opts.limit, opts.logprob_items, opts.concurrency, opts.repeats, opts.timeout) == (5, 0, [1, 16], 4, 60.0)
    assert opts.wants_speed and not RunOptions().wants_speed
    opts = RunOptions.from_args(_parse("run", "--config", "x", "--precision", "0.02", "--max-repeats", "30",
                                       "--max-seconds", "900"))
    assert (opts.precision, opts.max_repeats, opts.max_seconds, opts.repeats) == (0.02, 30, 900.0, None)
    assert opts.wants_speed  # a precision target implies --speed


@pytest.mark.parametrize(("extra", "field", "message"), [
    (["--limit", "0"], "--limit", "must be >= 1, got 0"),
    (["--logprob-items", "-1"], "--logprob-items", "must be >= 0, got -1"),
    (["--repeats", "0"], "--repeats", "must be >= 1, got 0"),
    (["--no-speed", "--speed"], "--no-speed", "--no-speed contradicts --speed / --concurrency / --repeats / "
                                              "--precision / --max-repeats / --max-seconds"),
    (["--no-speed", "--precision", "0.02"], "--no-speed", "--no-speed contradicts --speed / --concurrency / "
                                                          "--repeats / --precision / --max-repeats / --max-seconds"),
    (["--precision", "1.5"], "--precision", "must be a number with 0 < precision < 1 (0.02 = \u00b12 %), got 1.5"),
    (["--max-repeats", "101"], "--max-repeats", "must be an integer with 2 <= max_repeats <= 100, got 101"),
    (["--max-seconds", "inf"], "--max-seconds", "must be a finite number of seconds > 0, got inf"),
    (["--timeout", "nan"], "--timeout", "must be a number of seconds > 0, got nan"),
])
def test_out_of_range_options_are_one_line_errors(extra: list[str], field: str, message: str,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "gate", lambda job: pytest.fail("refused options must not reach the pipeline"))
    assert cli.main(["run", "--config", "fp16-state", *extra]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert err == f"evalgate: error: {field}: {message}"


def test_concurrency_must_be_distinct_integers() -> None:
    assert cli._concurrency_list("1,16,256") == [1, 16, 256]
    for bad in ("1,1", "0", "a", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            cli._concurrency_list(bad)


class _Captured:
    def __init__(self, verdict: str, speed: SpeedBlock | None = None) -> None:
        self.jobs: list[Any] = []
        self.verdict, self.speed = verdict, speed

    def __call__(self, job: Any) -> pipeline.Outcome:
        self.jobs.append(job)
        return pipeline.Outcome({"verdict": self.verdict}, job.out or Path("runs/x"), self.speed, Path("r.html"))


def test_run_hands_one_engine_job_to_the_pipeline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gate = _Captured("BLOCK")
    monkeypatch.setattr(pipeline, "gate", gate)
    monkeypatch.setattr("evalgate.report.render.render_terminal", lambda doc: f"VERDICT: {doc['verdict']}")
    code = cli.main(["run", "--config", "fp16-state", "--suites", "docparse", "--limit", "7", "--out",
                     str(tmp_path / "r")])
    assert code == ExitCode.BLOCK
    (job,) = gate.jobs
    assert isinstance(job, EngineJob) and job.config == "fp16-state" and job.suite_names == ["docparse"]
    assert job.options.limit == 7 and job.options.logprob_items == 8 and job.out == tmp_path / "r"


def test_run_exits_3_when_the_speed_measurement_failed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(pipeline, "gate", _Captured("PASS", SpeedBlock(status="failed", error="boom")))
    monkeypatch.setattr("evalgate.report.render.render_terminal", lambda doc: "")
    assert cli.main(["run", "--config", "fp16-state", "--out", str(tmp_path / "r")]) == ExitCode.RUNTIME
    assert "quality verdict PASS" in capsys.readouterr().err
    assert (tmp_path / "r" / "summary.md").is_file()  # the error outputs, for CI


def test_compare_hands_a_stored_job_to_the_pipeline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gate = _Captured("NO-OP")
    monkeypatch.setattr(pipeline, "gate", gate)
    monkeypatch.setattr("evalgate.report.render.render_terminal", lambda doc: "")
    assert cli.main(["compare", "a", "b", "--out", str(tmp_path / "c")]) == ExitCode.NO_OP
    (job,) = gate.jobs
    assert isinstance(job, StoredJob) and (job.run_a, job.run_b, job.out) == (Path("a"), Path("b"), tmp_path / "c")


def test_list_names_each_baseline_as_run_resolves_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configs = tmp_path / "configs"
    (configs / "fam").mkdir(parents=True)
    files = {"baseline": "model: org/root", "cand": "extends: baseline", "other": "model: org/other",
             "dangling": "model: org/x\nbaseline: nosuch",
             "fam/baseline": "model: org/fam",
             "fam/cand": "extends: baseline",  # next to the file first: fam/baseline, not the root baseline
             "fam/vs-other": "model: org/fam\nbaseline: other",  # none next to it: configs/other.yaml
             "fam/a-config-name-longer-than-24": "extends: baseline"}
    for name, text in files.items():
        (configs / f"{name}.yaml").write_text(f"{text}\ndescription: about {name}\n")
    (tmp_path / "suites").mkdir()
    assert cli.main(["list", "--configs-dir", str(configs), "--suites-dir", str(tmp_path / "suites")]) == 0
    lines = capsys.readouterr().out.split("configs:\n", 1)[1].split("suites:", 1)[0].splitlines()
    rows = {}
    for ln in lines:
        name, rest = ln.split(" vs ", 1)
        assert rest.endswith(f" about {name.strip()}"), ln
        rows[name.strip()] = rest[:-len(f" about {name.strip()}")].strip()
    assert rows == {"baseline": "-", "cand": "baseline", "other": "-", "dangling": "nosuch (unresolved)",
                    "fam/baseline": "-", "fam/cand": "fam/baseline", "fam/vs-other": "other",
                    "fam/a-config-name-longer-than-24": "fam/baseline"}
    # Columns as wide as their longest entry: every "vs" in one column after the longest name (not a fixed 24), and
    # every description in one column after the longest baseline name, two spaces after it.
    assert len({ln.index(" vs ") for ln in lines}) == 1
    assert len({ln.index(" about ") for ln in lines}) == 1
    longest = next(ln for ln in lines if "longer-than-24" in ln)
    assert longest.startswith("  fam/a-config-name-longer-than-24  vs ")
    assert next(ln for ln in lines if "nosuch" in ln).endswith("nosuch (unresolved)  about dangling")
    # The shipped families: their candidates are gated against the family's own baseline.
    assert cli.main(["list", "--configs-dir", str(Path(__file__).resolve().parents[2] / "configs"),
                     "--suites-dir", str(tmp_path / "suites")]) == 0
    shipped = {ln.split()[0]: ln.split()[2] for ln in capsys.readouterr().out.splitlines() if " vs " in ln}
    assert shipped["dense/bf16"] == "dense/baseline" and shipped["gdn/mtp1"] == "gdn/baseline"
    assert shipped["mtp1"] == "baseline" and shipped["sr-only"] == "fp16-state-flashinfer"


def test_a_closed_stdout_is_exit_141_not_an_internal_error(tmp_path: Path) -> None:
    """``evalgate list | head -1``: the reader closes the pipe after one line; evalgate exits 141 (128 + SIGPIPE)
    without a traceback or "internal error" (measured before the fix: exit 3, "internal error: BrokenPipeError")."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    read_fd, write_fd = os.pipe()
    os.close(read_fd)  # nobody reads: the first write raises BrokenPipeError
    proc = subprocess.run([sys.executable, "-m", "evalgate", "list"], cwd=root, env=env, stdout=write_fd,
                          stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(write_fd)
    assert proc.returncode == 141, proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
