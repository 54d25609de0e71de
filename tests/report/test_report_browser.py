"""The HTML report in a real headless Chromium (Debian's `chromium`): it renders the verdict, no script planted
in a model output runs, the planted markup shows as text, and a screenshot is saved under the test's tmp dir."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from evalgate.report.outputs import write_outputs
from runfixtures import blocking_document

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (Debian: apt-get install chromium)")


def _chromium(tmp_path: Path, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'chromium-profile'}",
           *args, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def _title(dom: str) -> str:
    m = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert m, dom[:500]
    return m.group(1)


def test_harness_sees_a_script_that_runs(tmp_path: Path) -> None:
    """Control: the same check does detect script execution, so its absence below means something."""
    page = tmp_path / "control.html"
    page.write_text("<!DOCTYPE html><html><head><title>clean</title></head><body>"
                    "<script>document.title='pwned'</script></body></html>")
    proc = _chromium(tmp_path, page, "--dump-dom")
    assert _title(proc.stdout) == "pwned", proc.stderr[-2000:]


def test_report_renders_verdict_and_runs_no_script_from_outputs(tmp_path: Path) -> None:
    doc = blocking_document()  # item 0 of task t: <img src=x onerror=...><script>document.title='pwned'</script>
    paths = write_outputs(doc, tmp_path / "run")
    proc = _chromium(tmp_path, paths["html"], "--dump-dom")
    dom = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _title(dom) == "evalgate BLOCK: cand vs baseline"
    assert '<span class="verdict BLOCK">BLOCK</span>' in dom
    # The planted markup is text in the DOM (serialised escaped), never an element.
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom
    assert "&lt;img src=x onerror=\"document.title='pwned'\"&gt;" in dom.replace("<mark>", "").replace("</mark>", "")
    assert "<img" not in dom and not re.search(r"<script[\s>]", dom)
    assert "<svg" in dom and 'id="show-flipped" checked=""' in dom

    shot = tmp_path / "report.png"
    proc = _chromium(tmp_path, paths["html"], "--window-size=1280,1800", "--hide-scrollbars",
                     f"--screenshot={shot}")
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"screenshot: {shot}")
