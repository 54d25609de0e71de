"""The ablation's recommendation (issue 27, item 5): at each measured concurrency the fastest PASS variant whose
speed-up's lower bound is > 1, "none" with the reason otherwise; in the table, the HTML and ablation.json."""

from __future__ import annotations

from typing import Any

import pytest

from evalgate.commands import ablate
from evalgate.gate.recommend import AblationRow, Recommendation, recommend, recommendation_lines


def _row(label: str, verdict: str, *levels: tuple[int, float, float | None, float | None], config: str | None = None,
         switches: int = 1, cost: dict[int, float] | None = None, **extra: Any) -> AblationRow:
    """An ``ablate.ablation_rows`` row that ran: ``levels`` are ``(concurrency, ratio, ci_low, ci_high)``."""
    return AblationRow.model_validate({
        "label": label, "kind": "alone", "config": config or f"r~{label}", "skipped": "", "pending": False,
        "switches": [{"section": "engine_args", "key": f"k{i}", "value": 1} for i in range(switches)],
        "verdict": verdict, "speed_status": "measured", "speed_error": None, "tasks": [],
        "speed": [{"concurrency": c, "ratio": r, "ci_low": lo, "ci_high": hi, "level": 0.95,
                   "verdict": "faster" if lo is not None and lo > 1 else "no measurable speed-up"}
                  for c, r, lo, hi in levels],
        "economics": [{"concurrency": c, "candidate": {"usd_per_mtok": v}} for c, v in (cost or {}).items()],
        **extra})


def test_fastest_pass_with_lower_bound_above_one_per_level() -> None:
    rows = [_row("a", "PASS", (16, 1.30, 1.10, 1.50), (256, 1.10, 1.02, 1.18)),
            _row("b", "PASS", (16, 1.45, 0.95, 2.00), (256, 1.25, 1.05, 1.45)),   # fastest at 16, but not for sure
            _row("c", "BLOCK", (16, 2.00, 1.80, 2.20), (256, 2.00, 1.80, 2.20)),  # fastest of all: quality BLOCK
            _row("d", "INCONCLUSIVE", (16, 1.90, 1.70, 2.10), (256, 1.90, 1.70, 2.10))]
    recs = recommend(rows)
    assert [(r.concurrency, r.label, r.ratio) for r in recs] == [(16, "a", 1.30), (256, "b", 1.25)]
    assert recs[0].config == "r~a" and (recs[0].ci_low, recs[0].ci_high) == (1.10, 1.50)
    assert recs[0].reason == ("the fastest variant that PASSes with its speed-up's lower 95 % bound above 1: "
                                 "\u00d71.30 [1.10, 1.50]")


def test_none_with_the_reason() -> None:
    # Only BLOCK / INCONCLUSIVE variants: never chosen, however fast.
    recs = recommend([_row("c", "BLOCK", (16, 2.0, 1.8, 2.2)), _row("d", "INCONCLUSIVE", (16, 1.9, 1.7, 2.1)),
                      _row("e", "NO-OP", (16, 1.5, 1.2, 1.8))])
    assert recs[0].config is None and recs[0].label is None
    assert recs[0].reason == "no variant PASSes quality (3 measured: c BLOCK, d INCONCLUSIVE, e NO-OP)"
    # PASS but none faster for sure: a lower bound of exactly 1, one below, one without an interval.
    recs = recommend([_row("a", "PASS", (16, 1.2, 1.0, 1.4)), _row("b", "PASS", (16, 1.5, 0.9, 2.1)),
                      _row("c", "PASS", (16, 3.0, None, None))])
    assert recs[0].config is None
    assert recs[0].reason == ("no PASS variant is faster for sure (lower bound of its speed-up > 1); the fastest, "
                                 "c, is \u00d73.00 [no interval]")
    assert recommendation_lines(recs) == [f"c=16: none: {recs[0].reason}"]


def test_ties_go_to_the_larger_lower_bound_then_fewer_switches_and_are_named() -> None:
    rows = [_row("two", "PASS", (16, 1.40, 1.20, 1.60), switches=2),
            _row("one", "PASS", (16, 1.40, 1.20, 1.60), switches=1),
            _row("wide", "PASS", (16, 1.40, 1.05, 1.80))]
    (rec,) = recommend(rows)
    assert rec.label == "one" and rec.tied == ["two"] and rec.reason.endswith("(tied with two)")
    # Same speed-up, a larger lower bound wins and is not a tie.
    (rec,) = recommend([_row("wide", "PASS", (16, 1.40, 1.05, 1.80)), _row("tight", "PASS", (16, 1.40, 1.30, 1.50))])
    assert rec.label == "tight" and rec.tied == []


