"""Sentences every renderer shows the same way about a verdict: NO-OP labels, items-needed figures, notes (pure).

Read from the :class:`evalgate.report.verdict.Verdict` only; the HTML report, the Markdown summary, the JUnit file and
the terminal table all call these, so a task reads the same everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalgate.fmt import rule_text
from evalgate.models.embedded import HYBRID_CHAT_MODEL, HYBRID_MODEL
from evalgate.report.verdict import SpeedBlock, SpeedGoodput, TaskVerdict, Verdict, as_task, as_verdict

Doc = Verdict | Mapping[str, Any]
Task = TaskVerdict | Mapping[str, Any]

NO_OP_NOTE = ("NO-OP: no task is gated, because the engine applied the same configuration to both sides; the per-task "
              "statistics, and the outcome they alone would give, are shown for information only")

FLOOR_NOTE = ("\u2265N (floor): no item changed in this run, so there is no discordance to extrapolate from; N is not "
              "an estimate but the fewest items with which any run can be powered for the margin (the SE is never "
              "below 100/N), enough only if (almost) no item changes")


_DEMO_NOTE = ("{model} is evalgate's embedded 5 M-parameter demo model: a PASS on it shows that the "
              "pipeline works, not that a model you serve keeps its quality; gate your own model with a config "
              "of your own (docs/guides/bring-your-own-data.md)")
DEMO_MODEL_NOTE = _DEMO_NOTE.format(model=HYBRID_MODEL)
# The demo hybrid's aliases: the completion-trained checkpoint and its chat fine-tune.
_DEMO_MODELS = (HYBRID_MODEL, HYBRID_CHAT_MODEL)


def side_models(doc: Doc) -> tuple[str | None, str | None]:
    """``(baseline model, candidate model)`` as each side's config requested it (``manifest.<side>.requested.model``),
    else the manifest's ``model`` (the candidate's; a compare's ``a → b``); None when not recorded."""
    doc = as_verdict(doc)
    fallback = doc.manifest.model
    models = []
    for role in ("baseline", "candidate"):
        model = doc.side(role).requested.get("model")
        models.append(str(model) if model is not None else None if fallback is None else str(fallback))
    return models[0], models[1]


def model_words(doc: Doc) -> str:
    """``model M`` when both sides ran the same model, ``baseline model A, candidate model B`` when they differ."""
    base, cand = side_models(doc)
    if base is None and cand is None:
        return "model not recorded"
    if base is None or cand is None or base == cand:
        return f"model {base or cand}"
    return f"baseline model {base}, candidate model {cand}"


def demo_model_note(doc: Doc) -> str | None:
    """:data:`DEMO_MODEL_NOTE` (naming the alias that ran: ``embedded:nemotron-h-tiny`` or its chat fine-tune
    ``embedded:nemotron-h-tiny-chat``) when either side ran the embedded demo hybrid, else None."""
    ran = side_models(doc)
    model = next((m for m in _DEMO_MODELS if m in ran), None)
    return None if model is None else _DEMO_NOTE.format(model=model)


def speed_mde_note(speed: SpeedBlock) -> str:
    """The note under a speed table that explains its MDE column and "needs N repeats", at the block's power
    (``profile.power``; 0.8 in a document written before it was recorded); "" when no level has an MDE."""
    if not any(row.mde_ratio is not None for row in speed.levels):
        return ""
    power = speed.profile.power
    return (f"MDE \u00d7M: the smallest speed-up (or slowdown to \u00d71/M) that these repeats detect with "
            f"{100 * power:.0f} % power at the spread they showed (paired t test); \u201cneeds \u2248N repeats in "
            "all\u201d: the repeats at which that spread would resolve the geometric mean of the paired ratios (an "
            "estimate, not a promise)")


# How the candidate's spec-decode counts were obtained (the verdict's ``spec_decode_source``).
SPEC_SOURCE_NOTE = {
    "per_request": "summed from vLLM's per-request metrics",
    "engine_counters": "engine-wide counters diffed per suite; per-request counts are unavailable on this vLLM",
    "mixed": "per-request metrics for some suites, engine-wide counters for others",
}


