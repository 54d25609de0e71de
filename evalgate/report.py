"""The gate's outputs for people and machines: one JSON document, rendered as HTML and as a terminal table.

``gate_document`` turns the decision and the paired comparisons into a plain, JSON-able document
(written as ``verdict.json``); ``render_html`` and ``render_terminal`` only read that document, so a
report can be re-rendered from a stored run. Model outputs are untrusted: the HTML template is rendered
with autoescape on, and the page carries no script at all.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from evalgate.compare import TaskComparison
from evalgate.evidence import as_dict, spec_decode_health, task_evidence
from evalgate.gate import (MISSING, Decision, TaskDecision, Verdict, effective_diff, escalate, spec_decode_floor_failures,
                           speed_floor_failures)
from evalgate.outputs import NO_OP_NOTE, SPEC_SOURCE_NOTE, floor_note, items_needed_short, shown_verdict
from evalgate.plot import delta_plot, kl_curve, sweep_plot, tradeoff_plot
from evalgate.power import items_needed, items_needed_basis

DOCUMENT_VERSION = 1


def gate_document(decision: Decision, comparisons: list[TaskComparison], manifest: dict[str, Any], *,
                  spec_floors: Any = None, near_tie: float = 0.0, speed: dict[str, Any] | None = None,
                  speed_floors: Any = None) -> dict[str, Any]:
    """The verdict as a JSON-able document.

    Args:
        decision: from ``gate.decide``.
        comparisons: from ``compare.compare_tasks`` (same tasks as the decision).
        manifest: run metadata: ``baseline``/``candidate`` (name, requested, effective), suites, versions, timings.
        spec_floors: ``thresholds.SpecDecodeFloors`` for the candidate (None: no floors); a missed floor BLOCKs.
        near_tie: nats (``thresholds.near_tie_logprob``); each task lists as ``tie_flips`` the differing items whose
            first flip was within it (numerics), for lossy configs too.
        speed: the measured ``speed`` block (``speed.speed_block``, or a failed one), None when speed was not
            measured (the document then has no ``speed`` key, as before).
        speed_floors: ``thresholds.SpeedFloors`` for the candidate; a missed ``min_speedup``/``max_slowdown`` BLOCKs.
    Returns:
        ``{"version", "verdict", "reasons", "tasks": [...], "config_diff", "effective_diff", "manifest"}``;
        each task holds its statistics (points), threshold, verdict, its flipped items (regressions
        first) with prompt, target, both outputs and both scores, and (``changed_outputs``) the items
        whose output changed but whose score did not.
    """
    spec = {role: spec_decode_health(manifest[role].get("spec_decode") or {}) for role in ("baseline", "candidate")}
    # Output health is tested per task for three indicators; Bonferroni keeps the run's false-BLOCK rate from
    # health shifts at most alpha (the smallest task alpha), however many tasks run.
    lossless = manifest.get("candidate", {}).get("expect") == "lossless"
    alphas = [td.threshold.alpha for td in decision.tasks] or [0.05]
    health_alpha = min(alphas) / (3 * max(1, len(comparisons)))
    evidence = {c.task: task_evidence(c.pairs, spec["candidate"], lossless=lossless, health_alpha=health_alpha)
                for c in comparisons}
    # Evidence that always fails a candidate (NaN/inf log-probs, degenerate outputs) overrides the accuracy verdict.
    failures = {t: e["failures"] for t, e in evidence.items()}
    cand_sd = spec["candidate"]
    speculative = bool((manifest.get("candidate", {}).get("effective") or {}).get("engine_args", {}).get(
        "speculative_config"))
    missed = [] if spec_floors is None else spec_decode_floor_failures(
        None if cand_sd is None else cand_sd.acceptance_rate, None if cand_sd is None else cand_sd.mean_acceptance_length,
        min_acceptance_rate=spec_floors.min_acceptance_rate,
        min_mean_acceptance_length=spec_floors.min_mean_acceptance_length, speculative=speculative)
    if missed:
        failures["speculative decoding"] = missed
    if speed is not None and speed.get("status") == "measured" and speed_floors is not None:
        slow = speed_floor_failures(speed.get("levels", []), expect=manifest.get("candidate", {}).get("expect", "lossy"),
                                    min_speedup=speed_floors.min_speedup, max_slowdown=speed_floors.max_slowdown)
        if slow:
            failures["speed"] = slow
    decision = escalate(decision, failures)
    by_task = {c.task: c for c in comparisons}
    tasks = []
    for td in decision.tasks:
        c, cmp = by_task[td.task], td.comparison
        flips = [_flip(c, i, "regressed") for i in c.regressed] + [_flip(c, i, "improved") for i in c.improved]
        flipped = set(c.regressed) | set(c.improved)
        changed = [_flip(c, i, "changed") for i, (b, k) in enumerate(c.pairs)
                   if b.output != k.output and i not in flipped]
        tasks.append({
            "suite": td.suite, "task": td.task, "metric": c.metric, "verdict": td.verdict.value, "reason": td.reason,
            "n": cmp.n, "baseline": cmp.baseline_mean, "candidate": cmp.candidate_mean, "delta": cmp.delta,
            "ci_low": cmp.ci_low, "ci_high": cmp.ci_high, "ci_level": 1 - 2 * td.threshold.alpha,
            "lower_bound": cmp.lower_bound, "margin": td.threshold.margin, "margin_source": td.threshold.source,
            "alpha": td.threshold.alpha, "method": cmp.method, "binary": cmp.binary, "mcnemar_p": _num(cmp.mcnemar_p),
            "stderr": _num(cmp.stderr), "n_regressed": cmp.n_regressed, "n_improved": cmp.n_improved,
            "identical_outputs": c.identical_outputs, "flipped": flips, "changed_outputs": changed,
            "tie_flips": list(c.agreement(near_tie).tie_flips),
            **_decision_fields(td), "gated": decision.verdict is not Verdict.NO_OP, "evidence": evidence[td.task],
        })
    base, cand = manifest["baseline"], manifest["candidate"]
    reasons = list(decision.reasons)
    if decision.verdict is Verdict.NO_OP:
        reasons += _not_applied(base.get("requested") or {}, cand.get("requested") or {}, cand.get("effective") or {})
    doc = {
        "version": DOCUMENT_VERSION,
        "verdict": decision.verdict.value,
        "reasons": reasons,
        "tasks": tasks,
        "config_diff": _diff_rows(base["requested"], cand["requested"]),
        "effective_diff": _diff_rows(base["effective"], cand["effective"]),
        "spec_decode": {role: as_dict(h) for role, h in spec.items()},
        # Where the candidate's acceptance counts came from (runner.ConfigRun.evidence_sources); None when none.
        "spec_decode_source": (cand.get("evidence_sources") or {}).get("spec_decode"),
        "manifest": manifest,
    }
    if speed is not None:
        doc["speed"] = {**speed, "thresholds": None if speed_floors is None else {
            "min_speedup": speed_floors.min_speedup, "max_slowdown": speed_floors.max_slowdown}}
    return doc


def _decision_fields(td: TaskDecision) -> dict[str, Any]:
    """Power, the rule applied and the cross-check intervals of one task (points; None for NaN)."""
    cmp, agree = td.comparison, td.lossless
    return {
        "mde": _num(td.mde), "power": _num(td.power), "rule": td.rule, **_items_needed(td),
        "discordant": cmp.n_regressed + cmp.n_improved, "n_clusters": cmp.n_clusters,
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


def _items_needed(td: TaskDecision) -> dict[str, Any]:
    """``items_needed`` (items for MDE <= margin) and ``items_needed_basis``: ``"discordance"`` when extrapolated
    from the items that changed, ``"floor"`` when none changed (a lower bound, not an estimate; ``power``)."""
    cmp = td.comparison
    changed = cmp.n_regressed + cmp.n_improved
    alpha = cmp.alpha if math.isfinite(cmp.alpha) else td.threshold.alpha
    if cmp.n >= 1 and 0 < td.power < 1 and 0 < alpha < 0.5:
        need = items_needed(cmp.se_power, cmp.n, td.threshold.margin, alpha, td.power, discordant=changed)
    else:
        need = td.items_needed
    return {"items_needed": need, "items_needed_basis": items_needed_basis(need, changed)}


def _not_applied(base_requested: dict[str, Any], cand_requested: dict[str, Any],
                 cand_effective: dict[str, Any]) -> list[str]:
    """For a NO-OP: one sentence per requested difference, with what the engine applied instead, e.g.
    ``engine_args.async_scheduling: requested True (baseline: <absent>), but the engine applied False to both``."""
    out = []
    for key, (b, c) in sorted(effective_diff(base_requested, cand_requested).items()):
        value: Any = cand_effective
        for part in key.split("."):  # the same dotted key in the engine's read-back
            value = value.get(part, MISSING) if isinstance(value, dict) else MISSING
        shown = "not reported" if value is MISSING else repr(value)
        out.append(f"{key}: requested {c!r} (baseline: {b!r}), but the engine applied {shown} to both")
    return out


def _flip(c: TaskComparison, i: int, kind: str) -> dict[str, Any]:
    b, k = c.pairs[i]
    out = {"kind": kind, "item_id": b.item_id, "item_hash": b.item_hash, "prompt": b.prompt, "target": b.target,
           "baseline_output": b.output, "candidate_output": k.output,
           "baseline_score": b.score, "candidate_score": k.score}
    if b.choices and k.choices:  # a multiple-choice item: each choice's log-prob on both sides
        out["choices"] = [{"continuation": cb["continuation"], "baseline_logprob": cb["logprob"],
                           "candidate_logprob": ck["logprob"], "gold": cb["continuation"] == b.target}
                          for cb, ck in zip(b.choices, k.choices)]
    return out


def _diff_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, str]]:
    rows = []
    for key, (va, vb) in sorted(effective_diff(a, b).items()):
        rows.append({"key": key, "baseline": "(unset)" if va is MISSING else repr(va),
                     "candidate": "(unset)" if vb is MISSING else repr(vb)})
    return rows


def _num(x: float) -> float | None:
    return None if x is None or math.isnan(x) else x


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
    env = Environment(loader=PackageLoader("evalgate", "templates"), autoescape=select_autoescape(default=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["pts"] = lambda x, signed=True: "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) \
        else (f"{x:+.1f}" if signed else f"{x:.1f}").replace("-", "\u2212")
    env.globals["highlight"] = _highlight
    env.globals["delta_plot"] = delta_plot
    env.globals["kl_curve"] = kl_curve
    env.globals["tradeoff_plot"] = tradeoff_plot
    env.globals["sweep_plot"] = sweep_plot
    env.globals["tradeoff_points"] = tradeoff_points
    env.globals["sweep_rows"] = sweep_rows
    env.globals["review_items"] = review_items
    env.globals["items_needed_short"] = items_needed_short
    env.globals["floor_note"] = floor_note
    env.globals["shown_verdict"] = shown_verdict
    env.globals["NO_OP_NOTE"] = NO_OP_NOTE
    env.globals["spec_source_note"] = SPEC_SOURCE_NOTE
    return env


def tradeoff_points(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One trade-off point per task: the run's headline speed-up (first concurrency level) and the task's Δ."""
    sp = doc.get("speed") or {}
    return [{"label": t["task"], "ratio": sp.get("ratio"), "ratio_low": sp.get("ci_low"), "ratio_high": sp.get("ci_high"),
             "delta": t.get("delta"), "delta_low": t.get("ci_low"), "delta_high": t.get("ci_high"),
             "verdict": t.get("verdict")} for t in doc.get("tasks", [])]