def test_skipped_pending_and_duplicate_configs_do_not_count() -> None:
    skipped = _row("s", "PASS", (16, 3.0, 2.0, 4.0), skipped="FlashInfer needs CUDA")
    pending = _row("p", "PASS", (16, 3.0, 2.0, 4.0), pending=True)
    alone = _row("fp16", "PASS", (16, 1.2, 1.1, 1.3), config="fp16-state")
    cum = _row("+ fp16", "PASS", (16, 1.2, 1.1, 1.3), config="fp16-state", kind="cumulative")
    (rec,) = recommend([skipped, pending, alone, cum])
    assert rec.label == "fp16" and rec.tied == []  # the same config once, under its first row's label


def test_slo_hook_refuses_a_variant_that_breaks_one() -> None:
    rows = [_row("fast", "PASS", (16, 1.8, 1.5, 2.1)), _row("slow", "PASS", (16, 1.3, 1.1, 1.5))]
    breaks = {"fast": "TTFT p99 900 ms > 500 ms"}
    (rec,) = recommend(rows, slo_failure=lambda r, c: breaks.get(r.label, ""))
    assert rec.label == "slow"
    (rec,) = recommend(rows[:1], slo_failure=lambda r, c: breaks.get(r.label, ""))
    assert rec.config is None
    assert rec.reason == "every PASS variant faster for sure breaks a latency SLO: fast: TTFT p99 900 ms > 500 ms"


def test_nothing_measured_gives_no_recommendation() -> None:
    assert recommend([_row("a", "PASS")]) == [] and recommendation_lines([]) == []


def test_table_html_and_cost_column() -> None:
    rows = [_row("a=1", "PASS", (16, 1.30, 1.10, 1.50), cost={16: 0.8}),
            _row("b=<i>2</i>", "BLOCK", (16, 2.00, 1.80, 2.20), cost={16: 0.5})]
    table = ablate.render_table(rows)
    assert "c=16 \u00d71.30 [1.10, 1.50] $0.80/M" in table and "c=16 \u00d72.00 [1.80, 2.20] $0.50/M" in table
    assert table.endswith("recommendation (fastest PASS variant whose speed-up's lower bound is > 1):\n"
                          "  c=16: recommend a=1 (config r~a=1): the fastest variant that PASSes with its speed-up's "
                          "lower 95 % bound above 1: \u00d71.30 [1.10, 1.50]; $0.80 per M output tokens")
    meta = {"recipe": "r", "baseline": "b", "model": "m", "limit": None, "profile": None, "device": "cpu", "isa": [],
            "method": "t", "complete": True, "stopped": ""}
    html = ablate.render_html(rows, meta)
    assert 'id="recommendation"' in html and "<b>a=1</b>" in html and "$0.80 per M output tokens" in html
    assert "b=&lt;i&gt;2&lt;/i&gt;" in html and "<i>2</i>" not in html
    # Without economics: no cost in the cells.
    plain = [r.model_copy(update={"economics": []}) for r in rows]
    assert "/M" not in ablate.render_table(plain).split("recommendation")[0]
    assert "per M output tokens" not in ablate.render_html(plain, meta)


def test_ablation_rows_carry_the_verdicts_costs() -> None:
    from types import SimpleNamespace

    from evalgate.commands.ablate import Switch, Variant

    v = Variant("alone", (Switch("engine_args", "k", 1),), SimpleNamespace(name="r~k"))
    doc = {"verdict": "PASS", "tasks": [], "speed": {"status": "measured", "levels": []},
           "economics": {"levels": [{"concurrency": 16, "candidate": {"usd_per_mtok": 0.8}}]}}
    (row,) = ablate.ablation_rows([v], {"r~k": doc})
    assert row.as_json()["economics"] == [{"concurrency": 16, "candidate": {"usd_per_mtok": 0.8}}]
    (row,) = ablate.ablation_rows([v], {"r~k": {**doc, "economics": None}})
    assert row.as_json()["economics"] == []


