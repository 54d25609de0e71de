"""evalgate ablate: the recipe's switches, the variants (alone, cumulative), platform skips, the table (no engine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalgate.commands import ablate
from evalgate.gate.recommend import AblationRow
from evalgate.inputs.config import CONFIGS_DIR, list_configs, load_baseline, load_config
from runfixtures import kill_fakes


def _known() -> dict[str, Any]:
    return {n: load_config(n, check_engine_args=False) for n in list_configs(CONFIGS_DIR)}


def _cpu_refuse(cfg: Any) -> str:
    args = cfg.engine_args
    if args.get("mamba_backend") == "flashinfer":
        return "FlashInfer needs CUDA"
    if args.get("enable_mamba_cache_stochastic_rounding"):
        return "stochastic rounding needs CUDA"
    return ""


def test_switches_of_the_recipe_in_its_order() -> None:
    recipe = load_config("cline-recipe", check_engine_args=False)
    base = load_baseline(recipe, check_engine_args=False)
    found = ablate.switches(base, recipe)
    assert [s.key for s in found] == ["mamba_ssm_cache_dtype", "enable_mamba_cache_stochastic_rounding",
                                      "mamba_backend", "async_scheduling", "speculative_config", "OMP_NUM_THREADS"]
    assert found[-1].section == "env" and found[-1].value == "1"
    # enable_prefix_caching: false is the baseline's value too: not a switch.
    assert "enable_prefix_caching" not in [s.key for s in found]


def test_variants_alone_then_cumulative_with_cpu_skips() -> None:
    known = _known()
    recipe, base = known["cline-recipe"], known["baseline"]
    variants = ablate.plan_variants(base, recipe, known, _cpu_refuse)
    alone = [v for v in variants if v.kind == "alone"]
    cum = [v for v in variants if v.kind == "cumulative"]
    assert len(alone) == len(cum) == 6
    # A variant equal to a shipped config carries its name (its thresholds and expect apply).
    assert alone[0].config.name == "fp16-state" and alone[0].config.expect == "lossy"
    assert alone[3].config.name == "async-sched" and alone[3].config.expect == "lossless"
    assert alone[5].config.name == "omp1"
    assert [bool(v.skipped) for v in alone] == [False, True, True, False, False, False]
    # The first cumulative step is the first switch alone: the same config object, evaluated once.
    assert cum[0].config is alone[0].config
    # Refused steps are skipped and the chain continues without them (retrying them with each later switch).
    assert cum[1].skipped.startswith("stochastic rounding needs CUDA (the cumulative chain goes on without")
    assert cum[2].skipped and not cum[3].skipped
    assert [s.key for s in cum[2].switches] == [
        "mamba_ssm_cache_dtype", "enable_mamba_cache_stochastic_rounding", "mamba_backend"]
    assert [s.key for s in cum[3].switches] == ["mamba_ssm_cache_dtype", "async_scheduling"]
    assert cum[3].config.engine_args["mamba_ssm_cache_dtype"] == "float16"
    assert cum[3].config.engine_args.get("mamba_backend") == base.engine_args.get("mamba_backend")  # not flashinfer
    assert cum[3].config.engine_args["async_scheduling"] is True and cum[3].config.path == recipe.path
    assert cum[5].config.env == {"OMP_NUM_THREADS": "1"}
    assert cum[5].config.engine_args["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}
    # On a platform that runs everything, the last cumulative step is the recipe itself.
    full = ablate.plan_variants(base, recipe, known, lambda cfg: "")
    assert full[-1].config.name == "cline-recipe" and full[-1].config.identity() == recipe.identity()


def _hopper_refuse(cfg: Any) -> str:
    """An H200: stochastic rounding runs on the FlashInfer kernel only (check_platform's Triton/cvt.rs rule)."""
    args = cfg.engine_args
    if args.get("enable_mamba_cache_stochastic_rounding") and args.get("mamba_backend") != "flashinfer":
        return "stochastic rounding on the Triton Mamba kernel needs compute capability 10.x"
    return ""


def test_a_refused_switch_joins_the_chain_with_the_switch_it_needs() -> None:
    """On Hopper, "+ fp16 + SR" is refused (Triton kernel) but "+ fp16 + SR + FlashInfer" runs: the chain carries SR
    to the next step instead of dropping it, so the last row is still the whole recipe (measured so on an H200)."""
    known = _known()
    recipe, base = known["cline-recipe"], known["baseline"]
    cum = [v for v in ablate.plan_variants(base, recipe, known, _hopper_refuse) if v.kind == "cumulative"]
    assert [bool(v.skipped) for v in cum] == [False, True, False, False, False, False]
    assert cum[1].skipped.endswith("retries it with each later switch)")
    assert cum[2].config.name == "fp16-state-sr" and cum[2].label == (
        "+ mamba_ssm_cache_dtype + enable_mamba_cache_stochastic_rounding + mamba_backend")
    assert cum[3].config.engine_args["enable_mamba_cache_stochastic_rounding"] is True
    assert cum[-1].config.name == "cline-recipe" and cum[-1].config.identity() == recipe.identity()
    # A switch refused to the end stays out: with SR refused everywhere the last row is the recipe minus SR.
    never_sr = [v for v in ablate.plan_variants(base, recipe, known, lambda c: "no SR" if c.engine_args.get(
        "enable_mamba_cache_stochastic_rounding") else "") if v.kind == "cumulative"]
    assert [bool(v.skipped) for v in never_sr] == [False, True, False, False, False, False]
    assert "enable_mamba_cache_stochastic_rounding" not in never_sr[-1].config.engine_args
    assert never_sr[-1].config.env == {"OMP_NUM_THREADS": "1"}


def test_each_carried_switch_joins_on_its_own_when_another_is_refused_for_good() -> None:
    """Two carried switches: SR (refused until MTP is on, a made-up rule) and FlashInfer (always refused). SR must
    join as soon as it can run, not wait for FlashInfer (an all-or-nothing carry would drop it for good)."""
    known = _known()
    recipe, base = known["cline-recipe"], known["baseline"]

    def refuse(cfg: Any) -> str:
        args = cfg.engine_args
        if args.get("mamba_backend") == "flashinfer":
            return "no FlashInfer here"
        if args.get("enable_mamba_cache_stochastic_rounding") and not args.get("speculative_config"):
            return "SR needs MTP here"
        return ""

    cum = [v for v in ablate.plan_variants(base, recipe, known, refuse) if v.kind == "cumulative"]
    assert [bool(v.skipped) for v in cum] == [False, True, True, False, False, False]
    assert cum[1].skipped.startswith("SR needs MTP here") and cum[2].skipped.startswith("no FlashInfer here")
    assert [s.key for s in cum[3].switches] == ["mamba_ssm_cache_dtype", "async_scheduling"]
    assert [s.key for s in cum[4].switches] == ["mamba_ssm_cache_dtype", "enable_mamba_cache_stochastic_rounding",
                                                "async_scheduling", "speculative_config"]
    last = cum[5].config.engine_args
    assert last["enable_mamba_cache_stochastic_rounding"] is True and last.get("mamba_backend") == "triton"
    assert cum[5].config.env == {"OMP_NUM_THREADS": "1"}


def test_the_real_platform_check_on_a_simulated_h200_plans_the_measured_chain(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """check_platform + _refusal (not a stand-in): sm_90 with FlashInfer installed gives the rows the H200 ran."""
    import importlib.util

    from evalgate.engine import platform

    monkeypatch.setattr(platform, "_has_cuda", lambda: True)
    monkeypatch.setattr(platform, "_gpu_capabilities", lambda visible: ((9, 0),))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "flashinfer" else real_find_spec(name, *a))
    known = _known()
    variants = ablate.plan_variants(known["baseline"], known["cline-recipe"], known, ablate._refusal)
    cum = [v for v in variants if v.kind == "cumulative"]
    assert [v.config.name for v in cum if not v.skipped] == [
        "fp16-state", "fp16-state-sr", "cline-recipe~cum4", "cline-recipe~cum5", "cline-recipe"]
    assert cum[1].skipped.startswith("stochastic rounding on the Triton Mamba kernel needs the cvt.rs instruction")
    assert "this GPU is sm_90," in cum[1].skipped and "set 'mamba_backend: flashinfer' (it rounds in software)" in (
        cum[1].skipped)
    alone_sr = next(v for v in variants if v.kind == "alone" and v.switches[0].key.startswith("enable_mamba"))
    assert alone_sr.skipped == "stochastic rounding needs an explicit 'mamba_ssm_cache_dtype: float16'"


def test_rows_and_table() -> None:
    known = _known()
    variants = ablate.plan_variants(known["baseline"], known["cline-recipe"], known, _cpu_refuse)
    doc = {"verdict": "PASS", "tasks": [{"suite": "s", "task": "t", "delta": -0.4, "ci_low": -1.2, "ci_high": 0.3,
                                         "verdict": "PASS"}],
           "speed": {"status": "measured", "levels": [{"concurrency": 16, "ratio": 1.5, "ci_low": 1.3, "ci_high": 1.7,
                                                       "verdict": "faster"}]}}
    rows = ablate.ablation_rows(variants, {"fp16-state": doc})
    assert rows[0].verdict == "PASS" and rows[0].speed[0].ratio == 1.5
    assert rows[1].skipped == "stochastic rounding needs CUDA"
    table = ablate.render_table(rows)
    assert "c=16 \u00d71.50 [1.30, 1.70]" in table and "t \u22120.4 [\u22121.2, +0.3]" in table
    assert "skipped: FlashInfer needs CUDA" in table
    html = ablate.render_html(rows, {"recipe": "cline-recipe", "baseline": "baseline", "model": "m", "limit": 5,
                                     "profile": None, "device": "cpu", "isa": [], "method": "t", "complete": True,
                                     "stopped": ""})
    assert "<svg" in html and "\u00d71.50 [1.30, 1.70]" in html and "<script" not in html
    assert "did not finish" not in html and "MDE" not in html  # a document without MDEs says nothing of them
    # An unresolved level: its MDE and the repeats it needs in the cell, the note under the table at the power used.
    doc["speed"]["levels"][0].update(ci_low=0.9, verdict="no measurable speed-up", mde_ratio=1.8, repeats_needed=7)
    rows = ablate.ablation_rows(variants, {"fp16-state": doc})
    html = ablate.render_html(rows, {"recipe": "cline-recipe", "baseline": "baseline", "model": "m", "limit": 5,
                                     "profile": {"power": 0.9, "concurrency": [16]}, "device": "cpu", "isa": [],
                                     "method": "t", "complete": True, "stopped": ""})
    assert "no measurable speed-up; resolving it needs \u22487 repeats in all<br>MDE \u00d71.80" in html
    assert "detect with 90 % power" in html


def test_pending_rows_in_table_and_html() -> None:
    """A row not run yet: one line in the table; in the HTML its cell and the "did not finish" line, its label (from
    config values) escaped."""
    row = AblationRow(label="env X=<b>&", kind="alone", config="r~X", skipped="", switches=[], pending=True,
                      not_run="the ablation stopped before this row finished")
    done = AblationRow.model_validate({
        "label": "a=1", "kind": "alone", "config": "r~a", "skipped": "", "switches": [], "pending": False,
        "verdict": "PASS", "speed": [], "speed_status": None, "speed_error": None,
        "tasks": [{"suite": "s", "task": "t", "delta": 0.5, "ci_low": -1.0, "ci_high": 2.0, "verdict": "PASS"}]})
    assert ablate.render_table([row]) == ("alone      env X=<b>& not run: the ablation stopped before this "
                                          "row finished")
    meta = {"recipe": "r", "baseline": "b", "model": "m", "limit": None, "profile": None, "device": "cpu", "isa": [],
            "method": "t", "complete": False, "stopped": "KeyboardInterrupt"}
    html = ablate.render_html([done, row], meta)
    assert "This ablation did not finish: 1 of 2 rows not run" in html and "stopped by KeyboardInterrupt" in html
    assert "not run: the ablation stopped before this row finished" in html
    assert "env X=&lt;b&gt;&amp;" in html and "X=<b>" not in html
    assert "<h2>Trade-off</h2>" not in html  # nothing was measured (--no-speed): no empty plot section


def test_ablate_command_with_fake_workers(monkeypatch, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The command's plumbing: one baseline engine for the whole ablation, one engine per distinct runnable variant,
    CPU-refused switches skipped in the table, a row per variant, ablation.html/json and per-variant run dirs."""
    from evalgate import cli
    from evalgate.engine import platform
    from evalgate.evaluate import runner
    from evalgate.evaluate.runner import ConfigRun
    from runfixtures import task

    started: list[str] = []

    class Fake:
        def __init__(self, name: str, speed: float) -> None:
            self.name, self.speed, self.closed = name, speed, False
            self.info = {"event": "ready", "device": "fake CPU", "isa": ["avx2"], "versions": {}}

        def measure(self, cmd: dict) -> dict:
            return {"output_tok_s": self.speed, "total_tok_s": 2 * self.speed}

        def close(self) -> None:
            self.closed = True

        kill = close

    def start(cfg, suites, **kw):  # type: ignore[no-untyped-def]
        started.append(cfg.name)
        n = 40
        t = {"t": task("t", "docparse", ["ok"] * n, [1.0] * n)}
        eff = {"engine_args": dict(cfg.engine_args), "env": dict(cfg.env)}
        return Fake(cfg.name, 100.0 if cfg.name == "baseline" else 150.0), ConfigRun(
            config=cfg, tasks=t, effective=eff, journal=str(tmp_path / f"{len(started)}.jsonl"))

    monkeypatch.setattr(runner, "start_config", start)
    monkeypatch.setattr(runner, "check_engine_values", lambda cfg, log, timeout: {"max_model_len": 2048,
                                                                                 "max_num_seqs": 256})
    monkeypatch.setattr(platform, "_has_cuda", lambda: False)
    (tmp_path / "t.yaml").write_text("alpha: 0.05\ndefault: {margin: 10.0}\nbootstrap_resamples: 1000\n"
                                     "traffic: {input_len: 8, output_len: 8, concurrency: 4, repeats: 2}\n")
    out = tmp_path / "ab"
    code = cli.main(["ablate", "--config", "cline-recipe", "--suites", "docparse", "--thresholds",
                     str(tmp_path / "t.yaml"), "--out", str(out)])
    assert code == 0
    # baseline once; fp16-state (alone = first cumulative step) once; flashinfer / SR never (CPU refuses them)
    assert started[0] == "baseline" and started.count("fp16-state") == 1
    assert not any("mamba_backend" in n or "stochastic" in n for n in started)
    saved = json.loads((out / "ablation.json").read_text())
    rows = saved["rows"]
    # ablation.json's rows read back into the typed rows and dump to the same JSON, key order included
    assert json.dumps([AblationRow.model_validate(r).as_json() for r in rows]) == json.dumps(rows)
    assert saved["meta"]["complete"] is True and saved["meta"]["stopped"] == ""
    assert len(rows) == 12 and sum(bool(r["skipped"]) for r in rows) == 4
    assert not any(r["pending"] for r in rows) and not any("not_run" in r for r in rows)
    assert "did not finish" not in (out / "ablation.html").read_text()
    ran = [r for r in rows if not r["skipped"]]
    assert all(r["speed"][0]["ratio"] == 1.5 for r in ran)
    assert (out / "ablation.html").is_file() and (out / "variants" / "fp16-state" / "verdict.json").is_file()
    table = capsys.readouterr().out
    assert "skipped: the FlashInfer Mamba kernel needs a CUDA GPU" in table and "c=4 \u00d71.50" in table
    # whole labels in the terminal table: the cumulative rows differ at their ends
    assert "+ mamba_ssm_cache_dtype + async_scheduling + speculative_config + OMP_NUM_THREADS " in table
    # --switches keeps only those alone rows; a name that is no switch is a usage error (exit 2)
    started.clear()
    assert cli.main(["ablate", "--config", "cline-recipe", "--suites", "docparse", "--thresholds", str(tmp_path / "t.yaml"),
                     "--out", str(tmp_path / "ab2"), "--kind", "alone", "--switches", "OMP_NUM_THREADS"]) == 0
    assert started == ["baseline", "omp1"]
    assert cli.main(["ablate", "--config", "cline-recipe", "--thresholds", str(tmp_path / "t.yaml"),
                     "--out", str(tmp_path / "ab3"), "--switches", "mamba_backnd"]) == 2
    assert "is not a switch of cline-recipe" in capsys.readouterr().err
    # --switches without --kind: still only those switches' alone rows (no cumulative chain)
    started.clear()
    assert cli.main(["ablate", "--config", "cline-recipe", "--suites", "docparse", "--thresholds", str(tmp_path / "t.yaml"),
                     "--out", str(tmp_path / "ab4"), "--switches", "OMP_NUM_THREADS,async_scheduling"]) == 0
    assert started == ["baseline", "async-sched", "omp1"]
    rows = json.loads((tmp_path / "ab4" / "ablation.json").read_text())["rows"]
    assert [(r["kind"], r["config"]) for r in rows] == [("alone", "async-sched"), ("alone", "omp1")]
    # usage errors, exit 2 before any engine starts: --switches with --kind cumulative, an empty name, --out a file
    started.clear()
    (tmp_path / "a-file").write_text("x")
    for argv, said in ((["--kind", "cumulative", "--switches", "OMP_NUM_THREADS"], "error: --switches: picks alone rows"),
                       (["--switches", ","], "must be switch names separated by commas"),
                       (["--out", str(tmp_path / "a-file")], "exists and is not a directory"),
                       (["--switches", "mamba_backend"], "no row of this ablation can run on this platform (the "
                                                         "FlashInfer Mamba kernel needs a CUDA GPU")):
        out_args = [] if "--out" in argv else ["--out", str(tmp_path / "ab5")]
        assert cli.main(["ablate", "--config", "cline-recipe", "--thresholds", str(tmp_path / "t.yaml"),
                         *out_args, *argv]) == 2
        assert said in capsys.readouterr().err
    assert started == []


def test_a_broken_unrelated_config_does_not_stop_an_ablation(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    """The other configs only name variants (fp16-state, ...): one that does not parse is skipped with a warning."""
    import logging
    import shutil

    from evalgate.suites.discovery import default_suites_dir

    configs = tmp_path / "configs"
    shutil.copytree(CONFIGS_DIR, configs)
    (configs / "zz-broken.yaml").write_text("extends: baseline\nengine_args: [not, a, mapping\n")
    with caplog.at_level(logging.WARNING, logger="evalgate"):
        recipe, base, _, _, known = ablate._load("cline-recipe", configs, default_suites_dir(),
                                                 Path(__file__).resolve().parents[2] / "thresholds.yaml", ["docparse"])
    assert recipe.name == "cline-recipe" and base.name == "baseline"
    assert "zz-broken" not in known and "fp16-state" in known
    assert "zz-broken.yaml" in caplog.text and "not used to name variants" in caplog.text


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), RuntimeError("boom")], ids=["interrupt", "crash"])
def test_interrupted_ablation_keeps_its_table(monkeypatch, tmp_path, capsys,  # type: ignore[no-untyped-def]
                                              exc) -> None:
    """The 1st variant's gate finishes, the 2nd raises: ablation.json/html were written after the 1st (its row done,
    the rest pending) and again on the way out (the rest "not run"); the exception propagates, the baseline worker is
    killed, no table on stdout."""
    from evalgate.commands import pipeline
    from evalgate.engine import platform
    from evalgate.evaluate import runner
    from evalgate.inputs.options import RunOptions
    from evalgate.suites.discovery import default_suites_dir

    class Baseline:
        info = {"event": "ready", "device": "fake CPU", "isa": [], "versions": {}}
        killed = closed = False

        def kill(self) -> None:
            self.killed = True

        def close(self) -> None:
            self.closed = True

    worker = Baseline()
    doc = {"verdict": "PASS", "tasks": [{"suite": "docparse", "task": "t", "delta": 0.0, "ci_low": -1.0,
                                         "ci_high": 1.0, "verdict": "PASS"}]}
    gated: list[str] = []
    seen_after_first: dict = {}

    def gate(job):  # type: ignore[no-untyped-def]
        gated.append(job.variant.name)
        if len(gated) == 1:
            return pipeline.Outcome(doc=doc, out=job.out, speed=None)
        seen_after_first.update(json.loads((out / "ablation.json").read_text()))
        raise exc

    monkeypatch.setattr(runner, "start_config", lambda cfg, suites, **kw: (worker, object()))
    monkeypatch.setattr(runner, "kill_workers", kill_fakes)
    monkeypatch.setattr(pipeline, "gate", gate)
    monkeypatch.setattr(platform, "_has_cuda", lambda: False)
    (tmp_path / "t.yaml").write_text("alpha: 0.05\ndefault: {margin: 10.0}\nbootstrap_resamples: 1000\n")
    out = tmp_path / "ab"
    with pytest.raises(type(exc)):
        ablate.run_ablation("cline-recipe", CONFIGS_DIR, default_suites_dir(), tmp_path / "t.yaml", ["docparse"],
                            RunOptions(no_speed=True), out=out)
    assert worker.killed and not worker.closed
    assert gated == ["fp16-state", "async-sched"]
    assert capsys.readouterr().out == ""  # the table is printed at the end only
    # Independently: the planned rows; fp16-state (alone and the 1st cumulative step) is done, the CPU-refused rows
    # are skipped, every other row is not run.
    known = _known()
    plan = ablate.plan_variants(known["baseline"], known["cline-recipe"], known, _cpu_refuse)
    want_pending = [not v.skipped and v.config.name != "fp16-state" for v in plan]
    assert sum(want_pending) == 6
    for saved, note, stopped in ((seen_after_first, "pending", ""),
                                 (json.loads((out / "ablation.json").read_text()),
                                  "the ablation stopped before this row finished",
                                  "KeyboardInterrupt" if isinstance(exc, KeyboardInterrupt) else "RuntimeError: boom")):
        assert saved["meta"]["complete"] is False and saved["meta"]["stopped"] == stopped
        rows = saved["rows"]
        assert [r["config"] for r in rows] == [v.config.name for v in plan]
        assert [r["pending"] for r in rows] == want_pending
        assert [r.get("not_run") for r in rows] == [note if p else None for p in want_pending]
        assert rows[0]["verdict"] == rows[6]["verdict"] == "PASS" and rows[0]["tasks"][0]["ci_low"] == -1.0
        assert [bool(r["skipped"]) for r in rows] == [bool(v.skipped) for v in plan]
    html = (out / "ablation.html").read_text()
    assert "This ablation did not finish: 6 of 12 rows not run" in html
    assert html.count("not run: the ablation stopped before this row finished") == 6
    assert not list(out.glob(".*.tmp"))


def test_ablate_of_a_random_weight_recipe_needs_speed_only_and_then_loads_no_suites() -> None:
    """``scale/cpu/recipe`` (load_format: dummy) is refused without --speed-only, naming the file and field; with it
    the ablation loads no suite (and --suites is refused)."""
    from evalgate.errors import ConfigError
    from evalgate.suites.discovery import default_suites_dir

    thresholds = Path(__file__).resolve().parents[2] / "thresholds.yaml"
    with pytest.raises(ConfigError) as info:
        ablate._load("scale/cpu/recipe", CONFIGS_DIR, default_suites_dir(), thresholds, None)
    assert info.value.field == "engine_args.load_format" and info.value.path == CONFIGS_DIR / "scale/cpu/baseline.yaml"
    recipe, base, _, suites, _ = ablate._load("scale/cpu/recipe", CONFIGS_DIR, default_suites_dir(), thresholds, None,
                                              speed_only=True)
    assert (recipe.name, base.name, suites) == ("scale/cpu/recipe", "scale/cpu/baseline", [])
    with pytest.raises(ConfigError) as info:
        ablate._load("scale/cpu/recipe", CONFIGS_DIR, default_suites_dir(), thresholds, ["docparse"], speed_only=True)
    assert info.value.field == "--suites"


def test_a_suites_code_raising_on_a_variant_fails_that_row_not_skips_it(monkeypatch, tmp_path,  # type: ignore[no-untyped-def]
                                                                        capsys) -> None:
    """A variant whose outputs make a suite's code raise in its worker (``SuiteCodeError``) is that variant's failure:
    the row says "failed: ..." and the ablation ends with exit 3, never a row skipped as if vLLM had refused a value
    (which ``recommend`` leaves out and which lets the ablation exit 0). The other rows are gated."""
    from evalgate.commands import pipeline
    from evalgate.engine import platform
    from evalgate.errors import EngineError, SuiteCodeError
    from evalgate.evaluate import runner
    from evalgate.inputs.options import RunOptions
    from evalgate.suites.discovery import default_suites_dir

    class Baseline:
        info = {"event": "ready", "device": "fake CPU", "isa": [], "versions": {}}

        def kill(self) -> None:
            pass

        def close(self) -> None:
            pass

    doc = {"verdict": "PASS", "tasks": [{"suite": "docparse", "task": "t", "delta": 0.0, "ci_low": -1.0,
                                         "ci_high": 1.0, "verdict": "PASS"}]}
    broken = "/s/docparse/utils.py: process_results: suite docparse's code raised in the engine worker: ValueError: x"

    def gate(job):  # type: ignore[no-untyped-def]
        if job.variant.name == "fp16-state":
            raise SuiteCodeError("suite docparse's code raised in the engine worker: ValueError: x",
                                 path="/s/docparse/utils.py", field="process_results")
        return pipeline.Outcome(doc=doc, out=job.out, speed=None)

    monkeypatch.setattr(runner, "start_config", lambda cfg, suites, **kw: (Baseline(), object()))
    monkeypatch.setattr(runner, "kill_workers", kill_fakes)
    monkeypatch.setattr(pipeline, "gate", gate)
    monkeypatch.setattr(platform, "_has_cuda", lambda: False)
    (tmp_path / "t.yaml").write_text("alpha: 0.05\ndefault: {margin: 10.0}\nbootstrap_resamples: 1000\n")
    out = tmp_path / "ab"
    with pytest.raises(EngineError) as info:
        ablate.run_ablation("cline-recipe", CONFIGS_DIR, default_suites_dir(), tmp_path / "t.yaml", ["docparse"],
                            RunOptions(no_speed=True), out=out)
    assert info.value.exit_code == 3 and f"fp16-state: {broken}" in str(info.value)
    rows = {(r["kind"], r["config"]): r for r in json.loads((out / "ablation.json").read_text())["rows"]}
    assert rows[("alone", "fp16-state")]["skipped"] == f"failed: {broken}"
    assert rows[("alone", "fp16-state")].get("verdict") in (None, "")
    assert rows[("alone", "async-sched")]["verdict"] == "PASS"
