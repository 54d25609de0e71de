"""Per-suite evidence the engine worker attaches to its items: decode-time divergence (candidate vs baseline
decode-time log-probs), teacher-forced logit divergence (the baseline's outputs scored under this engine), and the
speculative-decoding counts of the suite. Facts only: nothing here changes a score or decides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalgate.results.records import TaskResult
from evalgate.results.store import GenerationJournal
from evalgate.worker.vllm_engine import SCORE_BATCH


def decode_evidence(reference: dict[str, Any], records: dict[str, Any], tasks: dict[str, TaskResult],
                     keys: dict[tuple[str, int], str]) -> dict[str, TaskResult]:
    """Attach ``evidence.decode_divergence`` (candidate vs baseline decode-time log-probs) to every candidate item.

    ``reference`` is the baseline's generation journal, ``records`` this engine's; both are keyed by request key,
    so the same prompt, stop strings and token budget are compared. Items missing on either side stay without.
    """
    import dataclasses

    from evalgate.compare.evidence import as_dict, decode_divergence

    out = {}
    for name, t in tasks.items():
        items = []
        for item in t.items:
            key = keys.get((name, item.item_id), "")
            base, cand = reference.get(key), records.get(key)
            if base and cand and base.get("top_logprobs") and cand.get("top_logprobs"):
                found = decode_divergence(base["token_ids"], base["top_logprobs"], cand["token_ids"], cand["top_logprobs"])
                item = dataclasses.replace(item, decode=as_dict(found))
            items.append(item)
        out[name] = dataclasses.replace(t, items=tuple(items))
    return out


def logit_evidence(engine: Any, records: dict[str, Any], tasks: dict[str, TaskResult],
                    keys: dict[tuple[str, int], str], spec: dict[str, Any],
                    ref_gens: dict[str, Any] | None) -> dict[str, TaskResult]:
    """Teacher-forced log-probs along the baseline's outputs (see ``VllmEngine.score``).

    A baseline worker scores its own outputs and journals them (``spec["scores"]``); a candidate worker scores
    the baseline's outputs (``ref_gens``: the baseline's generation journal, loaded once per worker) and attaches
    ``evidence.logit_divergence`` to each item. Items without a baseline score are left without one (the report says so); nothing here changes a score.
    Generations from images (their record holds ``images``) are not scored: their prompt token ids hold the image
    placeholders, not the pixels, so a teacher-forced pass over them alone would score another input.
    """
    import dataclasses

    from evalgate.compare.evidence import as_dict, logit_divergence

    k = int(spec.get("logprobs_k", 0))
    if k <= 0:
        return tasks
    cap = int(spec["logprob_items"])
    keys = {ti: key for ti, key in keys.items() if ti[1] < cap}
    if ref_gens is None:  # baseline: score own outputs once
        journal = GenerationJournal(Path(spec["scores"]))
        done = journal.load()
        todo = [key for key in keys.values() if key not in done and records.get(key, {}).get("token_ids")
                and not records[key].get("images")]
        for start in range(0, len(todo), SCORE_BATCH):  # one batched engine submission per journaled group
            group = todo[start:start + SCORE_BATCH]
            scored = engine.score([(records[x]["prompt_token_ids"], records[x]["token_ids"]) for x in group], k)
            journal.append({x: {"positions": [[[t, lp] for t, lp in pos.items()] for pos in sc]}
                            for x, sc in zip(group, scored)})
        return tasks
    ref_scores = GenerationJournal(Path(spec["reference"]["scores"])).load()
    # Every scored baseline output of the suite in one batched scoring call.
    wanted = {key: ref_gens[key] for key in keys.values()
              if key in ref_gens and key in ref_scores and ref_gens[key].get("token_ids")
              and not ref_gens[key].get("images")}
    scored = dict(zip(wanted, engine.score([(g["prompt_token_ids"], g["token_ids"]) for g in wanted.values()], k)))
    out = {}
    for name, t in tasks.items():
        items = []
        for item in t.items:
            key = keys.get((name, item.item_id))  # None beyond the cap: not scored
            if key in scored:
                base = [{int(tok): lp for tok, lp in pos} for pos in ref_scores[key]["positions"]]
                found = logit_divergence(base, scored[key], wanted[key]["token_ids"])
                item = dataclasses.replace(item, divergence=as_dict(found))
            items.append(item)
        out[name] = dataclasses.replace(t, items=tuple(items))
    return out


def suite_spec_decode(records: dict[str, Any], keys: Any, before: dict[str, float],
                       after: dict[str, float]) -> dict[str, Any]:
    """Speculative-decoding counts of one suite, and where they came from, as store-entry fields.

    The sum of its items' per-request counts when the engine recorded them (true for reused journal entries too),
    else the engine-wide counters' change while it ran (vLLM 0.26 has no per-request metrics; those counters then
    also miss requests answered from the journal). Returns ``{"spec_decode": {name: count}, "evidence_sources":
    {"spec_decode": "per_request" | "engine_counters"}}``; the source is omitted when there are no counts at all.
    """
    from evalgate.worker.engine_args import ENGINE_COUNTERS, PER_REQUEST

    per_request = [records[k]["spec_decode"] for k in set(keys) if k in records and records[k].get("spec_decode")]
    if per_request:
        counts = {name: float(sum(r.get(name, 0) for r in per_request)) for name in per_request[0]}
        return {"spec_decode": counts, "evidence_sources": {"spec_decode": PER_REQUEST}}
    counts = {k: after[k] - before.get(k, 0.0) for k in after}
    return {"spec_decode": counts, "evidence_sources": {"spec_decode": ENGINE_COUNTERS} if counts else {}}
