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

import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

HTML_NAME = "report.html"
JUNIT_NAME = "verdict.junit.xml"
MARKDOWN_NAME = "summary.md"
_MINUS = "\u2212"
_ICON = {"PASS": "\u2705", "BLOCK": "\u274c", "NO-OP": "\u26aa", "INCONCLUSIVE": "\u26a0\ufe0f"}
_MAX_ITEM_IDS = 20


def pts(x: float | None, *, signed: bool = True) -> str:
    """Points with one decimal and a real minus sign; ``n/a`` for a missing or NaN value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    text = f"{x:+.1f}" if signed else f"{x:.1f}"
    if text in ("+0.0", "-0.0"):
        text = "0.0"
    return text.replace("-", _MINUS)


def task_evidence(t: dict[str, Any]) -> str:
    """One line of evidence for a task: Δ, its interval, the lower bound against the margin, and flips."""
    level = f"{100 * t.get('ci_level', 0.9):.0f}%"
    lb = t.get("lower_bound", t.get("ci_low"))
    # The relation as it is, not as the verdict suggests (an INCONCLUSIVE bound can lie below -margin).
    rel = "<" if lb is not None and lb < -t["margin"] else "\u2265"
    mde = f", MDE {pts(t['mde'], signed=False)} pts" if t.get("mde") is not None else ""
    return (f"\u0394 {pts(t['delta'])} pts, {level} CI [{pts(t['ci_low'])}, {pts(t['ci_high'])}], "
            f"lower bound {pts(lb)} {rel} {_MINUS}margin {_MINUS}{pts(t['margin'], signed=False)} pts{mde} "
            f"(n={t['n']}; {t.get('n_regressed', 0)} regressed, {t.get('n_improved', 0)} improved)")


NO_OP_NOTE = ("NO-OP: no task is gated, because the engine applied the same configuration to both sides; the per-task "
              "statistics, and the outcome they alone would give, are shown for information only")


def shown_verdict(doc: dict[str, Any], t: dict[str, Any]) -> tuple[str, str]:
    """``(label, detail)`` for a task as reports show it.

    Normally the task's verdict and its rule. Under a NO-OP run no task is gated: the label is ``NO-OP`` and the
    detail says so and names the statistical outcome, e.g. ``("NO-OP", "not gated; statistics shown for information:
    INCONCLUSIVE (power: MDE > margin)")``, so an under-powered task of a NO-OP run does not read as a problem.
    """
    rule = t.get("rule") or ""
    if doc.get("verdict") != "NO-OP":
        return t["verdict"], rule
    return "NO-OP", f"not gated; statistics shown for information: {t['verdict']}" + (f" ({rule})" if rule else "")


FLOOR_NOTE = ("\u2265N (floor): no item changed in this run, so there is no discordance to extrapolate from; N is not "
              "an estimate but the fewest items with which any run can be powered for the margin (the SE is never "
              "below 100/N), enough only if (almost) no item changes")


def items_needed(t: dict[str, Any]) -> tuple[int | None, str | None]:
    """``(items, basis)`` for MDE <= margin of a task of the verdict document; basis ``"discordance"`` (an estimate)
    or ``"floor"`` (no item changed: a lower bound, see ``power.items_needed``); ``(None, None)`` without a figure.

    A document written before ``items_needed_basis`` existed is recomputed from its own statistics (its stored
    figure extrapolated the SE floor when no item changed).
    """
    from evalgate import power

    need, basis = t.get("items_needed"), t.get("items_needed_basis")
    if need is not None and basis is None:
        try:
            need = power.items_needed(t["se_power"], t["n"], t["margin"], t["alpha"], t["power"],
                                      discordant=t.get("discordant"))
        except (KeyError, TypeError, ValueError):
            pass
        basis = power.items_needed_basis(need, t.get("discordant"))
    return need, basis


def items_needed_short(t: dict[str, Any]) -> str | None:
    """``"needs ≈110 items"`` or ``"needs ≥125 items (floor)"`` for an under-powered INCONCLUSIVE task (MDE >
    margin), else None: a BLOCK or PASS task is decided, whatever its MDE, so more items would not change it.
    A ``(floor)`` figure is explained by :data:`FLOOR_NOTE`."""
    need, basis = items_needed(t)
    mde = t.get("mde")
    if t.get("verdict") != "INCONCLUSIVE" or need is None or mde is None or not mde > t["margin"]:
        return None
    return f"needs \u2265{need} items (floor)" if basis == "floor" else f"needs \u2248{need} items"


def floor_note(doc: dict[str, Any]) -> str | None:
    """:data:`FLOOR_NOTE` when some under-powered task of ``doc`` shows a ``(floor)`` items-needed figure, else None
    (also under NO-OP, where no task is gated and reports show no items-needed figure)."""
    if doc.get("verdict") == "NO-OP":
        return None
    return FLOOR_NOTE if any((items_needed_short(t) or "").endswith("(floor)") for t in doc["tasks"]) else None


# How the candidate's spec-decode counts were obtained (report.gate_document's "spec_decode_source").
SPEC_SOURCE_NOTE = {
    "per_request": "summed from vLLM's per-request metrics",
    "engine_counters": "engine-wide counters diffed per suite; per-request counts are unavailable on this vLLM",
    "mixed": "per-request metrics for some suites, engine-wide counters for others",
}


def spec_decode_line(doc: dict[str, Any]) -> str | None:
    """One sentence on the candidate's speculative decoding (acceptance and its source), None when it had none."""
    sd = (doc.get("spec_decode") or {}).get("candidate")
    if not sd:
        return None
    source = doc.get("spec_decode_source")
    note = SPEC_SOURCE_NOTE.get(source, f"source {source}") if source else "source not recorded"
    return (f"Speculative decoding (candidate): {sd['drafts']:.0f} drafts, {sd['draft_tokens']:.0f} draft tokens, "
            f"{sd['accepted_tokens']:.0f} accepted; acceptance rate {100 * sd['acceptance_rate']:.1f}%, mean "
            f"acceptance length {sd['mean_acceptance_length']:.2f} ({note}).")


def render_junit(doc: dict[str, Any]) -> str:
    """JUnit XML for ``doc``: a ``<testsuite>`` per suite, a ``<testcase>`` per task (``xml.etree``)."""
    m = doc.get("manifest", {})
    cand, base = m.get("candidate", {}).get("name", "candidate"), m.get("baseline", {}).get("name", "baseline")
    timings = m.get("timings", {})
    verdict = doc["verdict"]
    root = ET.Element("testsuites", name=f"evalgate {cand} vs {base}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    by_suite: dict[str, list[dict[str, Any]]] = {}
    for t in doc["tasks"]:
        by_suite.setdefault(t["suite"], []).append(t)
    for suite, tasks in by_suite.items():
        secs = sum(float(timings.get(f"{role}:suite:{suite}", 0.0)) for role in ("baseline", "candidate"))
        ts = ET.SubElement(root, "testsuite", name=f"evalgate.{suite}", time=f"{secs:.3f}")
        props = ET.SubElement(ts, "properties")
        for k, v in (("verdict", verdict), ("baseline", base), ("candidate", cand), ("model", m.get("model")),
                     *speed_properties(doc.get("speed"))):
            ET.SubElement(props, "property", name=k, value=str(v))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for t in tasks:
            case = ET.SubElement(ts, "testcase", classname=f"evalgate.{cand}.{suite}", name=t["task"], time="0")
            evidence = task_evidence(t)
            counts["tests"] += 1
            if verdict == "NO-OP":
                ET.SubElement(case, "skipped", message=f"NO-OP: {'; '.join(doc['reasons'])}; not gated, statistics "
                                                       f"shown for information: {t['verdict']}: {evidence}")
                counts["skipped"] += 1
            elif t["verdict"] == "BLOCK":
                fail = ET.SubElement(case, "failure", type="BLOCK", message=f"BLOCK: {evidence}")
                fail.text = _failure_text(t)
                counts["failures"] += 1
            elif t["verdict"] != "PASS":
                ET.SubElement(case, "skipped", message=f"{t['verdict']}: {evidence}")
                counts["skipped"] += 1
            label, _ = shown_verdict(doc, t)
            status = t["verdict"] if label == t["verdict"] else f"{label} (not gated; statistics alone: {t['verdict']})"
            ET.SubElement(case, "system-out").text = f"{status}: {t.get('reason', evidence)}"
        for k, v in counts.items():
            ts.set(k, str(v))
            totals[k] += v
    if doc.get("speed"):
        _speed_junit(root, doc, totals, cand)
    for k, v in totals.items():
        root.set(k, str(v))
    return _xml(root)


def speed_properties(speed: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """JUnit ``<property>`` pairs of the speed block (none when speed was not measured)."""
    if not speed:
        return []
    if speed.get("status") != "measured":
        return [("speed", f"failed: {speed.get('error')}")]
    p = speed.get("profile", {})
    out: list[tuple[str, Any]] = [("speed_profile", f"{p.get('input_len')} in / {p.get('output_len')} out, "
                                   f"concurrency {','.join(map(str, p.get('concurrency', [])))}, {p.get('repeats')} "
                                   f"repeats, {p.get('mode')}")]
    for row in speed.get("levels", []):
        c = row["concurrency"]
        out += [(f"speedup_c{c}", f"{row['ratio']:.4f}"), (f"speedup_c{c}_ci", f"[{row.get('ci_low')}, {row.get('ci_high')}]"),
                (f"speed_c{c}", row["verdict"]), (f"output_tok_s_c{c}_baseline", f"{row['baseline']['median']:.1f}"),
                (f"output_tok_s_c{c}_candidate", f"{row['candidate']['median']:.1f}")]
    return out


def _speed_junit(root: ET.Element, doc: dict[str, Any], totals: dict[str, int], cand: str) -> None:
    """A ``evalgate.speed`` test suite with one case: a failure when a speed threshold BLOCKed."""
    from evalgate.speed import headline

    speed = doc["speed"]
    ts = ET.SubElement(root, "testsuite", name="evalgate.speed", tests="1", errors="0", skipped="0", time="0")
    props = ET.SubElement(ts, "properties")
    for k, v in speed_properties(speed):
        ET.SubElement(props, "property", name=k, value=str(v))
    case = ET.SubElement(ts, "testcase", classname=f"evalgate.{cand}.speed", name="throughput", time="0")
    line = headline(speed)
    missed = [r for r in doc.get("reasons", []) if r.startswith("speed: ")]
    failed = speed.get("status") != "measured"
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


def _failure_text(t: dict[str, Any]) -> str:
    lines = [t.get("reason", ""), f"metric: {t.get('metric')}, baseline {pts(t['baseline'], signed=False)}, "
             f"candidate {pts(t['candidate'], signed=False)}, margin {pts(t['margin'], signed=False)} pts "
             f"({t.get('margin_source', '')})"]
    reg = [f["item_id"] for f in t.get("flipped", []) if f["kind"] == "regressed"]
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


def render_markdown(doc: dict[str, Any], report_link: str = HTML_NAME) -> str:
    """A Markdown summary of ``doc``: verdict and why, per-task table, effective config diff, regressed items."""
    m = doc.get("manifest", {})
    cand, base = m.get("candidate", {}).get("name", "candidate"), m.get("baseline", {}).get("name", "baseline")
    v = doc["verdict"]
    limit = m.get("limit")
    out = [f"## {_ICON.get(v, chr(0x26a0))} evalgate {v}: {_md(cand)} vs {_md(base)}", "",
           f"Model {_md(m.get('model', '?'))}, {limit if limit else 'all'} items per task. "
           f"Full diff report: `{_md(report_link)}` (in the job's artifacts).", ""]
    out += [f"- {_md(r)}" for r in doc.get("reasons", [])]
    out += ["", "| suite / task | n | baseline | candidate | \u0394 (pts) | CI | MDE | margin | regressed / improved "
            "| verdict |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for t in doc["tasks"]:
        ci = f"{100 * t.get('ci_level', 0.9):.0f}% [{pts(t['ci_low'])}, {pts(t['ci_high'])}]"
        mde = pts(t.get("mde"), signed=False)
        need = items_needed_short(t) if v != "NO-OP" else None
        mde += f"; {need}" if need else ""
        label, _ = shown_verdict(doc, t)
        shown = f"**{_md(label)}**" + ("" if label == t["verdict"] else f" (not gated; statistics: {_md(t['verdict'])})")
        out.append(f"| {_md(t['suite'])} / {_md(t['task'])} | {t['n']} | {pts(t['baseline'], signed=False)} | "
                   f"{pts(t['candidate'], signed=False)} | {pts(t['delta'])} | {ci} | {mde} | "
                   f"{pts(t['margin'], signed=False)} | {t.get('n_regressed', 0)} / {t.get('n_improved', 0)} | "
                   f"{shown} |")
    if v == "NO-OP":
        out += ["", f"_{_md(NO_OP_NOTE)}._"]
    if floor_note(doc):
        out += ["", f"_{_md(FLOOR_NOTE)}._"]
    if spec_decode_line(doc):
        out += ["", _md(spec_decode_line(doc))]
    if doc.get("speed"):
        out += ["", *speed_markdown(doc["speed"])]
    diff = doc.get("effective_diff") or []
    out += ["", "**Effective engine config** (as the engine applied it), baseline \u2192 candidate:"]
    out += [f"- {_md(r['key'])}: {_md(r['baseline'])} \u2192 {_md(r['candidate'])}" for r in diff] or \
        ["- no difference: the engine applied the same configuration to both sides"]
    regressed = [(t["task"], f["item_id"]) for t in doc["tasks"] for f in t.get("flipped", [])
                 if f["kind"] == "regressed"]
    if regressed:
        shown = ", ".join(f"{_md(task)} #{i}" for task, i in regressed[:_MAX_ITEM_IDS])
        more = f" and {len(regressed) - _MAX_ITEM_IDS} more" if len(regressed) > _MAX_ITEM_IDS else ""
        out += ["", f"**Regressed items** ({len(regressed)}): {shown}{more}."]
    return "\n".join(out) + "\n"


def speed_markdown(speed: dict[str, Any]) -> list[str]:
    """Markdown lines of the speed block: a table of speed-up per concurrency level with its interval."""
    if speed.get("status") != "measured":
        return [f"**Speed**: not measured: {_md(speed.get('error'))}"]
    p = speed.get("profile", {})
    out = [f"**Speed** ({p.get('input_len')} in / {p.get('output_len')} out tokens, {p.get('repeats')} interleaved "
           f"repeats per side, {_md(p.get('mode'))}, {_md(speed.get('sides', {}).get('candidate', {}).get('device', '?'))}):",
           "", "| concurrency | baseline output tok/s | candidate output tok/s | speed-up | interval | CV base / cand | |",
           "|--:|--:|--:|--:|--:|--:|---|"]
    for r in speed.get("levels", []):
        lo, hi = r.get("ci_low"), r.get("ci_high")
        ci = f"{100 * r.get('level', 0.95):.0f}% [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "n/a"
        cv = "/".join("n/a" if r[s].get("cv") is None else f"{100 * r[s]['cv']:.1f}%" for s in ("baseline", "candidate"))
        out.append(f"| {r['concurrency']} | {r['baseline']['median']:,.0f} | {r['candidate']['median']:,.0f} | "
                   f"\u00d7{r['ratio']:.2f} | {ci} | {cv} | {_md(r['verdict'])} |")
    return out


def render_error_markdown(message: str, exit_code: int, name: str = "run") -> str:
    """A Markdown summary for a run that failed before a verdict (an error is never a pass)."""
    return (f"## \U0001f4a5 evalgate ERROR: {_md(name)} (exit {exit_code})\n\n"
            f"{_md(message)}\n\nNo verdict: the check fails.\n")


def write_outputs(doc: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write ``report.html``, ``verdict.junit.xml`` and ``summary.md`` for ``doc`` into ``out_dir``.

    Returns:
        ``{"html": path, "junit": path, "markdown": path}``.
    """
    from evalgate.report import render_html

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"html": out_dir / HTML_NAME, "junit": out_dir / JUNIT_NAME, "markdown": out_dir / MARKDOWN_NAME}
    paths["html"].write_text(render_html(doc), encoding="utf-8")
    paths["junit"].write_text(render_junit(doc), encoding="utf-8")
    paths["markdown"].write_text(render_markdown(doc), encoding="utf-8")
    return paths


def write_error_outputs(out_dir: Path, message: str, exit_code: int, name: str = "run") -> dict[str, Path]:
    """Write an error JUnit file and Markdown summary into ``out_dir`` (for a run without a verdict)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"junit": out_dir / JUNIT_NAME, "markdown": out_dir / MARKDOWN_NAME}
    paths["junit"].write_text(render_error_junit(message, exit_code, name), encoding="utf-8")
    paths["markdown"].write_text(render_error_markdown(message, exit_code, name), encoding="utf-8")
    return paths
