"""Machine-readable outputs of a gate run, all rendered from the verdict document (``verdict.json``).

``write_outputs`` writes, next to ``verdict.json``:

* ``report.html``        the self-contained diff report (``report.render_html``);
* ``verdict.junit.xml``  JUnit XML: one ``<testsuite>`` per suite, one ``<testcase>`` per task; a BLOCKed task
  is a ``<failure>`` whose message carries Δ, its interval, the lower bound and the margin; under a NO-OP
  verdict every task is ``<skipped>`` (nothing was gated; its statistics are in the message, for information);
* ``summary.md``         a Markdown summary for CI step summaries and PR comments.

``write_error_outputs`` writes a JUnit file with one ``<error>`` and a Markdown summary when a run fails
before it has a verdict, so CI always has something to show. Model output never enters the JUnit file or
the Markdown (only item ids do); the HTML report escapes it.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalgate.compare.reasoning import reasoning_line
from evalgate.fmt import MINUS, pts
from evalgate.report.render import render_html
from evalgate.report.verdict import SpeedBlock, TaskVerdict, Verdict, as_task, as_verdict
from evalgate.report.wording import (
    FLOOR_NOTE,
    NO_OP_NOTE,
    SPEC_SOURCE_NOTE,
    demo_model_note,
    floor_note,
    items_needed_short,
    latency_headline,
    latency_properties,
    model_words,
    replay_line,
    shown_verdict,
    spec_decode_line,
    speed_mde_note,
)
from evalgate.speed.economics import economics_lines, economics_properties
from evalgate.speed.precision import precision_note
from evalgate.speed.speedup import capacity_note, headline, profile_words, repeats_note, repeats_words

__all__ = ["FLOOR_NOTE", "HTML_NAME", "JUNIT_NAME", "MARKDOWN_NAME", "NO_OP_NOTE", "SPEC_SOURCE_NOTE", "floor_note",
           "items_needed_short", "pts", "render_error_junit", "render_error_markdown", "render_junit",
           "render_markdown", "shown_verdict", "spec_decode_line", "task_evidence", "write_error_outputs",
           "write_outputs"]

HTML_NAME = "report.html"
JUNIT_NAME = "verdict.junit.xml"
MARKDOWN_NAME = "summary.md"
_ICON = {"PASS": "\u2705", "BLOCK": "\u274c", "NO-OP": "\u26aa", "INCONCLUSIVE": "\u26a0\ufe0f"}
_MAX_ITEM_IDS = 20
Doc = Verdict | Mapping[str, Any]


def task_evidence(t: TaskVerdict | Mapping[str, Any]) -> str:
    """One line of evidence for a task: Δ, its interval, the lower bound against the margin, and flips."""
    t = as_task(t)
    level = f"{100 * (0.9 if t.ci_level is None else t.ci_level):.0f}%"
    lb = t.lower_bound if "lower_bound" in t.model_fields_set else t.ci_low
    # The relation as it is, not as the verdict suggests (an INCONCLUSIVE bound can lie below -margin).
    rel = "<" if lb is not None and lb < -t.margin else "\u2265"
    mde = f", MDE {pts(t.mde, signed=False)} pts" if t.mde is not None else ""
    return (f"\u0394 {pts(t.delta)} pts, {level} CI [{pts(t.ci_low)}, {pts(t.ci_high)}], "
            f"lower bound {pts(lb)} {rel} {MINUS}margin {MINUS}{pts(t.margin, signed=False)} pts{mde} "
            f"(n={t.n}; {t.n_regressed} regressed, {t.n_improved} improved)")


def _names(doc: Verdict) -> tuple[str, str]:
    """``(candidate name, baseline name)`` from the manifest."""
    return doc.config_name("candidate"), doc.config_name("baseline")


def _junit_case(ts: ET.Element, doc: Verdict, t: TaskVerdict, cand: str, counts: dict[str, int]) -> None:
    """One ``<testcase>`` for task ``t``: failure when BLOCKed, skipped when INCONCLUSIVE or under NO-OP."""
    case = ET.SubElement(ts, "testcase", classname=f"evalgate.{cand}.{t.suite}", name=t.task, time="0")
    evidence = task_evidence(t)
    counts["tests"] += 1
    if doc.verdict == "NO-OP":
        ET.SubElement(case, "skipped", message=f"NO-OP: {'; '.join(doc.reasons)}; not gated, statistics "
                                               f"shown for information: {t.verdict}: {evidence}")
        counts["skipped"] += 1
    elif t.verdict == "BLOCK":
        fail = ET.SubElement(case, "failure", type="BLOCK", message=f"BLOCK: {evidence}")
        fail.text = _failure_text(t)
        counts["failures"] += 1
    elif t.verdict != "PASS":
        ET.SubElement(case, "skipped", message=f"{t.verdict}: {evidence}")
        counts["skipped"] += 1
    label, _ = shown_verdict(doc, t)
    status = t.verdict if label == t.verdict else f"{label} (not gated; statistics alone: {t.verdict})"
    ET.SubElement(case, "system-out").text = f"{status}: {t.reason or evidence}"


def render_junit(doc: Doc) -> str:
    """JUnit XML for the verdict: a ``<testsuite>`` per suite, a ``<testcase>`` per task (``xml.etree``)."""
    doc = as_verdict(doc)
    cand, base = _names(doc)
    timings = doc.manifest.timings
    root = ET.Element("testsuites", name=f"evalgate {cand} vs {base}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    by_suite: dict[str, list[TaskVerdict]] = {}
    for t in doc.tasks:
        by_suite.setdefault(t.suite, []).append(t)
    for suite, tasks in by_suite.items():
        secs = sum(float(timings.get(f"{role}:suite:{suite}", 0.0)) for role in ("baseline", "candidate"))
        ts = ET.SubElement(root, "testsuite", name=f"evalgate.{suite}", time=f"{secs:.3f}")
        props = ET.SubElement(ts, "properties")
        for k, v in (("verdict", doc.verdict), ("baseline", base), ("candidate", cand),
                     ("model", doc.manifest.model), *speed_properties(doc.speed),
                     *economics_properties(None if doc.economics is None else doc.economics.model_dump())):
            ET.SubElement(props, "property", name=k, value=str(v))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for t in tasks:
            _junit_case(ts, doc, t, cand, counts)
        for k, v in counts.items():
            ts.set(k, str(v))
            totals[k] += v
    if doc.speed is not None:
        _speed_junit(root, doc, totals, cand)
    if doc.replay is not None:
        _replay_junit(root, doc, totals, cand)
    for k, v in totals.items():
        root.set(k, str(v))
    return _xml(root)


def speed_properties(speed: SpeedBlock | None) -> list[tuple[str, Any]]:
    """JUnit ``<property>`` pairs of the speed block (none when speed was not measured)."""
    if speed is None:
        return []
    if not speed.measured:
        return [("speed", f"failed: {speed.error}")]
    p = speed.profile
    out: list[tuple[str, Any]] = [("speed_profile", f"{profile_words(p)}, "
                                   f"concurrency {','.join(map(str, p.concurrency))}, {repeats_words(p)}, "
                                   f"{p.mode}")]
    for row in speed.levels:
        c = row.concurrency
        out += [(f"speedup_c{c}", f"{row.ratio:.4f}"), (f"speedup_c{c}_ci", f"[{row.ci_low}, {row.ci_high}]"),
                (f"speed_c{c}", row.verdict), (f"output_tok_s_c{c}_baseline", f"{row.baseline.median:.1f}"),
                (f"output_tok_s_c{c}_candidate", f"{row.candidate.median:.1f}")]
        if row.mde_ratio is not None:
            out.append((f"speedup_c{c}_mde", f"{row.mde_ratio:.4f}"))
        if row.repeats_needed is not None:
            out.append((f"speed_c{c}_repeats_needed", row.repeats_needed))
        if row.precision is not None:
            out.append((f"speed_c{c}_precision", precision_note(row.precision)))
        if capacity_note(row):
            out.append((f"speed_c{c}_capacity", capacity_note(row)))
    out += latency_properties(speed)
    return out


def _speed_junit(root: ET.Element, doc: Verdict, totals: dict[str, int], cand: str) -> None:
    """A ``evalgate.speed.speedup`` test suite with one case: a failure when a speed threshold or a latency objective
    BLOCKed (reasons ``speed: ...`` and ``latency: ...``, as ``gate.overrule`` files them)."""
    speed = doc.speed
    ts = ET.SubElement(root, "testsuite", name="evalgate.speed.speedup", tests="1", errors="0", skipped="0", time="0")
    props = ET.SubElement(ts, "properties")
    cost = None if doc.economics is None else doc.economics.model_dump()
    for k, v in [*speed_properties(speed), *economics_properties(cost)]:
        ET.SubElement(props, "property", name=k, value=str(v))
    case = ET.SubElement(ts, "testcase", classname=f"evalgate.{cand}.speed", name="throughput", time="0")
    line = "\n".join(x for x in (headline(speed), latency_headline(speed), *economics_lines(cost)) if x)
    missed = [r for r in doc.reasons if r.startswith(("speed: ", "latency: "))]
    failed = not speed.measured
    if failed:
        ET.SubElement(case, "error", type="speed", message=line).text = line
    elif missed:
        ET.SubElement(case, "failure", type="BLOCK", message="; ".join(missed)).text = "\n".join(missed)
    ET.SubElement(case, "system-out").text = line
    ts.set("failures", "1" if missed and not failed else "0")
    ts.set("errors", "1" if failed else "0")
    totals["tests"] += 1
    totals["failures"] += int(bool(missed) and not failed)
    totals["errors"] += int(failed)


def _replay_junit(root: ET.Element, doc: Verdict, totals: dict[str, int], cand: str) -> None:
    """A ``evalgate.replay`` test suite with one case: a failure when the replay gate BLOCKed or was INCONCLUSIVE
    (never a pass), with its rules' reasons."""
    rp = doc.replay
    assert rp is not None
    ts = ET.SubElement(root, "testsuite", name="evalgate.replay", tests="1", errors="0", skipped="0", time="0")
    case = ET.SubElement(ts, "testcase", classname=f"evalgate.{cand}.replay", name="recorded requests",
                         time=f"{float(doc.manifest.timings.get('replay', 0.0)):.3f}")
    line = replay_line(rp)
    failed = rp.verdict != "PASS"
    if failed:
        text = "\n".join([line, *(f"{r.verdict}: {r.reason}" for r in rp.rules)])
        ET.SubElement(case, "failure", type=rp.verdict, message=line).text = text
    else:
        ET.SubElement(case, "system-out").text = line
    ts.set("failures", str(int(failed)))
    totals["tests"] += 1
    totals["failures"] += int(failed)