def test_ablate_command_writes_costs_and_the_recommendation(monkeypatch, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Through ``evalgate ablate`` with fake engines (baseline 100 output tok/s, every variant 150): each variant's
    verdict.json has its costs, ablation.json its recommendation, and the terminal table both."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from evalgate import cli
    from evalgate.engine import platform
    from evalgate.evaluate import runner
    from evalgate.evaluate.runner import ConfigRun
    from runfixtures import kill_fakes, task

    class Fake:
        def __init__(self, speed: float) -> None:
            self.speed = speed
            self.info = {"event": "ready", "device": "fake CPU", "isa": ["avx2"], "versions": {}}

        def measure(self, cmd: dict) -> dict:
            return {"output_tok_s": self.speed, "total_tok_s": 2 * self.speed}

        def close(self) -> None:
            pass

        kill = close

    def start(cfg, suites, **kw):  # type: ignore[no-untyped-def]
        n = 40
        t = {"t": task("t", "docparse", ["ok"] * n, [1.0] * n)}
        eff = {"engine_args": dict(cfg.engine_args), "env": dict(cfg.env)}
        return Fake(100.0 if cfg.name == "baseline" else 150.0), ConfigRun(
            config=cfg, tasks=t, effective=eff, journal=str(tmp_path / f"{cfg.name.replace('/', '_')}.jsonl"))

    monkeypatch.setattr(runner, "start_config", start)
    monkeypatch.setattr(runner, "kill_workers", kill_fakes)
    monkeypatch.setattr(runner, "check_engine_values", lambda cfg, log, timeout: {"max_model_len": 2048,
                                                                                 "max_num_seqs": 256})
    monkeypatch.setattr(platform, "_has_cuda", lambda: False)
    (tmp_path / "t.yaml").write_text("alpha: 0.05\ndefault: {margin: 10.0}\nbootstrap_resamples: 1000\n"
                                     "traffic: {input_len: 8, output_len: 8, concurrency: 4, repeats: 2}\n"
                                     "economics: {gpu_hour_usd: 3.6, api_usd_per_mtok: 20}\n")
    out = tmp_path / "ab"
    assert cli.main(["ablate", "--config", "cline-recipe", "--suites", "docparse", "--kind", "alone", "--thresholds",
                     str(tmp_path / "t.yaml"), "--out", str(out)]) == 0
    # $3.60/GPU-hour: baseline 100 tok/s = $10.00/M, a variant at 150 tok/s = $6.67/M; break-even 1/3 at $20/M.
    verdict = json.loads((out / "variants" / "fp16-state" / "verdict.json").read_text())
    (lv,) = verdict["economics"]["levels"]
    assert lv["baseline"]["usd_per_mtok"] == pytest.approx(10.0)
    assert lv["candidate"]["usd_per_mtok"] == pytest.approx(10.0 / 1.5)
    assert lv["candidate"]["break_even_utilisation"] == pytest.approx(1 / 3)
    saved = json.loads((out / "ablation.json").read_text())
    ran = [r for r in saved["rows"] if not r["skipped"]]
    assert all(r["economics"][0]["candidate"]["usd_per_mtok"] == pytest.approx(10.0 / 1.5) for r in ran)
    (rec,) = saved["recommendation"]
    # Every variant that ran is x1.50; the tie goes to the first PASS row (all have one switch).
    first_pass = next(r for r in ran if r["verdict"] == "PASS")
    assert rec["concurrency"] == 4 and rec["config"] == first_pass["config"] and rec["ratio"] == pytest.approx(1.5)
    assert rec["usd_per_mtok"] == pytest.approx(10.0 / 1.5)
    # every key of a typed Recommendation, in its order, and it reads back into one and dumps to the same JSON
    assert list(rec) == list(Recommendation.model_fields)
    assert json.dumps([Recommendation.model_validate(r).as_json() for r in saved["recommendation"]]) == json.dumps(
        saved["recommendation"])
    table = capsys.readouterr().out
    assert "c=4 \u00d71.50 [1.50, 1.50] $6.67/M" in table
    assert f"  c=4: recommend {first_pass['label']} (config {first_pass['config']})" in table
    assert 'id="recommendation"' in (out / "ablation.html").read_text()
