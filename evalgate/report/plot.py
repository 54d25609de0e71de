"""An inline SVG forest plot of each task's Δ with its confidence interval against its margin.

No scripts, no external resources: the SVG is embedded in ``report.html`` and reads offline. One row per
task: the shaded red zone is Δ < −margin (where a lower bound BLOCKs), the bar is the two-sided interval,
the tick at its left end is the one-sided lower bound the gate uses, the dot is Δ. Every string is XML-escaped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from markupsafe import Markup

from evalgate.fmt import finite as _finite
from evalgate.fmt import pts
from evalgate.fmt import ratio as _r
from evalgate.report.verdict import TaskVerdict, Verdict, as_task, as_verdict

WIDTH, LABEL_W, RIGHT_W, ROW_H, TOP, BOTTOM = 1160, 250, 330, 30, 26, 30
_COLOUR = {"PASS": "#1a7f37", "BLOCK": "#cf222e", "INCONCLUSIVE": "#9a6700"}


def _extent(tasks: list[TaskVerdict]) -> tuple[float, float]:
    """The x range in points: every interval and every −margin fits, zero is inside, with 10 % air."""
    values = [0.0]
    for t in tasks:
        values += [v for v in (_finite(x) for x in (t.ci_low, t.ci_high, t.delta)) if v is not None]
        if (m := _finite(t.margin)) is not None:
            values += [-m, m / 2]
    lo, hi = min(values), max(values)
    pad = max(hi - lo, 1.0) * 0.1
    return lo - pad, hi + pad


def _ticks(lo: float, hi: float) -> tuple[list[float], int]:
    """Round tick positions (1, 2 or 5 times a power of ten) across [lo, hi], about six, and their decimals."""
    raw = (hi - lo) / 6
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 5, 10) if s * mag >= raw)
    first = math.ceil(lo / step) * step
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)], decimals


def _delta_row(t: TaskVerdict, y: float, x: Any, gated: bool) -> list[str]:
    """SVG elements of one task's row of the forest plot: red zone below −margin, interval, lower-bound tick, Δ."""
    x0, x1 = LABEL_W, WIDTH - RIGHT_W
    mid = y + ROW_H / 2
    parts = []
    margin = _finite(t.margin)
    if margin is not None:
        parts.append(f'<rect x="{x0}" y="{y + 3}" width="{max(x(-margin) - x0, 0)}" height="{ROW_H - 6}" '
                     f'fill="#ffebe9"><title>{escape(t.task)}: \u2212margin = {pts(-margin)} pts</title></rect>')
        parts.append(f'<line x1="{x(-margin)}" x2="{x(-margin)}" y1="{y + 3}" y2="{y + ROW_H - 3}" '
                     f'stroke="#cf222e" stroke-dasharray="3 2"/>')
    # Under NO-OP no task is gated: grey, and the statistical outcome is named as such.
    colour = _COLOUR.get(t.verdict, "#6e7781") if gated else "#6e7781"
    shown = t.verdict if gated else f"NO-OP, not gated (statistics: {t.verdict})"
    lo_ci, hi_ci, d = _finite(t.ci_low), _finite(t.ci_high), _finite(t.delta)
    tip = escape(f"{t.suite}/{t.task}: {shown}: \u0394 {pts(d)} pts, CI [{pts(lo_ci)}, "
                 f"{pts(hi_ci)}], margin {pts(margin, signed=False)} pts")
    parts.append(f"<g><title>{tip}</title>")
    if lo_ci is not None and hi_ci is not None:
        parts.append(f'<line x1="{x(lo_ci)}" x2="{x(hi_ci)}" y1="{mid}" y2="{mid}" stroke="{colour}" '
                     f'stroke-width="3"/>')
        parts.append(f'<line x1="{x(lo_ci)}" x2="{x(lo_ci)}" y1="{mid - 7}" y2="{mid + 7}" stroke="{colour}" '
                     f'stroke-width="2"/>')
    if d is not None:
        parts.append(f'<circle cx="{x(d)}" cy="{mid}" r="4.5" fill="{colour}"/>')
    parts.append("</g>")
    parts.append(f'<text x="{x0 - 8}" y="{mid + 4}" text-anchor="end">{escape(f"{t.suite} / {t.task}")}</text>')
    right = escape(f"{t.verdict if gated else 'not gated'}  \u0394 {pts(d)} [{pts(lo_ci)}, {pts(hi_ci)}]  margin "
                   f"{pts(margin, signed=False)}")
    parts.append(f'<text x="{x1 + 8}" y="{mid + 4}" fill={quoteattr(colour)}>{right}</text>')
    return parts