def _failure_text(t: TaskVerdict) -> str:
    lines = [t.reason, f"metric: {t.metric or None}, baseline {pts(t.baseline, signed=False)}, "
             f"candidate {pts(t.candidate, signed=False)}, margin {pts(t.margin, signed=False)} pts "
             f"({t.margin_source})"]
    reg = [f.item_id for f in t.flipped if f.kind == "regressed"]
    if reg:
        more = f" (+{len(reg) - _MAX_ITEM_IDS} more)" if len(reg) > _MAX_ITEM_IDS else ""
        lines.append("regressed items: " + ", ".join(map(str, reg[:_MAX_ITEM_IDS])) + more)
    return "\n".join(lines)


def render_error_junit(message: str, exit_code: int, name: str = "run") -> str:
    """JUnit XML for a run that failed before a verdict: one test case with an ``<error>``."""
    root = ET.Element("testsuites", name=f"evalgate {name}", tests="1", failures="0", errors="1", skipped="0")
    ts = ET.SubElement(root, "testsuite", name="evalgate", tests="1", failures="0", errors="1", skipped="0",
                       time="0")
    case = ET.SubElement(ts, "testcase", classname=f"evalgate.{name}", name="run", time="0")
    ET.SubElement(case, "error", type=f"exit {exit_code}", message=message).text = message
    return _xml(root)


