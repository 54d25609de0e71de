"""Machine outputs (JUnit XML, Markdown) and the report's plot, filters and item order, from verdict documents."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from evalgate.report.outputs import (
    JUNIT_NAME,
    MARKDOWN_NAME,
    render_junit,
    render_markdown,
    write_error_outputs,
    write_outputs,
)
from evalgate.report.plot import delta_plot
from evalgate.report.render import render_html, review_items
from runfixtures import EVIL_IMG, EVIL_SCRIPT, blocking_document, document, task


def test_junit_has_one_case_per_task_and_a_failure_with_delta_ci_and_margin() -> None:
    doc = blocking_document()
    root = ET.fromstring(render_junit(doc))
    assert root.tag == "testsuites" and root.get("tests") == "2" and root.get("failures") == "1"
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert set(cases) == {"t", "u"}
    assert all(c.get("classname") == "evalgate.cand.s" for c in cases.values())
    fail = cases["t"].find("failure")
    assert fail is not None and cases["u"].find("failure") is None
    t = next(x for x in doc["tasks"] if x["task"] == "t")
    msg = fail.get("message")
    assert msg.startswith("BLOCK: \u0394 \u221222.5 pts, 90% CI [")
    assert "\u2212margin \u221210.0 pts" in msg and f"n={t['n']}" in msg and "10 regressed, 1 improved" in msg
    assert "regressed items: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9\n" in fail.text + "\n"
    # Model output never goes into JUnit.
    assert "pwned" not in render_junit(doc)


def _with_models(doc: dict, base: str, cand: str) -> dict:
    """``doc`` whose sides requested ``base`` and ``cand`` (the manifest's ``model`` is the candidate's)."""
    m = doc["manifest"]
    sides = {role: {**m[role], "requested": {**m[role].get("requested", {}), "model": model}}
             for role, model in (("baseline", base), ("candidate", cand))}
    return {**doc, "manifest": {**m, "model": cand, **sides}}


def test_terminal_and_summary_name_the_model_and_the_demo_note() -> None:
    from evalgate.report.render import render_terminal

    doc = _with_models(blocking_document(), "embedded:nemotron-h-tiny", "embedded:nemotron-h-tiny")
    terminal, md = render_terminal(doc), render_markdown(doc)
    assert terminal.splitlines()[0] == "cand vs baseline, model embedded:nemotron-h-tiny"
    assert "Model embedded:nemotron-h-tiny, all items per task." in md
    for text in (terminal, md):  # the embedded demo hybrid: a PASS on it proves the pipeline, not a model
        assert "5 M-parameter demo model" in text and "not that a model you serve keeps its quality" in text
    other = _with_models(blocking_document(), "/models/base", "/models/noisy")
    terminal, md = render_terminal(other), render_markdown(other)
    assert terminal.splitlines()[0] == "cand vs baseline, baseline model /models/base, candidate model /models/noisy"
    assert "Baseline model /models/base, candidate model /models/noisy, all items per task." in md
    assert "demo model" not in terminal + md
    chat = _with_models(blocking_document(), "embedded:nemotron-h-tiny-chat", "embedded:nemotron-h-tiny-chat")
    for text in (render_terminal(chat), render_markdown(chat)):  # the chat fine-tune is the same demo model
        assert "embedded:nemotron-h-tiny-chat is evalgate's embedded 5 M-parameter demo model" in text


def test_junit_marks_every_task_skipped_under_no_op() -> None:
    base = {"t": task("t", "s", ["a"] * 4, [1.0] * 4)}
    doc = document(base, base, same_config=True)
    assert doc["verdict"] == "NO-OP"
    root = ET.fromstring(render_junit(doc))
    assert root.get("skipped") == "1" and root.get("failures") == "0"
    assert next(root.iter("skipped")).get("message").startswith("NO-OP: ")


def test_markdown_summary_has_verdict_table_diff_and_regressed_ids_but_no_model_output() -> None:
    doc = blocking_document()
    md = render_markdown(doc)
    assert md.startswith("## \u274c evalgate BLOCK: cand vs baseline\n")
    assert "| s / t | 40 | 97.5 | 75.0 | \u221222.5 | 90% [" in md and "| 10.0 | 10 / 1 | **BLOCK** |" in md
    assert "| s / u | 40 |" in md and "| **PASS** |" in md
    assert "- engine_args.dtype: 'float32' \u2192 'bfloat16'" in md
    assert "**Regressed items** (10): t #0, t #1, t #2, t #3," in md and "t #9." in md
    assert "pwned" not in md and "<" not in md.replace("&lt;", "")


def test_write_outputs_and_error_outputs(tmp_path: Path) -> None:
    paths = write_outputs(blocking_document(), tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == sorted([JUNIT_NAME, MARKDOWN_NAME, "report.html"])
    assert paths["html"].read_text().startswith("<!DOCTYPE html>")
    err = write_error_outputs(tmp_path / "err", "engine for x exited with code 1 <&>", 3, "x")
    root = ET.fromstring(err["junit"].read_text())
    assert root.get("errors") == "1" and next(root.iter("error")).get("message").endswith("<&>")
    assert "ERROR: x (exit 3)" in err["markdown"].read_text()


def test_summary_names_the_job_artifacts_only_in_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalgate.report.outputs import in_ci

    for var in ("CI", "GITHUB_ACTIONS"):
        monkeypatch.delenv(var, raising=False)
    run = tmp_path / "runs" / "cand-20260101T000000Z"
    write_outputs(blocking_document(), run)
    local = (run / MARKDOWN_NAME).read_text()
    assert f"Full diff report: `{run.as_posix()}/report.html`." in local and "artifacts" not in local
    assert "(next to this file)" in render_markdown(blocking_document())
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    write_outputs(blocking_document(), run)
    assert "Full diff report: `report.html` (in the job's artifacts)." in (run / MARKDOWN_NAME).read_text()
    assert in_ci({"CI": "true"}) and in_ci({"CI": "1"}) and not in_ci({}) and not in_ci({"CI": "false"})


def test_review_order_is_regressions_then_improvements_then_changed_outputs() -> None:
    items = review_items(blocking_document())
    assert [(f["kind"], f["task"], f["item_id"]) for f in items] == [
        *[("regressed", "t", i) for i in range(10)], ("improved", "t", 10), ("changed", "u", 0)]


def test_plot_is_inline_svg_with_one_row_per_task_and_escaped_labels() -> None:
    doc = blocking_document()
    doc["tasks"][0]["task"] = "t<script>"
    svg = str(delta_plot(doc))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "<script" not in svg and "t&lt;script&gt;" in svg
    assert svg.count("<circle") == 2 and svg.count('stroke-dasharray="3 2"') == 2  # a dot and a -margin per task
    assert "http" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert str(delta_plot({"tasks": []})) == ""


def test_report_has_plot_filters_without_script_and_escapes_every_output() -> None:
    html = render_html(blocking_document())
    assert "<script" not in html and "<img" not in html and "onerror=\"" not in html
    assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in html
    assert "<svg" in html and 'Content-Security-Policy" content="default-src \'none\'' in html
    # Filters are radio buttons styled by :checked; "flipped" is the default view.
    for ident in ("show-regressed", "show-flipped", "show-changed"):
        assert f'<input type="radio" name="item-filter" id="{ident}"' in html
    assert re.search(r'id="show-flipped" checked>', html)
    assert "#show-regressed:checked ~ .items .item:not(.regressed)" in html
    assert html.index("Regressions only (10)") < html.index("All changed outputs (12)")
    # Flipped items come before the config diff and the manifest.
    assert html.index('class="item regressed"') < html.index("<h2>Engine config</h2>") < html.index("Run manifest")
    assert EVIL_IMG not in html and EVIL_SCRIPT not in html


def test_evidence_line_states_the_true_relation_of_bound_and_margin() -> None:
    from evalgate.report.outputs import task_evidence

    t = {"verdict": "INCONCLUSIVE", "delta": 0.0, "ci_low": -11.9, "ci_high": 11.9, "lower_bound": -11.9,
         "margin": 6.0, "n": 20, "ci_level": 0.9}
    assert "lower bound \u221211.9 < \u2212margin \u22126.0 pts" in task_evidence(t)
    assert "\u2265" in task_evidence({**t, "lower_bound": -1.0, "ci_low": -1.0})


def _underpowered_doc(changed: int) -> dict:
    """10 items, margin 2 (MDE far above it): ``changed`` items regress, the rest are identical."""
    base = {"t": task("t", "s", ["a"] * 10, [1.0] * 10)}
    cand = {"t": task("t", "s", ["b"] * changed + ["a"] * (10 - changed), [0.0] * changed + [1.0] * (10 - changed))}
    doc = document(base, cand)
    assert doc["tasks"][0]["rule"].startswith("power"), doc["tasks"][0]["rule"]
    return doc


def test_items_needed_without_discordance_is_shown_as_a_floor() -> None:
    from scipy.stats import norm

    doc = _underpowered_doc(0)
    t = doc["tasks"][0]
    floor = math.ceil(100 * (norm.ppf(0.95) + norm.ppf(0.8)) / 2.0)
    assert (t["items_needed"], t["items_needed_basis"], t["discordant"]) == (floor, "floor", 0) == (125, "floor", 0)
    html, md = render_html(doc), render_markdown(doc)
    for text in (html, md):
        assert "needs \u2265125 items (floor)" in text and "no discordance to extrapolate from" in text
        assert "\u2248" not in text
    # A document stored before items_needed_basis existed carried the extrapolated floor, 10^4 K^2/(n m^2) = 1546:
    # it is recomputed from the document's own statistics.
    old = {**doc, "tasks": [{**t, "items_needed": 1546}]}
    del old["tasks"][0]["items_needed_basis"]
    (row,) = [line for line in render_markdown(old).splitlines() if line.startswith("| s / t |")]
    assert "needs \u2265125 items (floor)" in row and "1546" not in row


def test_items_needed_with_discordance_is_shown_as_an_estimate() -> None:
    doc = _underpowered_doc(1)
    t = doc["tasks"][0]
    assert (t["discordant"], t["items_needed_basis"]) == (1, "discordance")
    # One of 10 changed: SE = 100 * sqrt(0.1 / 10) = 10 (= the floor 100/10), extrapolated n * SE^2 * K^2 / m^2.
    from scipy.stats import norm

    k = norm.ppf(0.95) + norm.ppf(0.8)
    assert t["items_needed"] == math.ceil(10 * 10.0**2 * k**2 / 2.0**2) == 1546
    assert f"needs \u2248{t['items_needed']} items" in render_html(doc)
    assert "(floor)" not in render_markdown(doc) and "no discordance" not in render_markdown(doc)


def test_a_decided_task_shows_no_items_needed_figure() -> None:
    """A BLOCK task is decided: an under-powered MDE (20.6 > margin 10) shows no "needs ≈N items" anywhere."""
    from evalgate.report.outputs import floor_note, items_needed_short
    from evalgate.report.render import render_terminal

    doc = blocking_document()
    t = next(x for x in doc["tasks"] if x["task"] == "t")
    assert (t["verdict"], t["mde"] > t["margin"], t["items_needed"]) == ("BLOCK", True, 171)
    assert items_needed_short(t) is None
    html, md, terminal = render_html(doc), render_markdown(doc), render_terminal(doc)
    assert "needs " not in html and "needs " not in md and "needs " not in terminal
    (row,) = [line for line in md.splitlines() if line.startswith("| s / t |")]
    assert "| 20.6 | 10.0 |" in row
    # The same task had it been INCONCLUSIVE shows the figure; a decided floor figure brings no floor note.
    assert items_needed_short({**t, "verdict": "INCONCLUSIVE"}) == "needs \u2248171 items"
    floored = {**doc, "tasks": [{**t, "items_needed_basis": "floor"}]}
    assert floor_note(floored) is None
    assert floor_note({**floored, "tasks": [{**t, "items_needed_basis": "floor", "verdict": "INCONCLUSIVE"}]})


def _no_op_doc(regress: int = 0) -> dict:
    """Both sides' effective configs equal (NO-OP); 10 items, ``regress`` of them lose their point."""
    base = {"t": task("t", "s", ["a"] * 10, [1.0] * 10)}
    cand = {"t": task("t", "s", ["b"] * regress + ["a"] * (10 - regress), [0.0] * regress + [1.0] * (10 - regress))}
    return document(base, cand, same_config=True)