def delta_plot(doc: Verdict | Mapping[str, Any]) -> Markup:
    """The forest plot (SVG, as safe markup) of the verdict's tasks; an empty string when there are none."""
    doc = as_verdict(doc)
    tasks = doc.tasks
    if not tasks:
        return Markup("")
    lo, hi = _extent(tasks)
    x0, x1 = LABEL_W, WIDTH - RIGHT_W
    height = TOP + ROW_H * len(tasks) + BOTTOM

    def x(v: float) -> float:
        return round(x0 + (min(max(v, lo), hi) - lo) / (hi - lo) * (x1 - x0), 1)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" width="{WIDTH}" height="{height}" '
             f'viewBox="0 0 {WIDTH} {height}" font-family="system-ui, sans-serif" font-size="12">',
             "<title>\u0394 (candidate \u2212 baseline, points) with confidence intervals against each task's "
             "margin</title>",
             f'<text x="{x0}" y="14" fill="#57606a">\u0394 candidate \u2212 baseline (points); red zone: below '
             f"\u2212margin; bar: CI; tick: one-sided lower bound</text>"]
    for i, t in enumerate(tasks):
        parts += _delta_row(t, TOP + i * ROW_H, x, doc.verdict != "NO-OP")
    axis_y = TOP + ROW_H * len(tasks)
    parts.append(f'<line x1="{x0}" x2="{x1}" y1="{axis_y}" y2="{axis_y}" stroke="#8c959f"/>')
    parts.append(f'<line x1="{x(0)}" x2="{x(0)}" y1="{TOP}" y2="{axis_y}" stroke="#57606a"/>')
    ticks, decimals = _ticks(lo, hi)
    for v in ticks:
        label = "0" if v == 0 else f"{v:+.{decimals}f}".replace("-", "\u2212")
        parts.append(f'<line x1="{x(v)}" x2="{x(v)}" y1="{axis_y}" y2="{axis_y + 4}" stroke="#8c959f"/>'
                     f'<text x="{x(v)}" y="{axis_y + 16}" text-anchor="middle" fill="#57606a">{label}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


CURVE_W, CURVE_H, CURVE_PAD_L, CURVE_PAD_B = 560, 150, 64, 28
_KL_FLOOR = 1e-8  # nats: drawn at the bottom of the log axis (identical distributions give 0)


def kl_curve(task: TaskVerdict | Mapping[str, Any]) -> Markup:
    """An inline SVG of one task's decode-time KL against output position (state errors grow with length).

    Reads ``task.evidence.decode`` (``verdict.DecodeSummary``): ``kl_by_position`` (mean KL in nats over the items compared at each
    token position) and ``items_by_position`` (how many items that mean covers: items leave the curve when their
    outputs diverge or end). The y axis is log10 KL from 1e-8 (zero is drawn there) to the largest value.
    Returns an empty string when the task has no decode evidence.
    """
    task = as_task(task)
    decode = task.evidence.decode if task.evidence is not None else None
    if decode is None:
        return Markup("")
    values = [v for v in decode.kl_by_position if _finite(v) is not None]
    if not values:
        return Markup("")
    counts = decode.items_by_position
    top = max(0.0, math.ceil(math.log10(max(max(values), _KL_FLOOR))))
    bottom = math.log10(_KL_FLOOR)
    x0, x1, y0, y1 = CURVE_PAD_L, CURVE_W - 10, CURVE_H - CURVE_PAD_B, 18
    n = len(values)

    def x(j: float) -> float:
        return round(x0 + j / max(n - 1, 1) * (x1 - x0), 1)

    def y(v: float) -> float:
        lv = math.log10(max(v, _KL_FLOOR))
        return round(y0 - (lv - bottom) / (top - bottom) * (y0 - y1), 1)

    label = escape(f"{task.suite} / {task.task}")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" width="{CURVE_W}" height="{CURVE_H}" '
             f'viewBox="0 0 {CURVE_W} {CURVE_H}" font-family="system-ui, sans-serif" font-size="11">',
             f"<title>{label}: decode-time KL(baseline \u2016 candidate) by output token position</title>",
             f'<text x="{x0}" y="12" fill="#57606a">{label}: mean KL (nats, log scale) by output token</text>',
             f'<line x1="{x0}" x2="{x1}" y1="{y0}" y2="{y0}" stroke="#8c959f"/>',
             f'<line x1="{x0}" x2="{x0}" y1="{y1}" y2="{y0}" stroke="#8c959f"/>']
    for e in range(int(bottom), int(top) + 1, 2):
        parts.append(f'<text x="{x0 - 4}" y="{y(10.0 ** e) + 4}" text-anchor="end" fill="#57606a">1e{e}</text>'
                     f'<line x1="{x0}" x2="{x1}" y1="{y(10.0 ** e)}" y2="{y(10.0 ** e)}" stroke="#eaeef2"/>')
    points = " ".join(f"{x(j)},{y(v)}" for j, v in enumerate(values))
    parts.append(f'<polyline fill="none" stroke="#0969da" stroke-width="1.5" points="{points}"/>')
    for j, v in enumerate(values):
        covered = counts[j] if j < len(counts) else "?"
        parts.append(f'<circle cx="{x(j)}" cy="{y(v)}" r="1.6" fill="#0969da"><title>token {j}: KL {v:.3g} nats '
                     f'over {covered} item(s)</title></circle>')
    for j in sorted({0, n // 2, n - 1}):
        parts.append(f'<text x="{x(j)}" y="{y0 + 14}" text-anchor="middle" fill="#57606a">{j}</text>')
    parts.append(f'<text x="{x1}" y="{y0 + 26}" text-anchor="end" fill="#57606a">output token position</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


TRADE_W, TRADE_H, TRADE_L, TRADE_B, TRADE_T, TRADE_R = 640, 360, 70, 44, 24, 20


def tradeoff_plot(points: list[dict[str, Any]], *, title: str = "speed-up against quality") -> Markup:
    """An inline SVG scatter of speed-up (x, log scale, with its interval) against Δ (y, points, with its interval).

    ``points``: ``{"label", "ratio", "ratio_low", "ratio_high", "delta", "delta_low", "delta_high", "verdict"}``
    (one per task of a run, or per switch and task of an ablation); None marks a missing value (that bar is not
    drawn; a point without ratio or Δ is skipped). The dashed vertical line is ×1 (no speed-up), the horizontal
    one Δ = 0. Empty markup when nothing can be drawn. Every label is XML-escaped.
    """
    pts_ = [p for p in points if _finite(p.get("ratio")) and _finite(p.get("delta")) is not None and p["ratio"] > 0]
    if not pts_:
        return Markup("")
    xs = [math.log(v) for p in pts_ for v in (p["ratio"], p.get("ratio_low"), p.get("ratio_high"))
          if _finite(v) is not None and v > 0] + [0.0]
    ys = [v for p in pts_ for v in (p["delta"], p.get("delta_low"), p.get("delta_high")) if _finite(v) is not None] + [0.0]
    xlo, xhi = min(xs), max(xs)
    ylo, yhi = min(ys), max(ys)
    xpad, ypad = max(xhi - xlo, 0.1) * 0.1, max(yhi - ylo, 1.0) * 0.1
    xlo, xhi, ylo, yhi = xlo - xpad, xhi + xpad, ylo - ypad, yhi + ypad
    x0, x1, y0, y1 = TRADE_L, TRADE_W - TRADE_R, TRADE_H - TRADE_B, TRADE_T

    def x(v: float) -> float:
        return round(x0 + (math.log(v) - xlo) / (xhi - xlo) * (x1 - x0), 1)

    def y(v: float) -> float:
        return round(y0 - (v - ylo) / (yhi - ylo) * (y0 - y1), 1)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" width="{TRADE_W}" height="{TRADE_H}" '
             f'viewBox="0 0 {TRADE_W} {TRADE_H}" font-family="system-ui, sans-serif" font-size="11">',
             f"<title>{escape(title)}: speed-up (candidate / baseline throughput) against \u0394 (points)</title>",
             f'<text x="{x0}" y="14" fill="#57606a">{escape(title)}: right = faster, up = better; bars: intervals</text>',
             f'<line x1="{x0}" x2="{x1}" y1="{y0}" y2="{y0}" stroke="#8c959f"/>',
             f'<line x1="{x0}" x2="{x0}" y1="{y1}" y2="{y0}" stroke="#8c959f"/>',
             f'<line x1="{x(1.0)}" x2="{x(1.0)}" y1="{y1}" y2="{y0}" stroke="#57606a" stroke-dasharray="4 3"/>',
             f'<line x1="{x0}" x2="{x1}" y1="{y(0.0)}" y2="{y(0.0)}" stroke="#57606a" stroke-dasharray="4 3"/>']
    for v in _ratio_ticks(math.exp(xlo), math.exp(xhi)):
        parts.append(f'<text x="{x(v)}" y="{y0 + 14}" text-anchor="middle" fill="#57606a">\u00d7{v:g}</text>')
    ticks, decimals = _ticks(ylo, yhi)
    for v in ticks:
        label = "0" if v == 0 else f"{v:+.{decimals}f}".replace("-", "\u2212")
        parts.append(f'<text x="{x0 - 4}" y="{y(v) + 4}" text-anchor="end" fill="#57606a">{label}</text>')
    parts.append(f'<text x="{x1}" y="{y0 + 32}" text-anchor="end" fill="#57606a">speed-up (log scale)</text>')
    parts.append(f'<text x="12" y="{y1 + 10}" fill="#57606a">\u0394 pts</text>')
    for p in pts_:
        colour = _COLOUR.get(p.get("verdict"), "#6e7781")
        cx, cy = x(p["ratio"]), y(p["delta"])
        tip = escape(f"{p['label']}: speed-up \u00d7{p['ratio']:.2f} [{_r(p.get('ratio_low'))}, {_r(p.get('ratio_high'))}], "
                     f"\u0394 {pts(p['delta'])} [{pts(_finite(p.get('delta_low')))}, {pts(_finite(p.get('delta_high')))}] "
                     f"pts, {p.get('verdict', '')}")
        parts.append(f"<g><title>{tip}</title>")
        rl, rh = _finite(p.get("ratio_low")), _finite(p.get("ratio_high"))
        if rl is not None and rh is not None and rl > 0:
            parts.append(f'<line x1="{x(max(rl, math.exp(xlo)))}" x2="{x(min(rh, math.exp(xhi)))}" y1="{cy}" y2="{cy}" '
                         f'stroke="{colour}" stroke-width="2"/>')
        dl, dh = _finite(p.get("delta_low")), _finite(p.get("delta_high"))
        if dl is not None and dh is not None:
            parts.append(f'<line x1="{cx}" x2="{cx}" y1="{y(dl)}" y2="{y(dh)}" stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<circle cx="{cx}" cy="{cy}" r="4.5" fill="{colour}"/>')
        parts.append(f'<text x="{cx + 7}" y="{cy - 6}" fill="{colour}">{escape(p["label"])}</text></g>')
    parts.append("</svg>")
    return Markup("".join(parts))


def sweep_plot(rows: list[dict[str, Any]], *, title: str = "speed-up by concurrency") -> Markup:
    """An inline SVG of speed-up (y, log scale, with its interval) against concurrency (x, log scale), one line per
    series. ``rows``: ``{"series", "concurrency", "ratio", "ci_low", "ci_high"}``. Empty markup with < 1 row."""
    rows = [r for r in rows if _finite(r.get("ratio")) and r["ratio"] > 0 and r.get("concurrency")]
    if not rows:
        return Markup("")
    cs = sorted({int(r["concurrency"]) for r in rows})
    ys = [math.log(v) for r in rows for v in (r["ratio"], r.get("ci_low"), r.get("ci_high"))
          if _finite(v) is not None and v > 0] + [0.0]
    ylo, yhi = min(ys), max(ys)
    pad = max(yhi - ylo, 0.1) * 0.1
    ylo, yhi = ylo - pad, yhi + pad
    x0, x1, y0, y1 = TRADE_L, TRADE_W - 160, TRADE_H - TRADE_B, TRADE_T
    span = max(math.log(cs[-1]) - math.log(cs[0]), 1e-9)

    def x(c: float) -> float:
        return round(x0 + (math.log(c) - math.log(cs[0])) / span * (x1 - x0), 1) if len(cs) > 1 else (x0 + x1) / 2

    def y(v: float) -> float:
        return round(y0 - (math.log(v) - ylo) / (yhi - ylo) * (y0 - y1), 1)

    palette = ["#0969da", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#57606a"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" width="{TRADE_W}" height="{TRADE_H}" '
             f'viewBox="0 0 {TRADE_W} {TRADE_H}" font-family="system-ui, sans-serif" font-size="11">',
             f"<title>{escape(title)}</title>",
             f'<text x="{x0}" y="14" fill="#57606a">{escape(title)} (both axes log scale; bars: intervals)</text>',
             f'<line x1="{x0}" x2="{x1}" y1="{y0}" y2="{y0}" stroke="#8c959f"/>',
             f'<line x1="{x0}" x2="{x1}" y1="{y(1.0)}" y2="{y(1.0)}" stroke="#57606a" stroke-dasharray="4 3"/>']
    for c in cs:
        parts.append(f'<text x="{x(c)}" y="{y0 + 14}" text-anchor="middle" fill="#57606a">{c}</text>')
    parts.append(f'<text x="{x1}" y="{y0 + 30}" text-anchor="end" fill="#57606a">concurrency</text>')
    for v in _ratio_ticks(math.exp(ylo), math.exp(yhi)):
        parts.append(f'<text x="{x0 - 4}" y="{y(v) + 4}" text-anchor="end" fill="#57606a">\u00d7{v:g}</text>')
    series = list(dict.fromkeys(str(r.get("series", "")) for r in rows))
    for k, name in enumerate(series):
        colour = palette[k % len(palette)]
        mine = sorted((r for r in rows if str(r.get("series", "")) == name), key=lambda r: r["concurrency"])
        line = " ".join(f"{x(r['concurrency'])},{y(r['ratio'])}" for r in mine)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{line}"/>')
        for r in mine:
            lo, hi = _finite(r.get("ci_low")), _finite(r.get("ci_high"))
            tip = escape(f"{name} at concurrency {r['concurrency']}: \u00d7{r['ratio']:.2f} [{_r(lo)}, {_r(hi)}]")
            parts.append(f"<g><title>{tip}</title>")
            if lo is not None and hi is not None and lo > 0:
                parts.append(f'<line x1="{x(r["concurrency"])}" x2="{x(r["concurrency"])}" y1="{y(max(lo, math.exp(ylo)))}" '
                             f'y2="{y(min(hi, math.exp(yhi)))}" stroke="{colour}" stroke-width="2"/>')
            parts.append(f'<circle cx="{x(r["concurrency"])}" cy="{y(r["ratio"])}" r="3.5" fill="{colour}"/></g>')
        parts.append(f'<text x="{x1 + 10}" y="{y1 + 14 * k + 10}" fill="{colour}">{escape(name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _ratio_ticks(lo: float, hi: float) -> list[float]:
    """Round ratios between lo and hi for a log axis (always including 1 when inside)."""
    cands = [0.1, 0.2, 0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 10.0]
    inside = [v for v in cands if lo <= v <= hi]
    if len(inside) > 7:
        inside = [v for v in inside if v in (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0)]
    return inside