def _xml(root: ET.Element) -> str:
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _md(text: Any) -> str:
    """Escape text for a Markdown table cell (HTML-significant characters, pipes, backticks, newlines)."""
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return s.replace("|", "\\|").replace("`", "\\`").replace("\n", " ")


def _md_task_row(doc: Verdict, t: TaskVerdict) -> str:
    """One row of the Markdown per-task table."""
    ci = f"{100 * (0.9 if t.ci_level is None else t.ci_level):.0f}% [{pts(t.ci_low)}, {pts(t.ci_high)}]"
    mde = pts(t.mde, signed=False)
    need = items_needed_short(t) if doc.verdict != "NO-OP" else None
    mde += f"; {need}" if need else ""
    label, _ = shown_verdict(doc, t)
    shown = f"**{_md(label)}**" + ("" if label == t.verdict else f" (not gated; statistics: {_md(t.verdict)})")
    return (f"| {_md(t.suite)} / {_md(t.task)} | {t.n} | {pts(t.baseline, signed=False)} | "
            f"{pts(t.candidate, signed=False)} | {pts(t.delta)} | {ci} | {mde} | "
            f"{pts(t.margin, signed=False)} | {t.n_regressed} / {t.n_improved} | {shown} |")


def _md_tail(doc: Verdict) -> list[str]:
    """The Markdown after the table: notes, speculative decoding, speed, effective config diff, regressed items."""
    out: list[str] = []
    if doc.verdict == "NO-OP":
        out += ["", f"_{_md(NO_OP_NOTE)}._"]
    if floor_note(doc):
        out += ["", f"_{_md(FLOOR_NOTE)}._"]
    if spec_decode_line(doc):
        out += ["", _md(spec_decode_line(doc))]
    if doc.speed is not None:
        out += ["", *speed_markdown(doc.speed)]
    if doc.replay is not None:
        out += ["", f"**Replay** (recorded requests, no references): {_md(replay_line(doc.replay))}"]
    if doc.economics is not None:
        cost = economics_lines(doc.economics.model_dump())
        out += ["", f"**Cost** ({_md(cost[0].removeprefix('cost (').removesuffix('):'))}; report only, never changes "
                "the verdict):", *[f"- {_md(x)}" for x in cost[1:]]]
    out += ["", "**Effective engine config** (as the engine applied it), baseline \u2192 candidate:"]
    out += [f"- {_md(r.key)}: {_md(r.baseline)} \u2192 {_md(r.candidate)}" for r in doc.effective_diff] or \
        ["- no difference: the engine applied the same configuration to both sides"]
    regressed = [(t.task, f.item_id, f.source_id) for t in doc.tasks for f in t.flipped if f.kind == "regressed"]
    if regressed:
        shown = ", ".join(f"{_md(task)} #{i}" + (f" ({_md(sid)})" if sid is not None else "")
                          for task, i, sid in regressed[:_MAX_ITEM_IDS])
        more = f" and {len(regressed) - _MAX_ITEM_IDS} more" if len(regressed) > _MAX_ITEM_IDS else ""
        out += ["", f"**Regressed items** ({len(regressed)}): {shown}{more}."]
    return out