def test_no_op_tasks_are_shown_as_not_gated_with_their_statistics_for_information() -> None:
    from evalgate.report.outputs import NO_OP_NOTE
    from evalgate.report.render import render_terminal

    doc = _no_op_doc()
    t = doc["tasks"][0]
    # The document keeps the statistical outcome (here under-powered: MDE 24.9 > margin 2) and says it is not gated.
    assert (doc["verdict"], t["verdict"], t["gated"]) == ("NO-OP", "INCONCLUSIVE", False)
    assert t["rule"].startswith("power")
    html = render_html(doc)
    row = re.search(r'<tr><td class="l">s / t</td>.*?</tr>', html, re.S).group(0)
    assert '<span class="verdict NO-OP">NO-OP</span>' in row
    assert "not gated; statistics shown for information: INCONCLUSIVE (power: MDE &gt; margin)" in row
    assert 'class="verdict INCONCLUSIVE"' not in html and "needs \u2265" not in html
    assert NO_OP_NOTE.replace("'", "&#39;") in html
    md = render_markdown(doc)
    assert "| **NO-OP** (not gated; statistics: INCONCLUSIVE) |" in md and "**INCONCLUSIVE**" not in md
    assert NO_OP_NOTE in md and "(floor)" not in md
    terminal = render_terminal(doc)
    assert terminal.splitlines()[3].endswith("  NO-OP, not gated (statistics: INCONCLUSIVE, power)")
    svg = delta_plot(doc)
    assert "not gated  \u0394 0.0" in svg and "#9a6700" not in svg  # grey, not the INCONCLUSIVE amber


