"""Economics (issue 27, item 4): $ per million output tokens per side, the switch's saving with its interval, the
break-even utilisation against an API; the thresholds section and its precedence; the verdict's ``economics`` block
in every output; and that cost never changes a verdict. Expected values are computed by hand in the comments."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from evalgate.errors import ConfigError  # noqa: E402
from evalgate.inputs.thresholds import load_thresholds  # noqa: E402
from evalgate.speed.block import SpeedBlock  # noqa: E402
from evalgate.speed.economics import (  # noqa: E402
    break_even_utilisation,
    cost_ratio_interval,
    economics_block,
    economics_lines,
    engine_gpus,
    usd_per_mtok,
)
from runfixtures import EVIL_SCRIPT, equal_sides_document, manifest, side, task  # noqa: E402

BASE = "alpha: 0.05\ndefault: {margin: 2.0}\n"


def _level(c: int, base: float, cand: float, lo: float | None, hi: float | None) -> dict[str, Any]:
    """A speed level as ``speed.speed_block`` writes it (medians and the speed-up's interval)."""
    return {"concurrency": c, "ratio": cand / base if base else None, "ci_low": lo, "ci_high": hi, "level": 0.95, "verdict": "faster",
            "baseline": {"output_tok_s": [base], "median": base, "total_tok_s": [2 * base], "cv": None},
            "candidate": {"output_tok_s": [cand], "median": cand, "total_tok_s": [2 * cand], "cv": None}}


def _speed(*levels: dict[str, Any]) -> SpeedBlock:
    head = levels[0]
    return SpeedBlock.model_validate({"status": "measured", "method": "test", "levels": list(levels),
            "profile": {"input_len": 8, "output_len": 8, "concurrency": [lv["concurrency"] for lv in levels],
                        "repeats": 3, "mode": "offline", "prompts": "random", "num_prompts": 16},
            "ratio": head["ratio"], "ci_low": head["ci_low"], "ci_high": head["ci_high"], "verdict": head["verdict"],
            "concurrency": head["concurrency"], "sides": {"candidate": {"device": "test CPU", "isa": []}}})


# ------------------------------------------------------------------------------------------ formulas


def test_cost_per_million_output_tokens_by_hand() -> None:
    # $3.60 an hour at 1,000 tok/s: 3.6e6 tokens an hour, so $1.00 per million.
    assert usd_per_mtok(3.6, 1, 1000.0) == pytest.approx(1.0)
    # $2.50 an hour, 4 GPUs, 500 tok/s: $10 an hour for 1.8e6 tokens = $5.5556 per million.
    assert usd_per_mtok(2.5, 4, 500.0) == pytest.approx(10 / 1.8)
    for bad in ((0.0, 1, 1.0), (1.0, 0, 1.0), (1.0, 1, 0.0), (1.0, 1, float("nan")), (-1.0, 1, 1.0)):
        with pytest.raises(ValueError):
            usd_per_mtok(*bad)


def test_cost_interval_is_the_speedup_interval_inverted() -> None:
    # Speed-up [1.1, 1.4] -> cost ratio [1/1.4, 1/1.1] = [0.7143, 0.9091]: the bounds swap.
    lo, hi = cost_ratio_interval(1.1, 1.4)
    assert (lo, hi) == (pytest.approx(1 / 1.4), pytest.approx(1 / 1.1))
    # Twice the GPUs for the candidate doubles its cost ratio: [2/1.4, 2/1.1].
    assert cost_ratio_interval(1.1, 1.4, 2.0) == (pytest.approx(2 / 1.4), pytest.approx(2 / 1.1))
    assert cost_ratio_interval(None, None) == (None, None) == cost_ratio_interval(0.0, 1.2)


def test_break_even_utilisation_by_hand() -> None:
    # $0.80 per M at full load against an API at $2.00: self-hosting wins above 40 % utilisation.
    assert break_even_utilisation(0.8, 2.0) == pytest.approx(0.4)
    assert break_even_utilisation(3.0, 2.0) == pytest.approx(1.5)  # above 1: the API is cheaper even at 100 %
    with pytest.raises(ValueError):
        break_even_utilisation(1.0, 0.0)


def test_gpus_from_the_parallel_sizes() -> None:
    assert engine_gpus({"tensor_parallel_size": 2, "pipeline_parallel_size": 3}) == 6
    assert engine_gpus({"tensor_parallel_size": 4}) == 4
    assert engine_gpus({}) == engine_gpus(None) == engine_gpus({"tensor_parallel_size": True}) == 1


def test_block_by_hand() -> None:
    # $3.60/GPU-hour, 1 GPU: baseline 1,000 tok/s = $1.00/M, candidate 1,250 tok/s = $0.80/M; saving $0.20 (-20 %),
    # interval from the speed-up [1.1, 1.4]: [1/1.4 - 1, 1/1.1 - 1] = [-28.57 %, -9.09 %]. API at $2.00/M:
    # break-even 50 % (baseline) and 40 % (candidate); the candidate saves $1.20/M (60 %) against the API at full load.
    block = economics_block(_speed(_level(16, 1000.0, 1250.0, 1.1, 1.4)),
                            {"gpu_hour_usd": 3.6, "api_usd_per_mtok": 2.0}, {"baseline": {}, "candidate": {}})
    assert block is not None
    (lv,) = block["levels"]
    assert block["gpus"] == {"baseline": 1, "candidate": 1} and block["api_usd_per_mtok"] == 2.0
    assert lv["baseline"]["usd_per_mtok"] == pytest.approx(1.0) and lv["candidate"]["usd_per_mtok"] == pytest.approx(0.8)
    assert lv["saving_usd_per_mtok"] == pytest.approx(0.2) and lv["cost_change"] == pytest.approx(-0.2)
    assert lv["cost_change_low"] == pytest.approx(-0.285714, abs=1e-6)
    assert lv["cost_change_high"] == pytest.approx(-0.090909, abs=1e-6)
    assert lv["baseline"]["break_even_utilisation"] == pytest.approx(0.5)
    assert lv["candidate"]["break_even_utilisation"] == pytest.approx(0.4)
    assert lv["candidate"]["api_saving_usd_per_mtok"] == pytest.approx(1.2)
    assert lv["candidate"]["api_saving_share"] == pytest.approx(0.6)
    lines = economics_lines(block)
    assert lines[1] == ("c=16: $1.00 \u2192 $0.80 per M output tokens (\u221220 % [\u221229 %, \u22129 %]); "
                        "API cheaper below 40 % utilisation (baseline: below 50 %)")


def test_block_gpus_from_each_sides_engine_args_unless_set() -> None:
    # Candidate on TP=2: its $ per M doubles; baseline $1.00, candidate 2 * 3.6e6... = 2 * $0.80 = $1.60 (+60 %).
    speed = _speed(_level(16, 1000.0, 1250.0, 1.1, 1.4))
    block = economics_block(speed, {"gpu_hour_usd": 3.6}, {"baseline": {}, "candidate": {"tensor_parallel_size": 2}})
    (lv,) = block["levels"]
    assert block["gpus"] == {"baseline": 1, "candidate": 2}
    assert lv["candidate"]["usd_per_mtok"] == pytest.approx(1.6) and lv["cost_change"] == pytest.approx(0.6)
    assert lv["cost_change_low"] == pytest.approx(2 / 1.4 - 1) and lv["cost_change_high"] == pytest.approx(2 / 1.1 - 1)
    assert "break_even_utilisation" not in lv["candidate"]  # no API price, no break-even
    # ``gpus`` set: both sides take it, whatever their engine args.
    block = economics_block(speed, {"gpu_hour_usd": 3.6, "gpus": 8},
                            {"baseline": {}, "candidate": {"tensor_parallel_size": 2}})
    assert block["gpus"] == {"baseline": 8, "candidate": 8} and block["gpus_source"] == "economics.gpus"
    assert block["levels"][0]["baseline"]["usd_per_mtok"] == pytest.approx(8.0)


def test_api_cheaper_even_at_full_load() -> None:
    # $3.60/GPU-hour at 100 tok/s = $10/M against an API at $2/M: break-even 5.0 (never).
    block = economics_block(_speed(_level(1, 100.0, 100.0, None, None)), {"gpu_hour_usd": 3.6, "api_usd_per_mtok": 2},
                            {"baseline": {}, "candidate": {}})
    (lv,) = block["levels"]
    assert lv["candidate"]["break_even_utilisation"] == pytest.approx(5.0)
    assert lv["cost_change_low"] is None and lv["cost_change_high"] is None  # one repeat: no interval
    assert economics_lines(block)[1] == ("c=1: $10.00 \u2192 $10.00 per M output tokens (0 %); API cheaper even at "
                                         "100 % utilisation")


def test_absent_without_settings_or_measured_speed() -> None:
    speed = _speed(_level(16, 1000.0, 1250.0, 1.1, 1.4))
    sides = {"baseline": {}, "candidate": {}}
    assert economics_block(speed, None, sides) is None
    assert economics_block(None, {"gpu_hour_usd": 1.0}, sides) is None
    assert economics_block(SpeedBlock(status="failed", error="x"), {"gpu_hour_usd": 1.0}, sides) is None
    assert economics_block(_speed(_level(16, 0.0, 10.0, None, None)), {"gpu_hour_usd": 1.0}, sides) is None


# ------------------------------------------------------------------------------------------ thresholds.yaml


def test_config_keys_over_top_level_keys(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(BASE + "economics: {gpu_hour_usd: 2.5, api_usd_per_mtok: 1.5}\n"
                    "configs:\n  cand: {economics: {gpu_hour_usd: 4, gpus: 2}}\n  other: {margin: 3.0}\n",
                    encoding="utf-8")
    t = load_thresholds(path)
    assert t.economics_for("cand") == {"gpu_hour_usd": 4.0, "api_usd_per_mtok": 1.5, "gpus": 2}
    assert t.economics_for("other") == t.economics_for(None) == {"gpu_hour_usd": 2.5, "api_usd_per_mtok": 1.5}
    path.write_text(BASE + "configs:\n  cand: {economics: {gpu_hour_usd: 4}}\n", encoding="utf-8")
    t = load_thresholds(path)
    assert t.economics_for("cand") == {"gpu_hour_usd": 4.0} and t.economics_for("other") is None
    path.write_text(BASE, encoding="utf-8")
    assert load_thresholds(path).economics_for("cand") is None


@pytest.mark.parametrize(("text", "field", "fragment"), [
    ("economics: {gpu_hour_usd: 0}", "economics.gpu_hour_usd", "finite number > 0 (US dollars), got 0"),
    ("economics: {gpu_hour_usd: -2.5}", "economics.gpu_hour_usd", "got -2.5"),
    ("economics: {gpu_hour_usd: cheap}", "economics.gpu_hour_usd", "got 'cheap'"),
    ("economics: {gpu_hour_usd: 2, api_usd_per_mtok: 0}", "economics.api_usd_per_mtok", "> 0"),
    ("economics: {gpu_hour_usd: 2, gpus: 0}", "economics.gpus", "integer >= 1 (GPUs one engine occupies), got 0"),
    ("economics: {gpu_hour_usd: 2, gpus: 1.5}", "economics.gpus", "integer >= 1"),
    ("economics: {gpu_hour_usd: 2, gpu: 1}", "economics.gpu", "did you mean 'gpus'"),
    ("economics: {api_usd_per_mtok: 2}", "economics.gpu_hour_usd", "required"),
    ("economics:", "economics.gpu_hour_usd", "required"),
    ("configs: {cand: {economics: {gpus: 2}}}", "configs.cand.economics.gpu_hour_usd", "required"),
])
def test_bad_economics_names_the_field(tmp_path: Path, text: str, field: str, fragment: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(BASE + text + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_thresholds(path)
    assert err.value.field == field and fragment in str(err.value) and err.value.exit_code == 2
    assert str(err.value).startswith(f"{path}: {field}: ") and "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------ the verdict


def _doc(*, economics: dict[str, Any] | None, min_speedup: float | None = None,
         cand_args: dict[str, Any] | None = None, ci: tuple[float, float] = (1.1, 1.4)) -> dict[str, Any]:
    from evalgate.inputs.thresholds import SpeedFloors

    return equal_sides_document(cand_args=cand_args, speed=_speed(_level(16, 1000.0, 1250.0, *ci)),
                                speed_floors=SpeedFloors(min_speedup=min_speedup), economics=economics)


def test_verdict_block_and_absence() -> None:
    doc = _doc(economics={"gpu_hour_usd": 3.6, "api_usd_per_mtok": 2.0}, cand_args={"tensor_parallel_size": 1})
    ec = doc["economics"]
    assert ec["gpu_hour_usd"] == 3.6 and ec["levels"][0]["candidate"]["usd_per_mtok"] == pytest.approx(0.8)
    assert "economics" not in _doc(economics=None)
    # The manifest's requested engine args give the candidate's GPUs: TP 2 doubles its cost.
    assert _doc(economics={"gpu_hour_usd": 3.6}, cand_args={"tensor_parallel_size": 2})["economics"]["gpus"] == {
        "baseline": 1, "candidate": 2}


@pytest.mark.parametrize("min_speedup", [None, 1.2])
def test_economics_never_changes_the_verdict(min_speedup: float | None) -> None:
    # min_speedup 1.2 above the speed-up's lower bound 1.1: BLOCK with or without costs (and they show a saving).
    without = _doc(economics=None, min_speedup=min_speedup)
    with_cost = _doc(economics={"gpu_hour_usd": 3.6, "api_usd_per_mtok": 2.0}, min_speedup=min_speedup)
    assert without["verdict"] == ("PASS" if min_speedup is None else "BLOCK")
    assert {k: v for k, v in with_cost.items() if k != "economics"} == without


def test_economics_reaches_every_output() -> None:
    from evalgate.report.outputs import render_junit, render_markdown
    from evalgate.report.render import render_html, render_terminal

    doc = _doc(economics={"gpu_hour_usd": 3.6, "api_usd_per_mtok": 2.0})
    line = ("c=16: $1.00 \u2192 $0.80 per M output tokens (\u221220 % [\u221229 %, \u22129 %]); API cheaper below "
            "40 % utilisation (baseline: below 50 %)")
    term = render_terminal(doc)
    assert "cost ($3.6/GPU-hour, 1 GPU(s) per engine, API $2 per M output tokens, at full load):" in term
    assert f"  {line}" in term
    md = render_markdown(doc)
    assert "**Cost** ($3.6/GPU-hour, 1 GPU(s) per engine, API $2 per M output tokens, at full load; report only" in md
    assert f"- {line}" in md
    props = {p.get("name"): p.get("value") for p in ET.fromstring(render_junit(doc)).iter("property")}
    assert float(props["usd_per_mtok_c16_baseline"]) == pytest.approx(1.0)
    assert float(props["usd_per_mtok_c16_candidate"]) == pytest.approx(0.8)
    assert float(props["cost_change_c16"]) == pytest.approx(-0.2)
    assert float(props["break_even_utilisation_c16_candidate"]) == pytest.approx(0.4)
    html = render_html(doc)
    assert 'id="economics"' in html and "<td>$1.00</td><td>$0.80</td><td>$0.20</td><td>\u221220 %</td>" in html
    assert "95% [\u221229 %, \u22129 %]" in html and "<td>50 % / 40 %</td>" in html
    assert "<td>$1.20 (60 %) below the API</td>" in html and "engine <span class=\"muted\">(" in html
    # Without the section: no cost anywhere.
    plain = _doc(economics=None)
    assert "cost (" not in render_terminal(plain) and "**Cost**" not in render_markdown(plain)
    assert 'id="economics"' not in render_html(plain) and "usd_per_mtok" not in render_junit(plain)


def test_stored_economics_text_is_escaped_in_html_and_markdown() -> None:
    from evalgate.report.outputs import render_markdown
    from evalgate.report.render import render_html

    doc = _doc(economics={"gpu_hour_usd": 3.6})
    doc["economics"]["gpus_source"] = EVIL_SCRIPT  # a stored verdict.json is untrusted input
    html = render_html(doc)
    assert EVIL_SCRIPT not in html and "&lt;script&gt;document.title" in html
    assert "<script" not in render_markdown(doc)


def test_pipeline_passes_the_configs_economics(tmp_path: Path) -> None:
    """``pipeline.decide_and_render`` takes the gated config's ``policy.economics``: its keys over the top level."""
    from evalgate.commands import pipeline
    from evalgate.compare.pairing import compare_tasks
    from evalgate.evaluate.manifest import Manifest

    path = tmp_path / "t.yaml"
    path.write_text(BASE + "bootstrap_resamples: 1000\neconomics: {gpu_hour_usd: 3.6}\n"
                    "configs: {cand: {economics: {gpu_hour_usd: 7.2}}}\n", encoding="utf-8")
    thr = load_thresholds(path)
    n = 40
    tasks = {"t": task("t", "s", ["ok"] * n, [1.0] * n)}
    m = manifest(side("baseline", "float32"), side("cand", "bfloat16"), ["t"])
    sides = pipeline.Evaluated(tasks={"baseline": tasks, "candidate": tasks},
                               effective={"baseline": {}, "candidate": {}}, gate_name="cand", expect="lossy",
                               manifest=Manifest.model_validate(m), speed=_speed(_level(16, 1000.0, 1250.0, 1.1, 1.4)))
    doc, _ = pipeline.decide_and_render(compare_tasks(tasks, tasks, thr.policy(None)), sides, thr.policy("cand"),
                                        tmp_path / "run")
    # $7.20 (the config's) at 1,000 tok/s = $2.00/M.
    assert doc["economics"]["levels"][0]["baseline"]["usd_per_mtok"] == pytest.approx(2.0)
    assert (tmp_path / "run" / "verdict.json").is_file()


def test_a_stored_verdict_with_costs_rerenders(tmp_path: Path) -> None:
    """``evalgate report RUN_DIR`` reads the block back (typed) and renders the same lines."""
    from evalgate.commands.stored import read_verdict, rerender
    from evalgate.results.store import write_json_atomic

    doc = _doc(economics={"gpu_hour_usd": 3.6, "api_usd_per_mtok": 2.0})
    write_json_atomic(tmp_path / "verdict.json", doc)
    verdict = read_verdict(tmp_path / "verdict.json")
    assert verdict.economics is not None and verdict.to_dict() == doc
    _, paths = rerender(tmp_path, None)
    assert "c=16: $1.00 \u2192 $0.80 per M output tokens" in paths["markdown"].read_text(encoding="utf-8")