def shown_verdict(doc: Doc, t: Task) -> tuple[str, str]:
    """``(label, detail)`` for a task as reports show it.

    Normally the task's verdict and its rule. Under a NO-OP run no task is gated: the label is ``NO-OP`` and the
    detail says so and names the statistical outcome, e.g. ``("NO-OP", "not gated; statistics shown for information:
    INCONCLUSIVE (power: MDE > margin)")``, so an under-powered task of a NO-OP run does not read as a problem.
    """
    doc, t = as_verdict(doc), as_task(t)
    rule = rule_text(t.rule)
    if doc.verdict != "NO-OP":
        return t.verdict, rule
    return "NO-OP", f"not gated; statistics shown for information: {t.verdict}" + (f" ({rule})" if rule else "")


def items_needed_short(t: Task) -> str | None:
    """``"needs ≈110 items"`` or ``"needs ≥125 items (floor)"`` for an under-powered INCONCLUSIVE task (MDE >
    margin), else None: a BLOCK or PASS task is decided, whatever its MDE, so more items would not change it.
    A ``(floor)`` figure is explained by :data:`FLOOR_NOTE`."""
    t = as_task(t)
    need, basis = t.items_needed_figure()
    if t.verdict != "INCONCLUSIVE" or need is None or t.mde is None or not t.mde > t.margin:
        return None
    return f"needs \u2265{need} items (floor)" if basis == "floor" else f"needs \u2248{need} items"


def floor_note(doc: Doc) -> str | None:
    """:data:`FLOOR_NOTE` when some under-powered task of ``doc`` shows a ``(floor)`` items-needed figure, else None
    (also under NO-OP, where no task is gated and reports show no items-needed figure)."""
    doc = as_verdict(doc)
    if doc.verdict == "NO-OP":
        return None
    return FLOOR_NOTE if any((items_needed_short(t) or "").endswith("(floor)") for t in doc.tasks) else None


def spec_decode_line(doc: Doc) -> str | None:
    """One sentence on the candidate's speculative decoding (acceptance and its source), None when it had none."""
    doc = as_verdict(doc)
    sd = doc.spec_decode.get("candidate")
    if not sd:
        return None
    source = doc.spec_decode_source
    note = SPEC_SOURCE_NOTE.get(source, f"source {source}") if source else "source not recorded"
    return (f"Speculative decoding (candidate): {sd.drafts:.0f} drafts, {sd.draft_tokens:.0f} draft tokens, "
            f"{sd.accepted_tokens:.0f} accepted; acceptance rate {100 * sd.acceptance_rate:.1f}%, mean "
            f"acceptance length {sd.mean_acceptance_length:.2f} ({note}).")


def latency_headline(speed: SpeedBlock) -> str:
    """One line per serve-mode block for terminal, Markdown and JUnit (beside ``speed.headline``), e.g.
    ``latency c=2: TTFT p50 ×0.81 [0.74, 0.89] faster (40.1 → 32.5 ms); TPOT p50 ...``; empty without latency."""
    parts = []
    for row in speed.levels:
        lat = row.latency or {}
        items = []
        for name, key in (("TTFT p50", "ttft_p50_ms"), ("TPOT p50", "tpot_p50_ms")):
            m = lat.get(key)
            if m is None or m.ratio is None:
                continue
            ci = f" [{m.ci_low:.2f}, {m.ci_high:.2f}]" if m.ci_low is not None else ""
            items.append(f"{name} \u00d7{m.ratio:.2f}{ci} {m.verdict} ({m.baseline_median:.1f} \u2192 "
                         f"{m.candidate_median:.1f} ms)")
        gp = goodput_words(row.goodput)
        if gp:
            items.append(gp)
        if items:
            parts.append(f"c={row.concurrency}: " + ", ".join(items))
    return "latency " + "; ".join(parts) if parts else ""


