"""Build the verdict (``verdict.Verdict``, written as ``verdict.json``) from the gate's judgement and the facts.

Assembles, decides nothing: the final decision and each task's judged evidence come from ``gate.judge`` (the
accuracy rule and every override, in one place); this module only lays them out with the statistics.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from evalgate import gate
from evalgate.compare.evidence import (
    as_dict,
)
from evalgate.compare.pairing import TaskComparison
from evalgate.compare.power import items_needed_basis
from evalgate.compare.reasoning import reasoning_summary
from evalgate.compare.replay import ReplayRun
from evalgate.fmt import json_number as _num
from evalgate.gate.replay import ReplayDecision
from evalgate.inputs.thresholds import SpeedFloors
from evalgate.report.verdict import VERSION, Verdict
from evalgate.results.manifest import Manifest
from evalgate.speed.block import SpeedBlock, SpeedThresholds
from evalgate.speed.economics import economics_block

__all__ = ["build_verdict", "gate_document"]


def build_verdict(judgement: gate.Judgement, comparisons: list[TaskComparison], manifest: Manifest, *,
                  near_tie: float = 0.0, speed: SpeedBlock | None = None,
                  speed_floors: SpeedFloors | None = None,
                  economics: Mapping[str, Any] | None = None, replay_run: ReplayRun | None = None) -> Verdict:
    """The verdict of a run: the gate's judgement (``gate.judge``: final decision, judged evidence per task) with
    every task's statistics, changed items and evidence.

    Args:
        judgement: from ``gate.judge`` (or ``gate.judge_run``) over the same comparisons and manifest.
        comparisons: from ``compare.compare_tasks`` (same tasks as the decision).
        manifest: the run manifest (``results.manifest.Manifest``: ``baseline``/``candidate`` with name,
            requested, effective, expect, spec_decode, evidence_sources; suites, versions, timings). The verdict
            embeds it as ``Manifest.as_json()`` (the same object as ``manifest.json``), read back into
            ``Verdict.manifest`` with ``Manifest.from_document`` (so verdicts of older or foreign runs still read).
        near_tie: nats (``ConfigPolicy.near_tie_logprob``); each task lists as ``tie_flips`` the differing items whose
            first flip was within it (numerics), for lossy configs too.
        speed: the ``speed`` block (``speed.block.SpeedBlock``: measured by ``speed.speed_block``, or a failed
            one), None when speed was not measured (the verdict then has no ``speed``). The verdict gets a copy with
            ``thresholds`` set; ``speed`` itself is not changed.
        speed_floors: ``ConfigPolicy.speed_floors`` of the candidate, shown beside the speed block as its
            ``thresholds`` (``SpeedThresholds``: ``min_speedup``, ``max_slowdown`` and, when set, ``slos_ms``; None
            without floors); the gate has already applied them.
        economics: ``ConfigPolicy.economics`` (None: not set): the verdict gets an ``economics``
            block (``economics.economics_block``) when speed was measured. It is computed after the decision and
            never changes it.
        replay_run: the replay's answers (``compare.replay.ReplayRun``); with ``judgement.replay`` the verdict gets
            a ``replay`` block (``_replay_block``).
    Raises:
        KeyError: a task has no judged evidence.
    """
    base, cand = manifest.baseline, manifest.candidate
    decision, evidence, spec = judgement.decision, judgement.evidence, judgement.spec
    by_task = {c.task: c for c in comparisons}
    gated = decision.verdict is not gate.Verdict.NO_OP
    tasks = [_task_row(td, by_task[td.task], near_tie, gated, evidence[td.task]) for td in decision.tasks]
    reasons = list(decision.reasons)
    if not gated:
        reasons += _not_applied(base.requested, cand.requested, cand.effective)
    doc: dict[str, Any] = {
        "version": VERSION, "verdict": decision.verdict.value, "reasons": reasons, "tasks": tasks,
        "config_diff": _diff_rows(base.requested, cand.requested),
        "effective_diff": _diff_rows(base.effective, cand.effective),
        "spec_decode": {role: as_dict(h) for role, h in spec.items()},
        # Where the candidate's acceptance counts came from (runner.ConfigRun.evidence_sources); None when none.
        "spec_decode_source": cand.evidence_sources.get("spec_decode"),
        "manifest": manifest.as_json(),
    }
    if speed is not None:
        doc["speed"] = speed.model_copy(update={"thresholds": None if speed_floors is None else SpeedThresholds(
            min_speedup=speed_floors.min_speedup, max_slowdown=speed_floors.max_slowdown,
            **({"slos_ms": speed_floors.slos()} if speed_floors.slos() else {}))})
    cost = economics_block(speed, economics, {"baseline": base.requested.get("engine_args"),
                                              "candidate": cand.requested.get("engine_args")})
    if cost is not None:
        doc["economics"] = cost
    if judgement.replay is not None and replay_run is not None:
        doc["replay"] = _replay_block(judgement.replay, replay_run)
    return Verdict.model_validate(doc)


def _replay_block(rd: ReplayDecision, run: ReplayRun) -> dict[str, Any]:
    """The verdict's ``replay`` block: the decision (``gate.replay.ReplayDecision``), the summary and every changed
    request side by side; with ``run.redact`` a request's text and outputs are left out (hash and lengths only)."""
    import hashlib
    import json
    import math

    cmp = rd.comparison
    s = cmp.summary()
    j = cmp.json
    block: dict[str, Any] = {
        "verdict": rd.verdict.value, "rules": [{"rule": r.rule, "verdict": r.verdict.value, "reason": r.reason}
                                               for r in rd.rules],
        "log": dict(run.log), "redact": run.redact, "requests": s["requests"], "identical": s["identical"],
        "agreeing": s["agreeing"], "tie_flips": s["tie_flips"], "share": _num(s["share"]),
        "share_lower": _num(rd.lower), "share_upper": _num(rd.upper), "floor": rd.floor, "alpha": rd.alpha,
        "kl_mean": s["kl_mean"], "first_divergence_median": s["first_divergence_median"], "tokens": s["tokens"],
        "length_change": s["length_change"], "tools": s["tools"],
        "json_output": None if j is None else {**s["json"], "delta": _num(j.delta), "ci_low": _num(j.ci_low),
                                        "ci_high": _num(j.ci_high), "loss_p": _num(j.p_loss),
                                        "margin": rd.json_margin, "lost": j.n_regressed, "gained": j.n_improved},
    }
    ties = set(cmp.agreement.tie_flips)
    changed = []
    for r, item, b, c in zip(run.requests, cmp.items, run.outputs["baseline"], run.outputs["candidate"]):
        if item.identical and (item.json_valid is None or item.json_valid[0] == item.json_valid[1]) \
                and item.tools_agree is not False:
            continue
        text = r.prompt if r.kind == "prompt" else "\n".join(f"{m['role']}: {m['content']}" for m in r.messages or ())
        raw = json.dumps({"kind": r.kind, "messages": r.messages, "prompt": r.prompt}, sort_keys=True,
                         ensure_ascii=False)
        changed.append({
            "line": r.line, "request_sha256": hashlib.sha256(raw.encode("utf-8")).hexdigest(),
            "prompt": None if run.redact else text, "prompt_chars": len(text or ""),
            "baseline_output": None if run.redact else b.text, "candidate_output": None if run.redact else c.text,
            "baseline_tokens": item.base_tokens, "candidate_tokens": item.cand_tokens, "identical": item.identical,
            "near_tie": r.line in ties, "first_divergence": item.first_divergence,
            "tie_gap": item.tie_gap if item.tie_gap is not None and math.isfinite(item.tie_gap) else None,
            "kl_mean": item.kl_mean, "json_valid": None if item.json_valid is None else list(item.json_valid),
            "tool_names": None if item.tool_names is None else list(item.tool_names)})
    block["changed"] = changed
    return block