def test_no_op_junit_skips_every_task_and_labels_its_statistics() -> None:
    doc = _no_op_doc(regress=6)  # a loss that would BLOCK if anything had changed
    t = doc["tasks"][0]
    assert (doc["verdict"], t["verdict"], t["gated"]) == ("NO-OP", "BLOCK", False)
    root = ET.fromstring(render_junit(doc))
    assert (root.get("skipped"), root.get("failures"), root.get("errors")) == ("1", "0", "0")
    msg = next(root.iter("skipped")).get("message")
    assert msg.startswith("NO-OP: the candidate's effective engine config equals the baseline's")
    assert "; not gated, statistics shown for information: BLOCK: \u0394 \u221260.0 pts" in msg
    out = next(root.iter("system-out")).text
    assert out.startswith("NO-OP (not gated; statistics alone: BLOCK): ")
    assert 'class="verdict BLOCK"' not in render_html(doc) and "**BLOCK**" not in render_markdown(doc)


def test_gated_runs_keep_their_task_verdicts() -> None:
    doc = blocking_document()
    assert [(t["verdict"], t["gated"]) for t in doc["tasks"]] == [("BLOCK", True), ("PASS", True)]
    assert "not gated" not in render_html(doc) + render_markdown(doc) + render_junit(doc)
    # A verdict.json written before `gated` existed renders the same way (the overall verdict decides).
    old = {**doc, "tasks": [{k: v for k, v in t.items() if k != "gated"} for t in doc["tasks"]]}
    assert render_markdown(old) == render_markdown(doc)