def goodput_words(goodput: SpeedGoodput | None) -> str:
    """``goodput 3.10 → 2.95 req/s ×0.95 [0.90, 1.01] (TTFT ≤ 500 ms, TPOT ≤ 50 ms per request)`` for one level's
    ``goodput`` entry (``servespeed.compare_goodput``); "" without one (None, or no baseline median)."""
    if goodput is None or goodput.baseline_median is None:
        return ""
    objectives = ", ".join(f"{k.upper()} \u2264 {v:g} ms" for k, v in goodput.objectives_ms.items())
    ratio = f" \u00d7{goodput.ratio:.2f}" if goodput.ratio is not None else ""
    ci = f" [{goodput.ci_low:.2f}, {goodput.ci_high:.2f}]" if goodput.ci_low is not None else ""
    return (f"goodput {goodput.baseline_median:.2f} \u2192 {goodput.candidate_median:.2f} req/s{ratio}{ci} "
            f"({objectives} per request)")


def slo_rows(speed: SpeedBlock) -> list[dict[str, Any]]:
    """The report's latency-objective table: per measured level and objective set (``speed.thresholds.slos_ms``)
    ``{"concurrency", "objective" ("TTFT p99"), "ceiling_ms", "baseline_ms", "candidate_ms", "met"}`` (ms); ``met``
    is False when the candidate's median exceeds the ceiling or was not measured (as ``gate.slo_failures`` decides).
    Empty for a failed block or without objectives."""
    slos = (speed.thresholds.slos_ms if speed.thresholds is not None else None) or {}
    rows = []
    for row in speed.levels if speed.measured else []:
        latency = row.latency or {}
        for fld, ceiling in slos.items():
            entry = latency.get(fld)
            cand = None if entry is None else entry.candidate_median
            metric, pct = fld.split("_")[:2]
            rows.append({"concurrency": row.concurrency, "objective": f"{metric.upper()} {pct}",
                         "ceiling_ms": ceiling, "baseline_ms": None if entry is None else entry.baseline_median,
                         "candidate_ms": cand, "met": isinstance(cand, (int, float)) and cand <= ceiling})
    return rows


def latency_properties(speed: SpeedBlock) -> list[tuple[str, str]]:
    """JUnit properties of a serve-mode block (beside ``outputs.speed_properties``): per level and latency field
    ``<field>_ratio_c<N>`` (candidate / baseline), ``<field>_ratio_c<N>_ci`` and both medians in ms, and with
    goodput both sides' median req/s and their ratio; empty without latency (offline mode, a failed measurement)."""
    out: list[tuple[str, str]] = []
    for row in speed.levels if speed.measured else []:
        c = row.concurrency
        for f, m in (row.latency or {}).items():
            name = f.removesuffix("_ms")
            out += [(f"{name}_ratio_c{c}", f"{m.ratio:.4f}" if m.ratio is not None else "undefined"),
                    (f"{name}_ratio_c{c}_ci", f"[{m.ci_low}, {m.ci_high}]"),
                    (f"{name}_ms_c{c}_baseline", f"{m.baseline_median:.2f}"),
                    (f"{name}_ms_c{c}_candidate", f"{m.candidate_median:.2f}")]
        gp = row.goodput
        if gp is not None and gp.baseline_median is not None:
            out += [(f"goodput_req_s_c{c}_baseline", f"{gp.baseline_median:.4f}"),
                    (f"goodput_req_s_c{c}_candidate", f"{gp.candidate_median:.4f}"),
                    (f"goodput_ratio_c{c}", f"{gp.ratio:.4f}" if gp.ratio is not None else "undefined")]
    return out


def replay_line(replay: Any) -> str:
    """One line on the replay gate (``verdict.ReplayBlock``): ``replay: PASS: 48/50 requests agree (96.0 %, bounds
    [88.7 %, 99.3 %], floor 95.0 %); valid JSON 10 -> 9 of 10; tools agree 3 of 3``."""
    r = replay
    text = (f"replay: {r.verdict}: {r.agreeing}/{r.requests} requests agree ({100 * (r.share or 0):.1f} %, bounds "
            f"[{100 * (r.share_lower or 0):.1f} %, {100 * (r.share_upper or 0):.1f} %], floor {100 * (r.floor or 0):.1f} %)")
    if r.kl_mean is not None:
        text += f"; decode-time KL {r.kl_mean:.2g} nats/token"
    if r.json_output:
        v = r.json_output["valid"]
        text += f"; valid JSON {v['baseline']} \u2192 {v['candidate']} of {r.json_output['requests']}"
    if r.tools.get("requests"):
        text += f"; tools agree {r.tools['agree']} of {r.tools['requests']}"
    return text