def gate_document(judgement: gate.Judgement, comparisons: list[TaskComparison], manifest: Manifest,
                  **options: Any) -> dict[str, Any]:
    """``build_verdict(...).to_dict()``: the JSON-able document written as ``verdict.json`` (same arguments)."""
    return build_verdict(judgement, comparisons, manifest, **options).to_dict()


def _task_row(td: gate.TaskDecision, c: TaskComparison, near_tie: float, gated: bool,
              evidence: dict[str, Any]) -> dict[str, Any]:
    """One task of the verdict: statistics (points; None for NaN where the document always wrote null), threshold,
    verdict, flipped and changed items."""
    cmp = td.comparison
    flips = [_flip(c, i, "regressed") for i in c.regressed] + [_flip(c, i, "improved") for i in c.improved]
    flipped = set(c.regressed) | set(c.improved)
    changed = [_flip(c, i, "changed") for i, (b, k) in enumerate(c.pairs) if b.output != k.output and i not in flipped]
    row = {
        "suite": td.suite, "task": td.task, "metric": c.metric, "verdict": td.verdict.value, "reason": td.reason,
        "n": cmp.n, "baseline": cmp.baseline_mean, "candidate": cmp.candidate_mean, "delta": cmp.delta,
        "ci_low": cmp.ci_low, "ci_high": cmp.ci_high, "ci_level": 1 - 2 * td.threshold.alpha,
        "lower_bound": cmp.lower_bound, "margin": td.threshold.margin, "margin_source": td.threshold.source,
        "alpha": td.threshold.alpha, "method": cmp.method, "binary": cmp.binary, "mcnemar_p": _num(cmp.mcnemar_p),
        "stderr": _num(cmp.stderr), "n_regressed": cmp.n_regressed, "n_improved": cmp.n_improved,
        "identical_outputs": c.identical_outputs, "flipped": flips, "changed_outputs": changed,
        "tie_flips": list(c.agreement(near_tie).tie_flips), **_decision_fields(td), "gated": gated,
        "evidence": evidence,
    }
    reasoning = reasoning_summary(c.pairs)
    if reasoning is not None:  # with chat.think_end only: other documents stay as they were
        row["reasoning"] = reasoning
    return row


