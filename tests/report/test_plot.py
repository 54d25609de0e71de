"""The inline SVG plots (evalgate.report.plot): positions computed from the axis formulas, escaping, missing values."""

from __future__ import annotations

import math
import re

from evalgate.report.plot import (
    LABEL_W,
    RIGHT_W,
    ROW_H,
    TOP,
    TRADE_B,
    TRADE_H,
    TRADE_L,
    TRADE_R,
    TRADE_T,
    WIDTH,
    _ratio_ticks,
    _ticks,
    delta_plot,
    kl_curve,
    sweep_plot,
    tradeoff_plot,
)


def _doc(verdict: str = "BLOCK", **task: object) -> dict:
    t = {"suite": "s", "task": "t<1>", "verdict": "BLOCK", "ci_low": -4.0, "ci_high": 2.0, "delta": -1.0,
         "margin": 3.0, **task}
    return {"verdict": verdict, "tasks": [t]}


def test_forest_plot_places_delta_interval_and_margin_on_the_axis() -> None:
    svg = str(delta_plot(_doc()))
    # Extent: every value of the row and -margin, margin/2 and 0: [-4, 2], 10 % air each side -> [-4.6, 2.6].
    lo, hi = -4.0 - 0.6, 2.0 + 0.6
    x = lambda v: round(LABEL_W + (v - lo) / (hi - lo) * (WIDTH - RIGHT_W - LABEL_W), 1)  # noqa: E731
    mid = TOP + ROW_H / 2
    assert f'<circle cx="{x(-1.0)}" cy="{mid}" r="4.5" fill="#cf222e"/>' in svg and x(-1.0) == 540.0
    assert f'<line x1="{x(-4.0)}" x2="{x(2.0)}" y1="{mid}" y2="{mid}" stroke="#cf222e"' in svg
    assert f'<line x1="{x(-3.0)}" x2="{x(-3.0)}"' in svg  # the dashed -margin line
    assert "t&lt;1&gt;" in svg and "t<1>" not in svg
    # Ticks every 2 points (raw step 7.2 / 6 = 1.2, next of 1/2/5/10 above it), no decimals, real minus signs.
    assert _ticks(lo, hi) == ([-4.0, -2.0, 0.0, 2.0], 0)
    labels = re.findall(r'text-anchor="middle" fill="#57606a">([^<]+)</text>', svg)
    assert labels == ["\u22124", "\u22122", "0", "+2"]


def test_forest_plot_greys_every_task_of_a_no_op_run_and_is_empty_without_tasks() -> None:
    svg = str(delta_plot(_doc("NO-OP")))
    assert 'fill="#cf222e"/>' not in svg and '<circle cx="540.0" cy="41.0" r="4.5" fill="#6e7781"/>' in svg
    assert "NO-OP, not gated (statistics: BLOCK)" in svg
    assert str(delta_plot({"verdict": "PASS", "tasks": []})) == ""


def test_forest_plot_skips_what_is_undefined() -> None:
    svg = str(delta_plot(_doc(ci_low=None, ci_high=None, delta=float("nan"))))
    assert "<circle" not in svg and 'stroke-width="3"' not in svg and "CI [n/a, n/a]" in svg


def test_kl_curve_is_empty_without_decode_evidence() -> None:
    assert str(kl_curve({"suite": "s", "task": "t"})) == ""
    assert str(kl_curve({"suite": "s", "task": "t", "evidence": {"decode": {"kl_by_position": [float("inf")]}}})) == ""


def test_tradeoff_point_sits_at_its_log_ratio_and_delta() -> None:
    svg = str(tradeoff_plot([{"label": "a&b", "ratio": 2.0, "delta": 1.0, "verdict": "PASS"}]))
    # x: log scale over [0, ln 2] with 10 % air; y: [0, 1] with 0.1 air (the span is at least 1 point).
    xlo, xhi = -0.1 * math.log(2), 1.1 * math.log(2)
    x0, x1, y0, y1 = TRADE_L, 640 - TRADE_R, TRADE_H - TRADE_B, TRADE_T
    cx = round(x0 + (math.log(2.0) - xlo) / (xhi - xlo) * (x1 - x0), 1)
    cy = round(y0 - (1.0 + 0.1) / 1.2 * (y0 - y1), 1)
    assert (cx, cy) == (574.2, 48.3)
    assert f'<circle cx="{cx}" cy="{cy}" r="4.5" fill="#1a7f37"/>' in svg
    assert "a&amp;b" in svg and "[n/a, n/a]" in svg  # no ratio interval given


def test_sweep_draws_one_line_per_series_through_its_levels() -> None:
    rows = [{"series": "mtp", "concurrency": 1, "ratio": 1.0, "ci_low": None, "ci_high": None},
            {"series": "mtp", "concurrency": 16, "ratio": 2.0, "ci_low": None, "ci_high": None},
            {"series": "other", "concurrency": 16, "ratio": -1.0}]  # a non-positive ratio is not drawn
    svg = str(sweep_plot(rows))
    (line,) = re.findall(r'<polyline [^>]*points="([^"]+)"', svg)
    y0, y1 = TRADE_H - TRADE_B, TRADE_T
    pad = 0.1 * math.log(2)
    y = lambda v: round(y0 - (math.log(v) + pad) / (math.log(2) + 2 * pad) * (y0 - y1), 1)  # noqa: E731
    assert line == f"{float(TRADE_L)},{y(1.0)} {640.0 - 160},{y(2.0)}"
    assert svg.count("<circle") == 2 and ">other<" not in svg
    assert str(sweep_plot([])) == ""


def test_ratio_ticks_keep_round_ratios_inside_the_range() -> None:
    assert _ratio_ticks(0.85, 1.6) == [0.9, 1.0, 1.1, 1.25, 1.5]
    assert _ratio_ticks(0.05, 20) == [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0]