def in_ci(environ: Mapping[str, str] | None = None) -> bool:
    """True in a CI job: GitHub Actions sets ``GITHUB_ACTIONS=true``; it and most CI services set ``CI=true``."""
    env = os.environ if environ is None else environ
    return env.get("GITHUB_ACTIONS", "").lower() == "true" or env.get("CI", "").lower() in ("true", "1")


def _report_where(report_link: str, run_dir: Path | None) -> str:
    """Where the full report is: the job's artifacts in CI (``in_ci``), else the local run directory."""
    if in_ci():
        return f"`{_md(report_link)}` (in the job's artifacts)"
    if run_dir is None:
        return f"`{_md(report_link)}` (next to this file)"
    return f"`{_md((run_dir / report_link).as_posix())}`"


def render_markdown(doc: Doc, report_link: str = HTML_NAME, run_dir: Path | None = None) -> str:
    """A Markdown summary of the verdict: verdict and why, per-task table, effective config diff, regressed items.
    The full report is named as in the job's artifacts in CI, else by its path under ``run_dir`` (the run directory
    written to; None: next to the summary)."""
    doc = as_verdict(doc)
    m = doc.manifest
    cand, base = _names(doc)
    limit = m.limit
    size = "speed only (no quality suite ran)" if m.speed_only else f"{limit if limit else 'all'} items per task"
    words = model_words(doc)
    out = [f"## {_ICON.get(doc.verdict, chr(0x26a0))} evalgate {doc.verdict}: {_md(cand)} vs {_md(base)}", "",
           f"{_md(words[:1].upper() + words[1:])}, {size}. "
           f"Full diff report: {_report_where(report_link, run_dir)}.", ""]
    out += [f"- {_md(r)}" for r in doc.reasons]
    note = demo_model_note(doc)
    out += ["", f"_Note: {_md(note)}._"] if note else []
    out += ["", "| suite / task | n | baseline | candidate | \u0394 (pts) | CI | MDE | margin | regressed / improved "
            "| verdict |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    out += [_md_task_row(doc, t) for t in doc.tasks]
    thinking = [t for t in doc.tasks if t.reasoning is not None]
    if thinking:  # chat.think_end: the thought's cost beside the accuracy Δ
        out += ["", "Reasoning (tokens per item, baseline \u2192 candidate):", ""]
        out += [f"- {_md(t.suite)} / {_md(t.task)}: {_md(reasoning_line(t.reasoning))}" for t in thinking]
    return "\n".join(out + _md_tail(doc)) + "\n"


def speed_markdown(speed: SpeedBlock) -> list[str]:
    """Markdown lines of the speed block: a table of speed-up per concurrency level with its interval."""
    if not speed.measured:
        return [f"**Speed**: not measured: {_md(speed.error)}"]
    p = speed.profile
    cand = speed.sides.get("candidate")
    device = cand.device if cand is not None and "device" in cand.model_fields_set else "?"
    out = [f"**Speed** ({_md(profile_words(p))}{'' if p.requests else ' tokens'}, {_md(repeats_words(p, True))}, "
           f"{_md(p.mode)}, {_md(device)}):",
           "", "| concurrency | baseline output tok/s | candidate output tok/s | speed-up | interval | MDE | "
               "CV base / cand | |",
           "|--:|--:|--:|--:|--:|--:|--:|---|"]
    for r in speed.levels:
        lo, hi = r.ci_low, r.ci_high
        level = 0.95 if r.level is None else r.level
        ci = f"{100 * level:.0f}% [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "n/a"
        cv = "/".join("n/a" if side.cv is None else f"{100 * side.cv:.1f}%" for side in (r.baseline, r.candidate))
        mde = "n/a" if r.mde_ratio is None else f"\u00d7{r.mde_ratio:.2f}"
        need = "; ".join(x for x in (repeats_note(r.repeats_needed), precision_note(r.precision), capacity_note(r))
                         if x)
        out.append(f"| {r.concurrency} | {r.baseline.median:,.0f} | {r.candidate.median:,.0f} | "
                   f"\u00d7{r.ratio:.2f} | {ci} | {mde} | {cv} | {_md(r.verdict)}{'; ' + _md(need) if need else ''} |")
    note = speed_mde_note(speed)
    out += ["", f"_{_md(note)}._"] if note else []
    latency = latency_headline(speed)
    return [*out, "", _md(latency)] if latency else out


def render_error_markdown(message: str, exit_code: int, name: str = "run") -> str:
    """A Markdown summary for a run that failed before a verdict (an error is never a pass)."""
    return (f"## \U0001f4a5 evalgate ERROR: {_md(name)} (exit {exit_code})\n\n"
            f"{_md(message)}\n\nNo verdict: the check fails.\n")


def write_outputs(doc: Doc, out_dir: Path) -> dict[str, Path]:
    """Write ``report.html``, ``verdict.junit.xml`` and ``summary.md`` for the verdict into ``out_dir``.

    Returns:
        ``{"html": path, "junit": path, "markdown": path}``.
    """
    doc = as_verdict(doc)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"html": out_dir / HTML_NAME, "junit": out_dir / JUNIT_NAME, "markdown": out_dir / MARKDOWN_NAME}
    paths["html"].write_text(render_html(doc), encoding="utf-8")
    paths["junit"].write_text(render_junit(doc), encoding="utf-8")
    paths["markdown"].write_text(render_markdown(doc, run_dir=out_dir), encoding="utf-8")
    return paths


def write_error_outputs(out_dir: Path, message: str, exit_code: int, name: str = "run") -> dict[str, Path]:
    """Write an error JUnit file and Markdown summary into ``out_dir`` (for a run without a verdict)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"junit": out_dir / JUNIT_NAME, "markdown": out_dir / MARKDOWN_NAME}
    paths["junit"].write_text(render_error_junit(message, exit_code, name), encoding="utf-8")
    paths["markdown"].write_text(render_error_markdown(message, exit_code, name), encoding="utf-8")
    return paths