def _decision_fields(td: gate.TaskDecision) -> dict[str, Any]:
    """Power, the rule applied and the cross-check intervals of one task (points; None for NaN)."""
    cmp, agree = td.comparison, td.lossless
    changed = cmp.n_regressed + cmp.n_improved
    return {
        "mde": _num(td.mde), "power": _num(td.power), "rule": td.rule, "items_needed": td.items_needed,
        "items_needed_basis": items_needed_basis(td.items_needed, changed),
        "discordant": changed, "n_clusters": cmp.n_clusters,
        "loss_p": _num(cmp.p_loss), "loss_test": cmp.loss_test, "loss_alpha": _num(td.loss_alpha),
        "loss_shown": td.loss_shown, "se_power": _num(cmp.se_power),
        "cross_check": {"bootstrap": [_num(cmp.boot_low), _num(cmp.boot_high)],
                        "t": [_num(cmp.t_low), _num(cmp.t_high)],
                        "newcombe": [_num(cmp.newcombe_low), _num(cmp.newcombe_high)]},
        "lossless": None if agree is None else {
            "identical": agree.identical, "n": agree.n, "share": agree.share,
            "required_share": td.required_share, "differing_items": list(agree.differing),
            "tie_flips": list(agree.tie_flips), "kl_mean": agree.kl_mean},
    }


def _not_applied(base_requested: dict[str, Any], cand_requested: dict[str, Any],
                 cand_effective: dict[str, Any]) -> list[str]:
    """For a NO-OP: one sentence per requested difference, with what the engine applied instead, e.g.
    ``engine_args.async_scheduling: requested True (baseline: <absent>), but the engine applied False to both``."""
    out = []
    for key, (b, c) in sorted(gate.effective_diff(base_requested, cand_requested).items()):
        value: Any = cand_effective
        for part in key.split("."):  # the same dotted key in the engine's read-back
            value = value.get(part, gate.MISSING) if isinstance(value, dict) else gate.MISSING
        shown = "not reported" if value is gate.MISSING else repr(value)
        out.append(f"{key}: requested {c!r} (baseline: {b!r}), but the engine applied {shown} to both")
    return out


def _flip(c: TaskComparison, i: int, kind: str) -> dict[str, Any]:
    """Item ``i`` of ``c`` with both outputs and scores (and, for a multiple-choice item, each choice's log-probs)."""
    b, k = c.pairs[i]
    out = {"kind": kind, "item_id": b.item_id, "item_hash": b.item_hash, "prompt": b.prompt, "target": b.target,
           "baseline_output": b.output, "candidate_output": k.output,
           "baseline_score": b.score, "candidate_score": k.score}
    sid = b.source_id if b.source_id is not None else k.source_id  # one side may come from an older store entry
    if sid is not None:
        out["source_id"] = sid
    if b.thought is not None or k.thought is not None:
        out["baseline_thought"], out["candidate_thought"] = b.thought, k.thought
    if b.images:
        out["images"] = [_image(im) for im in b.images]
    if b.choices and k.choices:
        out["choices"] = [{"continuation": cb["continuation"], "baseline_logprob": cb["logprob"],
                           "candidate_logprob": ck["logprob"], "gold": cb["continuation"] == b.target}
                          for cb, ck in zip(b.choices, k.choices)]
    return out


# A thumbnail the report embeds: a base64 PNG data: URI (what ``suites.pages.thumbnail_data_uri`` writes), at most
# 64 KiB; anything else in a stored record is shown as its hash only.
_THUMBNAIL = re.compile(r"data:image/png;base64,[A-Za-z0-9+/]+={0,2}")
_THUMBNAIL_MAX = 64 * 1024


def _image(im: dict[str, Any]) -> dict[str, Any]:
    """An item's image for the report: its ``sha256`` and its ``thumbnail`` only when it is a well-formed PNG data URI
    (else None)."""
    thumb = im.get("thumbnail")
    ok = isinstance(thumb, str) and len(thumb) <= _THUMBNAIL_MAX and _THUMBNAIL.fullmatch(thumb) is not None
    return {"sha256": str(im.get("sha256", "")), "thumbnail": thumb if ok else None}


def _diff_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, str]]:
    """``gate.effective_diff`` as rows of ``repr`` strings (``(unset)`` for a key on one side only)."""
    return [{"key": key, "baseline": "(unset)" if va is gate.MISSING else repr(va),
             "candidate": "(unset)" if vb is gate.MISSING else repr(vb)}
            for key, (va, vb) in sorted(gate.effective_diff(a, b).items())]