def test_output_health_cells_show_counts_beside_the_share() -> None:
    """1 degenerate output of 200 read "0%" (rounded away): each cell shows the counts b / c and both shares."""
    doc = blocking_document()
    t = next(x for x in doc["tasks"] if x["task"] == "t")
    hb, hc = t["evidence"]["health"]["baseline"], t["evidence"]["health"]["candidate"]
    hb.update(n=200, truncated=0.0, empty=0.0, degenerate=0.0, unparseable=None)
    hc.update(n=200, truncated=0.01, empty=0.0, degenerate=0.005, unparseable=0.5)
    html = render_html(doc)
    table = re.search(r"<h3>Output health</h3>.*?</table>", html, re.S).group(0)
    row = re.search(r'<tr><td class="l">s / t</td>(.*?)</tr>', table, re.S).group(1)
    cells = re.findall(r"<td>(.*?)</td>", row, re.S)
    assert cells == ['0 / 2 <span class="muted">(0% / 1%)</span>', '0 / 0 <span class="muted">(0% / 0%)</span>',
                     '0 / 1 <span class="muted">(0% / 0.5%)</span>', "n/a / 100"]


def test_an_interrupted_run_still_leaves_error_outputs(tmp_path: Path) -> None:
    import argparse

    from evalgate.cli import _error_outputs

    @_error_outputs
    def cmd(args: argparse.Namespace) -> int:
        args.run_dir = tmp_path / "run"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cmd(argparse.Namespace(command="run", config="mtp1", out=None))
    summary = (tmp_path / "run" / "summary.md").read_text(encoding="utf-8")
    assert "mtp1 (exit 130)" in summary and "interrupted (SIGINT or SIGTERM) before a verdict" in summary
    assert 'type="exit 130"' in (tmp_path / "run" / "verdict.junit.xml").read_text(encoding="utf-8")


