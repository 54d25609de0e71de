"""Render a verdict for people: one self-contained HTML page and a terminal table.

Both read only the :class:`evalgate.report.verdict.Verdict` (a mapping read from ``verdict.json`` is validated into one),
so a report can be re-rendered from a stored run. Model outputs are untrusted: the HTML template is rendered with
autoescape on, and the page carries no script at all.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from evalgate.compare.reasoning import reasoning_line
from evalgate.engine.device import describe as describe_device
from evalgate.fmt import count, interval, num, pts, rule_text
from evalgate.report.plot import delta_plot, kl_curve, sweep_plot, tradeoff_plot
from evalgate.report.verdict import Verdict, as_verdict
from evalgate.report.wording import (
    NO_OP_NOTE,
    SPEC_SOURCE_NOTE,
    demo_model_note,
    floor_note,
    goodput_words,
    items_needed_short,
    latency_headline,
    model_words,
    replay_line,
    shown_verdict,
    slo_rows,
    speed_mde_note,
)
from evalgate.speed.economics import economics_lines, pct, usd, utilisation
from evalgate.speed.precision import precision_note
from evalgate.speed.speedup import capacity_note, headline, repeats_note, repeats_words, window_words

Doc = Verdict | Mapping[str, Any]



_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")


def _highlight(a: str, b: str) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
    """Split two outputs into (text, differs) spans by a diff over words, spaces and punctuation (difflib).

    Token-level rather than character-level, so a changed number or word is marked whole instead of as
    scattered characters that happen to match.
    """
    ta, tb = _TOKEN.findall(a), _TOKEN.findall(b)
    sm = difflib.SequenceMatcher(a=ta, b=tb, autojunk=False)
    left: list[tuple[str, bool]] = []
    right: list[tuple[str, bool]] = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if i2 > i1:
            left.append(("".join(ta[i1:i2]), op != "equal"))
        if j2 > j1:
            right.append(("".join(tb[j1:j2]), op != "equal"))
    return left, right


def _env() -> Environment:
    env = Environment(loader=PackageLoader("evalgate.report", "templates"), autoescape=select_autoescape(default=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["pts"] = pts
    env.filters["num"] = num
    env.filters["rule_text"] = rule_text
    env.filters["count"] = count
    env.globals.update(
        highlight=_highlight, delta_plot=delta_plot, kl_curve=kl_curve, tradeoff_plot=tradeoff_plot,
        sweep_plot=sweep_plot, tradeoff_points=tradeoff_points, sweep_rows=sweep_rows, review_items=review_items,
        items_needed_short=items_needed_short, reasoning_line=reasoning_line, floor_note=floor_note, shown_verdict=shown_verdict,
        NO_OP_NOTE=NO_OP_NOTE, spec_source_note=SPEC_SOURCE_NOTE, speed_mde_note=speed_mde_note,
        repeats_note=repeats_note, repeats_words=repeats_words, precision_note=precision_note,
        window_words=window_words, capacity_note=capacity_note,
        describe_device=describe_device, slo_rows=slo_rows, goodput_words=goodput_words,
        usd=usd, pct=pct, utilisation=utilisation)
    return env


def tradeoff_points(doc: Doc) -> list[dict[str, Any]]:
    """One trade-off point per task: the run's headline speed-up (first concurrency level) and the task's Δ."""
    doc = as_verdict(doc)
    sp = doc.speed
    ratio = (sp.ratio, sp.ci_low, sp.ci_high) if sp is not None else (None, None, None)
    return [{"label": t.task, "ratio": ratio[0], "ratio_low": ratio[1], "ratio_high": ratio[2], "delta": t.delta,
             "delta_low": t.ci_low, "delta_high": t.ci_high, "verdict": t.verdict} for t in doc.tasks]


def sweep_rows(doc: Doc) -> list[dict[str, Any]]:
    """The speed-up per concurrency level of one run, as ``plot.sweep_plot`` rows."""
    doc = as_verdict(doc)
    name = doc.config_name("candidate")
    levels = doc.speed.levels if doc.speed is not None else []
    return [{"series": name, "concurrency": r.concurrency, "ratio": r.ratio, "ci_low": r.ci_low, "ci_high": r.ci_high}
            for r in levels]


def review_items(doc: Doc) -> list[dict[str, Any]]:
    """Every changed item across tasks in review order: regressions (largest drop first), then improvements,
    then outputs that changed without a score change. Each item (``verdict.Flip`` fields) gains ``suite`` and
    ``task``."""
    doc = as_verdict(doc)
    rank = {"regressed": 0, "improved": 1, "changed": 2}
    items = [{**f.model_dump(exclude_unset=True), "suite": t.suite, "task": t.task} for t in doc.tasks
             for f in [*t.flipped, *t.changed_outputs]]
    return sorted(items, key=lambda f: (rank.get(f["kind"], 3), -abs(f["candidate_score"] - f["baseline_score"]),
                                        f["task"], f["item_id"]))


def render_html(doc: Doc) -> str:
    """One self-contained HTML page (inline CSS, no scripts, no external resources) for the verdict ``doc``."""
    return _env().get_template("report.html.j2").render(doc=as_verdict(doc))


def render_terminal(doc: Doc) -> str:
    """A compact plain-text table of the verdict ``doc`` for the terminal."""
    doc = as_verdict(doc)
    head = (f"{'suite/task':34} {'n':>5} {'base':>6} {'cand':>6} {'delta':>6} {'CI':>15} {'MDE':>6} {'margin':>6}"
            "  verdict (rule)")
    cand, base = doc.config_name("candidate"), doc.config_name("baseline")
    lines = [f"{cand} vs {base}, {model_words(doc)}", head, "-" * len(head)]
    for t in doc.tasks:
        ci = interval(t.ci_low, t.ci_high)
        mde = pts(t.mde, signed=False)
        rule = f" ({t.rule.split(':')[0]})" if t.rule else ""
        shown = f"{t.verdict}{rule}"
        if shown_verdict(doc, t)[0] != t.verdict:
            shown = f"NO-OP, not gated (statistics: {t.verdict}{rule.replace(' (', ', ').rstrip(')')})"
        lines.append(f"{t.suite + '/' + t.task:34} {t.n:>5} {pts(t.baseline, signed=False):>6} "
                     f"{pts(t.candidate, signed=False):>6} {pts(t.delta):>6} {ci:>15} {mde:>6} "
                     f"{pts(t.margin, signed=False):>6}  {shown}")
        if t.reasoning is not None:
            lines.append(f"  {reasoning_line(t.reasoning)}")
    if doc.speed is not None:
        lines.extend(x for x in (headline(doc.speed), latency_headline(doc.speed)) if x)
    if doc.economics is not None:
        cost = economics_lines(doc.economics.model_dump())
        lines += cost[:1] + [f"  {x}" for x in cost[1:]]
    if doc.replay is not None:
        lines.append(replay_line(doc.replay))
    lines.append("")
    lines.append(f"VERDICT: {doc.verdict}")
    lines.extend(f"  - {r}" for r in doc.reasons)
    note = demo_model_note(doc)
    if note:
        lines.append(f"note: {note}")
    return "\n".join(lines)
