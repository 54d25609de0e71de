"""The replay gate in the verdict and its renderings: verdict.json's ``replay`` block, changed requests side by side
(escaped), ``redact``, the JUnit case, the Markdown and terminal lines, and the run verdict the replay joins."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from evalgate.compare.pairing import compare_tasks
from evalgate.compare.replay import ReplayOutput, ReplayRun
from evalgate.gate import judge_run
from evalgate.inputs.requestlog import LoggedRequest
from evalgate.inputs.thresholds import ReplaySection, Thresholds
from evalgate.report.document import build_verdict
from evalgate.report.outputs import render_junit, render_markdown
from evalgate.report.render import render_html, render_terminal
from evalgate.report.verdict import as_verdict
from evalgate.results.manifest import Manifest
from runfixtures import manifest, side, task

EVIL = '<script>alert(1)</script>'
SECRET = "sk-live-SECRET-TOKEN"


def _doc(redact: bool = False, n_same: int = 30, floor: float = 0.5):
    """30 + 2 chat requests (the last two change; one of them asks for JSON and loses its validity); a suite task
    both sides pass (margin 10: PASS), so the run's verdict is the replay's."""
    reqs = [LoggedRequest(i, "chat", messages=({"role": "user", "content": f"q{i} {SECRET}"},), max_tokens=8)
            for i in range(1, n_same + 1)]
    reqs += [LoggedRequest(n_same + 1, "chat", messages=({"role": "user", "content": EVIL + SECRET},)),
             LoggedRequest(n_same + 2, "chat", messages=({"role": "user", "content": "json"},),
                           response_format={"type": "json_object"})]
    same = [ReplayOutput(f"a{i}", (1, 2, 3)) for i in range(n_same)]
    base = (*same, ReplayOutput("fine", (1, 2)), ReplayOutput('{"a": 1}', (5, 6)))
    cand = (*same, ReplayOutput(EVIL, (1, 9, 9)), ReplayOutput("oops", (5, 7)))
    run = ReplayRun(requests=tuple(reqs), outputs={"baseline": base, "candidate": cand},
                    log={"path": "r.jsonl", "sha256": "ab" * 32, "requests": len(reqs), "replayed": len(reqs),
                         "only": "all", "limit": None, "max_tokens": 256}, redact=redact)
    thr = Thresholds(alpha=0.05, default_margin=10.0, bootstrap_resamples=1000, on_inconclusive="warn",
                     replay=ReplaySection(**{"from": "r.jsonl", "min_identical_share": floor, "redact": redact}))
    sides = {"t": task("t", "s", ["ok"] * 40, [1.0] * 40)}
    comps = compare_tasks(sides, sides, thr.policy(None))
    b, c = side("baseline", "float32"), side("cand", "bfloat16")
    m = Manifest.model_validate(manifest(b, c, ["t"]))
    cmp = run.compare(near_tie=0.01, alpha=0.05, n_resamples=1000)
    judgement = judge_run(comps, thr.policy("cand"), m, expect="lossy",
                          effective={"baseline": b["effective"], "candidate": c["effective"]}, replay=cmp)
    return build_verdict(judgement, comps, m, replay_run=run).to_dict()


def test_replay_block_values_and_changed_requests() -> None:
    doc = _doc()
    rp = doc["replay"]
    assert (rp["requests"], rp["identical"], rp["agreeing"]) == (32, 30, 30)
    assert rp["share"] == 30 / 32 and rp["floor"] == 0.5
    assert rp["tokens"] == {"baseline": 94, "candidate": 95}  # 30 * 3 + 2 + 2 and 30 * 3 + 3 + 2
    assert [q["line"] for q in rp["changed"]] == [31, 32]
    first, second = rp["changed"]
    assert (first["first_divergence"], first["baseline_output"], first["candidate_output"]) == (1, "fine", EVIL)
    assert second["json_valid"] == [True, False] and second["first_divergence"] == 1
    assert rp["json_output"]["valid"] == {"baseline": 1, "candidate": 0} and rp["json_output"]["lost"] == 1
    # identity PASSes (L of 30/32 is above 0.5); one JSON request cannot power the JSON rule: INCONCLUSIVE
    assert [r["verdict"] for r in rp["rules"]] == ["PASS", "INCONCLUSIVE"]
    assert rp["verdict"] == "INCONCLUSIVE" and doc["verdict"] == "INCONCLUSIVE"
    assert as_verdict(json.loads(json.dumps(doc))).to_dict() == doc  # verdict.json reads back unchanged


def test_a_replay_block_blocks_the_run() -> None:
    doc = _doc(n_same=1, floor=0.99)  # 1 of 3 agree: U = Beta_0.95(2, 2) = 0.86 < 0.99
    assert doc["replay"]["rules"][0]["verdict"] == "BLOCK"
    assert doc["verdict"] == "BLOCK" and doc["reasons"][0].startswith("replay: BLOCK: outputs changed")


def test_report_escapes_changed_requests_side_by_side() -> None:
    doc = _doc()
    html = render_html(doc)
    assert 'id="replay"' in html and "<script" not in html
    assert "&lt;script&gt;" in html.replace("<mark>", "").replace("</mark>", "")
    assert SECRET in html  # not redacted: the changed request's text is shown
    assert "replay: INCONCLUSIVE: 30/32 requests agree" in render_terminal(doc)
    assert "**Replay**" in render_markdown(doc)
    case = ET.fromstring(render_junit(doc)).find("testsuite[@name='evalgate.replay']/testcase")
    assert case is not None and case.find("failure").get("type") == "INCONCLUSIVE"


def test_redact_keeps_hashes_and_lengths_only() -> None:
    doc = _doc(redact=True)
    text = json.dumps(doc) + render_html(doc) + render_markdown(doc) + render_junit(doc) + render_terminal(doc)
    assert SECRET not in text and "alert(1)" not in text and "oops" not in text
    q = doc["replay"]["changed"][0]
    assert q["prompt"] is None and q["baseline_output"] is None and q["prompt_chars"] == len("user: " + EVIL + SECRET)
    assert len(q["request_sha256"]) == 64 and doc["replay"]["redact"] is True


def test_a_stored_replay_verdict_reads_back_and_a_contradiction_is_refused(tmp_path) -> None:
    import pytest

    from evalgate.commands.stored import check_verdict_document
    from evalgate.errors import StoreError

    doc = _doc()  # tasks PASS, the replay INCONCLUSIVE: the run is INCONCLUSIVE, and that is consistent
    assert [t["verdict"] for t in doc["tasks"]] == ["PASS"] and doc["verdict"] == "INCONCLUSIVE"
    check_verdict_document(as_verdict(doc), tmp_path / "verdict.json")
    with pytest.raises(StoreError, match="replay is INCONCLUSIVE, so the gate's verdict is at least INCONCLUSIVE"):
        check_verdict_document(as_verdict({**doc, "verdict": "PASS"}), tmp_path / "verdict.json")