def test_sigterm_is_an_interrupt(tmp_path: Path) -> None:
    import os
    import signal
    import time

    from evalgate.cli import _sigterm_interrupts

    old = signal.getsignal(signal.SIGTERM)
    try:
        _sigterm_interrupts()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises at the next bytecode boundary
    finally:
        signal.signal(signal.SIGTERM, old)


def test_image_items_show_escaped_thumbnails_and_only_png_data_uris() -> None:
    """An item whose request carried images shows each as a thumbnail (a PNG data: URI, allowed by the CSP's
    ``img-src data:`` and nothing else); a stored thumbnail that is not a well-formed PNG data URI is shown as its
    hash only."""
    import dataclasses

    from PIL import Image

    from evalgate.results.records import ItemResult, TaskResult
    from evalgate.suites.pages import thumbnail_data_uri

    page = Image.new("RGB", (320, 200), (255, 255, 255))
    good = thumbnail_data_uri(page)
    assert good.startswith("data:image/png;base64,") and len(good) < 2000
    import base64
    import io

    with Image.open(io.BytesIO(base64.b64decode(good.split(",", 1)[1]))) as small:
        assert small.size == (96, 60)  # the longer side at 96, aspect kept
    evil = 'data:image/png;base64,AAAA" onerror="document.title=1'
    base, cand = task("t", "s", ["a", "b"], [1.0, 1.0]), task("t", "s", ["a2", "b2"], [1.0, 1.0])

    def with_images(t: TaskResult, thumbs: list[str]) -> TaskResult:
        items = tuple(dataclasses.replace(i, images=({"sha256": f"{i.item_id:02d}" * 32, "thumbnail": th},))
                      for i, th in zip(t.items, thumbs))
        return dataclasses.replace(t, items=items)

    base, cand = with_images(base, [good, evil]), with_images(cand, [good, evil])
    assert ItemResult.from_dict(base.items[0].to_dict()) == base.items[0]  # stored and read back whole
    assert "images" not in task("t", "s", ["a"], [1.0]).items[0].to_dict()  # text items' records as before
    doc = document({"t": base}, {"t": cand})
    changed = {f["item_id"]: f for f in doc["tasks"][0]["changed_outputs"]}
    assert changed[0]["images"] == [{"sha256": "00" * 32, "thumbnail": good}]
    assert changed[1]["images"] == [{"sha256": "01" * 32, "thumbnail": None}]
    html = render_html(doc)
    assert "img-src data:\">" in html and html.count("<img ") == 1
    assert f'<img class="thumb" src="{good}" alt="input image {"00" * 6}"' in html
    assert "onerror" not in html and f"input image {'01' * 6} (no thumbnail)" in html