def sweep_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The speed-up per concurrency level of one run, as ``plot.sweep_plot`` rows."""
    name = doc.get("manifest", {}).get("candidate", {}).get("name", "candidate")
    return [{"series": name, **{k: r.get(k) for k in ("concurrency", "ratio", "ci_low", "ci_high")}}
            for r in (doc.get("speed") or {}).get("levels", [])]


def review_items(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every changed item across tasks in review order: regressions (largest drop first), then improvements,
    then outputs that changed without a score change. Each item gains ``suite`` and ``task``."""
    rank = {"regressed": 0, "improved": 1, "changed": 2}
    items = [{**f, "suite": t["suite"], "task": t["task"]} for t in doc["tasks"]
             for f in [*t.get("flipped", []), *t.get("changed_outputs", [])]]
    return sorted(items, key=lambda f: (rank.get(f["kind"], 3), -abs(f["candidate_score"] - f["baseline_score"]),
                                        f["task"], f["item_id"]))


def render_html(doc: dict[str, Any]) -> str:
    """One self-contained HTML page (inline CSS, no scripts, no external resources) for ``doc``."""
    return _env().get_template("report.html.j2").render(doc=doc)


def render_terminal(doc: dict[str, Any]) -> str:
    """A compact plain-text table of ``doc`` for the terminal."""
    head = (f"{'suite/task':34} {'n':>5} {'base':>6} {'cand':>6} {'delta':>6} {'CI':>15} {'MDE':>6} {'margin':>6}"
            "  verdict (rule)")
    lines = [head, "-" * len(head)]
    for t in doc["tasks"]:
        ci = f"[{t['ci_low']:+.1f}, {t['ci_high']:+.1f}]"
        mde = "n/a" if t.get("mde") is None else f"{t['mde']:.1f}"
        rule = f" ({t['rule'].split(':')[0]})" if t.get("rule") else ""
        shown = f"{t['verdict']}{rule}"
        if shown_verdict(doc, t)[0] != t["verdict"]:
            shown = f"NO-OP, not gated (statistics: {t['verdict']}{rule.replace(' (', ', ').rstrip(')')})"
        lines.append(f"{t['suite'] + '/' + t['task']:34} {t['n']:>5} {t['baseline']:>6.1f} {t['candidate']:>6.1f} "
                     f"{t['delta']:>+6.1f} {ci:>15} {mde:>6} {t['margin']:>6.1f}  {shown}")
    if doc.get("speed"):
        from evalgate.speed import headline

        lines.append(headline(doc["speed"]))
    lines.append("")
    lines.append(f"VERDICT: {doc['verdict']}")
    lines.extend(f"  - {r}" for r in doc["reasons"])
    return "\n".join(lines)
