"""The verdict document (``verdict.json``) as a typed, versioned model: written from it, read back into it.

``evalgate run``/``compare``/``ablate`` build a :class:`Verdict` (``evalgate.report.document.build_verdict``) and write
``Verdict.to_dict()``; ``evalgate report RUN_DIR``, ``evalgate compare`` and every renderer (HTML, JUnit, Markdown,
terminal, plots) read it back with :func:`as_verdict`. The JSON keys and values are those evalgate has always
written (``version`` 1). A document only ever gained keys, so every field has a default meaning "not recorded"
(a missing verdict reads as BLOCK: fail closed); an old document reads as it was written and dumps back to the
same keys and values, and unknown keys are kept. Numbers keep their JSON type (an integer margin stays ``2``,
not ``2.0``). Points are percentage points (0-100 scale); shares are 0..1; KL is in nats.

Every part is a ``results.document.Record``. The ``speed`` block's parts are the speed stage's own records
(``evalgate.speed.block``: ``SpeedBlock`` and its levels, sides, latencies, goodput, precision and thresholds; its
``profile`` is ``evalgate.speed.profile.TrafficProfile``), which the gate and the economics read before the verdict
exists, and so are the ``economics`` block's
(``evalgate.speed.economics``: ``EconomicsBlock``, ``EconomicsLevel``, ``EconomicsSide``), which the ablation's rows
carry to ``gate.recommend``; they are re-exported here under the same names. The ``manifest`` is the run manifest's
own model (``evalgate.results.manifest.Manifest``, what ``manifest.json`` holds), read as the document holds it
(``Manifest.from_document``: a required key a hand-built or foreign document lacks is not recorded, never refused).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from evalgate.compare import power
from evalgate.results.document import Number
from evalgate.results.document import Record as _Record
from evalgate.results.document import described as _f
from evalgate.results.document import described_list as _list
from evalgate.results.manifest import Manifest, Side
from evalgate.speed.block import (
    MeasuredSide,
    SpeedBlock,
    SpeedGoodput,
    SpeedLatency,
    SpeedLevel,
    SpeedPrecision,
    SpeedSide,
    SpeedThresholds,
)
from evalgate.speed.economics import EconomicsBlock, EconomicsLevel, EconomicsSide

__all__ = ["Choice", "CrossCheck", "DecodeSummary", "DiffRow", "Divergence", "EconomicsBlock", "EconomicsLevel",
           "EconomicsSide", "Evidence", "Flip", "HealthShares", "HealthShift", "Lossless", "MeasuredSide", "Number",
           "PositionBucket", "PrefillSummary", "Reasoning", "ReplayBlock", "ReplayRequest", "ReplayRuleRow",
           "SpecDecodeCounts", "SpeedBlock", "SpeedGoodput", "SpeedLatency", "SpeedLevel", "SpeedPrecision",
           "SpeedSide", "SpeedThresholds", "TaskVerdict", "TokenDiff", "VERSION", "Verdict",
           "VerdictName", "as_task", "as_verdict"]

VERSION = 1
VerdictName = Literal["PASS", "BLOCK", "NO-OP", "INCONCLUSIVE"]


class DiffRow(_Record):
    """One engine-config key that differs between the sides (``gate.effective_diff``)."""

    key: str = _f("dotted key, e.g. ``engine_args.dtype``", "")
    baseline: str = _f("the baseline's value as Python ``repr``, or ``(unset)``", "")
    candidate: str = _f("the candidate's value as Python ``repr``, or ``(unset)``", "")


class Choice(_Record):
    """One choice of a multiple-choice (log-likelihood) item on both sides."""

    continuation: str = _f("the choice's text", "")
    baseline_logprob: Number | None = _f("log-prob of the choice under the baseline, nats (summed over tokens)")
    candidate_logprob: Number | None = _f("log-prob of the choice under the candidate, nats")
    gold: bool = _f("the choice is the reference answer", False)


class Flip(_Record):
    """One item whose score (``regressed``/``improved``) or only its output (``changed``) changed."""

    kind: Literal["regressed", "improved", "changed"] = _f("what changed", "changed")
    item_id: int = _f("lm-eval ``doc_id``", 0)
    item_hash: str = _f("lm-eval ``doc_hash`` (pairs the sides)", "")
    source_id: str | None = _f("the dataset's own id of the item (its doc's ``id``, ``doc_id``, ``uid``, ``qid`` or "
                               "``task_id``; untrusted when rendered); absent when its docs carry none")
    prompt: str = _f("the exact text sent to the engine (untrusted when rendered)", "")
    target: str = _f("the reference answer", "")
    baseline_output: str = _f("the baseline's generation (untrusted)", "")
    candidate_output: str = _f("the candidate's generation (untrusted)", "")
    baseline_score: Number = _f("the baseline's primary metric, 0..1", 0.0)
    candidate_score: Number = _f("the candidate's primary metric, 0..1", 0.0)
    choices: list[Choice] | None = _f("per choice of a multiple-choice item; absent for a generated item")
    baseline_thought: str | None = _f("the baseline's stripped thought (``chat.think_end``; untrusted), None if none")
    candidate_thought: str | None = _f("the candidate's stripped thought (untrusted), None if none")


class CrossCheck(_Record):
    """The other intervals of Δ, points, ``[low, high]`` (None where undefined), for comparison with the one gated."""

    bootstrap: list[Number | None] = _list("paired (cluster) bootstrap percentile interval")
    t: list[Number | None] = _list("paired t interval")
    newcombe: list[Number | None] = _list("Newcombe's paired-proportion interval (0/1 scores)")


class Lossless(_Record):
    """Output agreement of a task of a candidate declared ``expect: lossless`` (``gate.OutputAgreement``)."""

    identical: int = _f("items with byte-identical outputs", 0)
    n: int = _f("items compared", 0)
    share: Number | None = _f("agreeing share (identical or near-tie flips), 0..1; NaN for no items")
    required_share: Number | None = _f("``min_identical_share`` the gate required, 0..1")
    differing_items: list[int] = _list("``item_id`` of each item whose outputs differ")
    tie_flips: list[int] = _list("differing items whose first flip was a near-tie (count as agreeing)")
    kl_mean: Number | None = _f("token-weighted decode-time KL(baseline || candidate), nats/token; None: not measured")


class HealthShares(_Record):
    """Output-health shares of one side of one task (``evidence.OutputHealth``), 0..1."""

    n: int = _f("items", 0)
    truncated: Number | None = _f("share that hit ``max_tokens`` (vLLM ``finish_reason == 'length'``)")
    empty: Number | None = _f("share with an empty or whitespace output")
    unparseable: Number | None = _f("share failing the task's format metric; None when the task has none")
    degenerate: Number | None = _f("share with a 1-8 character unit repeated 12 or more times")


class HealthShift(_Record):
    """Paired change of one health indicator (``evidence.HealthShift``)."""

    kind: str = _f("``degenerate``, ``empty`` or ``truncated``", "")
    worse: int = _f("items healthy under the baseline, unhealthy under the candidate", 0)
    better: int = _f("the reverse", 0)
    p: Number = _f("one-sided exact McNemar p of 'the candidate is unhealthy more often'", 1.0)


class Divergence(_Record):
    """Greedy identity of one task's outputs (``evidence.Divergence``); offsets in characters of decoded text."""

    n: int = _f("paired items", 0)
    identical_share: Number | None = _f("share of items with byte-identical outputs, 0..1")
    first_divergence: list[int] = _list("per differing item, the character offset of the first difference")
    curve: list[Number] = _list("share of items still identical up to each of ``offsets``")
    offsets: list[int] = _list("the character offsets of ``curve``")


class PrefillSummary(_Record):
    """Teacher-forced next-token divergence along the baseline's output (``evidence.prefill_summary``), nats."""

    items: int = _f("items scored", 0)
    kl_mean: Number | None = _f("mean of the items' mean KL(baseline || candidate)")
    kl_p99: Number | None = _f("largest item 99th-percentile KL")
    kl_max: Number | None = _f("largest KL at any position")
    top1_agreement: Number | None = _f("token-weighted share of positions with the same top-ranked token")
    max_abs_dlogprob: Number | None = _f("largest |log p_base(t) − log p_cand(t)| for the baseline's token t")
    nonfinite_items: int = _f("items whose candidate gave a NaN or +inf log-prob (always a failure)", 0)
    kl_by_position: list[Number] = _list("mean KL over the items at each output position")


class DecodeSummary(_Record):
    """Decode-time next-token divergence along the tokens both sides generated alike (``evidence.decode_summary``)."""

    items: int = _f("items with a decode record", 0)
    positions: int = _f("compared positions over the items left in the means", 0)
    kl_mean: Number | None = _f("token-weighted mean KL(baseline || candidate), nats/token")
    kl_max: Number | None = _f("largest KL at any compared position, nats")
    top1_agreement: Number | None = _f("token-weighted share of positions with the same top-ranked token")
    max_abs_dlogprob: Number | None = _f("largest |log p_base(t) − log p_cand(t)| for the baseline's token t")
    nonfinite_items: int = _f("items whose candidate recorded a NaN or +inf log-prob (always a failure)", 0)
    unscored_items: int = _f("items left out of the means (a non-finite KL)", 0)
    mean_common_prefix: Number | None = _f("mean number of leading output tokens identical on both sides")
    tie_gaps: dict[str, Number | None] = Field(default_factory=dict, description=(
        "per differing item (``item_id``), the baseline's log-prob gap between its token and the candidate's at the "
        "first flip, nats; None when not a near-tie"))
    kl_by_position: list[Number] = _list("mean KL over the items compared at each output position")
    items_by_position: list[int] = _list("how many items each ``kl_by_position`` value covers")


class PositionBucket(_Record):
    """Quality, identity and decode KL in one bucket ``[lo, hi)`` of output tokens (``evidence.position_buckets``)."""

    lo: int = _f("first output token of the bucket", 0)
    hi: int | None = _f("end of the bucket (exclusive); None: open")
    reaching: int = _f("items whose baseline output is longer than ``lo`` tokens", 0)
    identical_share: Number | None = _f("share of those the candidate reproduced through the bucket; None: unknown")
    kl_mean: Number | None = _f("mean decode-time KL over the bucket's compared positions, nats/token")
    kl_positions: int = _f("how many positions that mean covers", 0)
    metric: str | None = _f("the per-item metric that scores the bucket (``pos_<lo>_<hi>``), None when none")
    scored: int = _f("items scored in the bucket on both sides", 0)
    baseline: Number | None = _f("baseline quality in the bucket, points")
    candidate: Number | None = _f("candidate quality in the bucket, points")
    delta: Number | None = _f("candidate − baseline in the bucket, points")


class Evidence(_Record):
    """Engine evidence of one task beside its accuracy (``evidence`` facts, the gate's health judgement)."""

    health: dict[str, HealthShares] = Field(default_factory=dict, description="``baseline``/``candidate`` shares")
    divergence: Divergence | None = _f("greedy identity of the outputs")
    logit: PrefillSummary | None = _f("teacher-forced prefill divergence; None when no item was scored")
    decode: DecodeSummary | None = _f("decode-time divergence; None when not measured")
    by_position: list[PositionBucket] = _list("quality, identity and decode KL per output-token bucket")
    contradictions: list[str] = _list("warnings: evidence that disagrees with itself, health rises not significant")
    health_shifts: list[HealthShift] = _list("paired degenerate / empty / truncated shifts")
    failures: list[str] = _list("what BLOCKs the candidate whatever its accuracy (``gate.health_failures``)")


class TokenDiff(_Record):
    """Per-item token counts of one kind on both sides: means and the paired difference (``reasoning.paired_tokens``)."""

    baseline: Number | None = _f("baseline mean, tokens per item")
    candidate: Number | None = _f("candidate mean, tokens per item")
    delta: Number | None = _f("mean of candidate − baseline per item, tokens")
    ci_low: Number | None = _f("lower end of the interval of delta (paired t), None when n < 2")
    ci_high: Number | None = _f("upper end of that interval")


class Reasoning(_Record):
    """Thinking and answer tokens of one task (``chat.think_end`` set; ``reasoning.reasoning_summary``)."""

    n: int = _f("paired items counted", 0)
    level: Number | None = _f("two-sided level of the intervals", 0.95)
    method: str = _f("how the intervals were computed", "")
    thinking_tokens: TokenDiff | None = _f("tokens of the stripped thought per item")
    answer_tokens: TokenDiff | None = _f("tokens of the scored answer per item")
    truncated_thought: dict[str, int] = Field(default_factory=dict, description="``baseline``/``candidate``: items "
                                              "whose thought never ended (scored as an empty answer)")


class TaskVerdict(_Record):
    """One task: its paired statistics (points), threshold, verdict, rule and changed items."""

    suite: str = _f("the evalgate suite", "")
    task: str = _f("lm-eval task name", "")
    metric: str = _f("the primary metric", "")
    verdict: VerdictName = _f("the task's outcome (PASS, BLOCK or INCONCLUSIVE; kept under a NO-OP run); a task "
                              "without one reads as BLOCK (fail closed)", "BLOCK")
    reason: str = _f("the sentence that explains the verdict", "")
    n: int = _f("paired items", 0)
    baseline: Number | None = _f("baseline mean, points")
    candidate: Number | None = _f("candidate mean, points")
    delta: Number | None = _f("Δ = candidate − baseline, points")
    ci_low: Number | None = _f("lower end of the two-sided (1 − 2 alpha) interval of Δ, points")
    ci_high: Number | None = _f("upper end of that interval, points")
    ci_level: Number | None = _f("its level, 1 − 2 alpha")
    lower_bound: Number | None = _f("the one-sided (1 − alpha) lower confidence bound the gate compares to −margin")
    margin: Number | None = _f("non-inferiority margin, points")
    margin_source: str = _f("where the margin came from (thresholds entry)", "")
    alpha: Number | None = _f("the task's one-sided level")
    method: str = _f("how the interval was computed", "")
    binary: bool = _f("the scores are 0/1", False)
    mcnemar_p: Number | None = _f("two-sided exact McNemar p (0/1 scores); None when undefined")
    stderr: Number | None = _f("standard error of Δ, points")
    n_regressed: int = _f("items the candidate scored lower", 0)
    n_improved: int = _f("items the candidate scored higher", 0)
    identical_outputs: int = _f("items with byte-identical outputs", 0)
    flipped: list[Flip] = _list("regressed then improved items, with prompt, target, both outputs and scores")
    changed_outputs: list[Flip] = _list("items whose output changed but whose score did not")
    tie_flips: list[int] | None = _f("differing items whose first flip was within ``near_tie_logprob``; absent in "
                                     "documents written before near-ties were recorded")
    mde: Number | None = _f("minimum detectable effect at alpha and power, points")
    power: Number | None = _f("the configured power")
    rule: str = _f("which rule produced the verdict (``gate.RULE_*``)", "")
    items_needed: int | None = _f("items for MDE <= margin at this run's discordance")
    items_needed_basis: str | None = _f("``discordance`` (an estimate) or ``floor`` (no item changed: a lower bound)")
    discordant: int | None = _f("items whose score changed")
    n_clusters: int | None = _f("source documents (clusters) among the items")
    loss_p: Number | None = _f("one-sided p of the loss test")
    loss_test: str = _f("which loss test ran", "")
    loss_alpha: Number | None = _f("the loss test's level after Holm's correction")
    loss_shown: bool = _f("the loss test rejected: a loss is shown", False)
    se_power: Number | None = _f("the standard error used for power and MDE, points")
    cross_check: CrossCheck | None = _f("the other intervals of Δ")
    lossless: Lossless | None = _f("output agreement when the candidate is declared lossless, else None")
    gated: bool = _f("the task counts toward the verdict (False under NO-OP)", True)
    evidence: Evidence | None = _f("engine evidence; None in documents written before it existed")
    reasoning: Reasoning | None = _f("thinking and answer tokens per side (``chat.think_end``); None without it")

    def items_needed_figure(self) -> tuple[int | None, str | None]:
        """``(items, basis)`` for MDE <= margin; ``(None, None)`` without a figure.

        A document written before ``items_needed_basis`` existed stored the extrapolated SE floor when no item
        changed; its figure is recomputed from its own statistics (``power.items_needed``).
        """
        need, basis = self.items_needed, self.items_needed_basis
        if need is not None and basis is None:
            try:
                need = power.items_needed(self.se_power, self.n, self.margin, self.alpha, self.power,
                                          discordant=self.discordant)
            except (TypeError, ValueError):
                pass
            basis = power.items_needed_basis(need, self.discordant)
        return need, basis


class SpecDecodeCounts(_Record):
    """vLLM's speculative-decoding counters of one side over the run (``evidence.SpecDecodeHealth``)."""

    drafts: Number = _f("``spec_decode_num_drafts``", 0.0)
    draft_tokens: Number = _f("``spec_decode_num_draft_tokens``", 0.0)
    accepted_tokens: Number = _f("``spec_decode_num_accepted_tokens``", 0.0)
    acceptance_rate: Number | None = _f("accepted / draft tokens, 0..1")
    mean_acceptance_length: Number | None = _f("1 + accepted / drafts (tokens per target step)")


class ReplayRequest(_Record):
    """One replayed request whose outputs differ (or whose JSON validity or tool call changed), side by side.
    With ``replay.redact`` only its hash and lengths are kept: ``prompt`` and both outputs are None."""

    line: int = _f("the request's line (or record) in the log", 0)
    request_sha256: str = _f("SHA-256 of the request as replayed (its kind and messages or prompt, as JSON)", "")
    prompt: str | None = _f("the request's messages (``role: content`` per line) or prompt; None when redacted")
    prompt_chars: int = _f("characters of ``prompt`` (also when redacted)", 0)
    baseline_output: str | None = _f("the baseline's answer; None when redacted")
    candidate_output: str | None = _f("the candidate's answer; None when redacted")
    baseline_tokens: int = _f("output tokens of the baseline", 0)
    candidate_tokens: int = _f("output tokens of the candidate", 0)
    identical: bool = _f("the outputs are identical", False)
    near_tie: bool = _f("the first differing token was a near-tie (counted as agreeing)", False)
    first_divergence: int | None = _f("first differing output token position, 0-based; None when identical")
    tie_gap: Number | None = _f("the baseline's log-prob gap at the first divergence, nats; None when identical, or "
                                "when the candidate's token is not in the baseline's top-k (or one output stops)")
    kl_mean: Number | None = _f("decode-time KL(baseline || candidate) along the common prefix, nats/token")
    json_valid: list[bool] | None = _f("``[baseline, candidate]`` valid JSON; None when the request asks for none")
    tool_names: list[str | None] | None = _f("``[baseline, candidate]`` tool called; None when no tools offered")


class ReplayRuleRow(_Record):
    """One replay rule's outcome (``gate.replay``)."""

    rule: str = _f("which rule", "")
    verdict: str = _f("PASS, BLOCK or INCONCLUSIVE", "BLOCK")
    reason: str = _f("the sentence that explains it", "")


class ReplayBlock(_Record):
    """The replay gate (``thresholds.yaml`` ``replay``): recorded requests replayed greedily on both sides."""

    verdict: str = _f("the replay verdict: PASS, BLOCK or INCONCLUSIVE (joined into the run's)", "BLOCK")
    rules: list[ReplayRuleRow] = _list("each rule that applied")
    log: dict[str, Any] = Field(default_factory=dict, description=(
        "the log: ``path``, ``sha256``, ``requests`` read, ``replayed``, ``only``, ``limit``, ``max_tokens``, "
        "``sampling``"))
    redact: bool = _f("``replay.redact``: prompts and outputs left out of the report", False)
    requests: int = _f("requests replayed", 0)
    identical: int = _f("requests with identical outputs", 0)
    agreeing: int = _f("identical, or differing only after a near-tie", 0)
    tie_flips: int = _f("differing only after a near-tie", 0)
    share: Number | None = _f("agreeing / requests, 0..1")
    share_lower: Number | None = _f("its one-sided Clopper-Pearson lower bound")
    share_upper: Number | None = _f("its one-sided Clopper-Pearson upper bound")
    floor: Number | None = _f("the agreeing share required")
    alpha: Number | None = _f("the one-sided level of the bounds and the JSON test")
    kl_mean: Number | None = _f("token-weighted decode-time KL along the common prefixes, nats/token")
    first_divergence_median: Number | None = _f("median first divergence position over differing requests, tokens")
    tokens: dict[str, int] = Field(default_factory=dict, description="output tokens per side, summed")
    length_change: Number | None = _f("candidate / baseline output tokens − 1")
    json_output: dict[str, Any] | None = _f("JSON-asking requests: ``requests``, ``schema_requests``, ``valid`` per side, "
                                     "``delta``, ``ci_low``, ``ci_high`` (points), ``loss_p``, ``margin``, "
                                     "``lost``, ``gained``; None when none asks for JSON")
    tools: dict[str, int] = Field(default_factory=dict, description="requests offering tools, and how many agree on "
                                                                    "the tool called")
    changed: list[ReplayRequest] = _list("requests whose outputs, JSON validity or tool call differ")


class Verdict(_Record):
    """The verdict of one gate run: overall outcome, reasons, every task, config diffs, evidence, manifest."""

    version: int = _f("document format version", VERSION)
    verdict: VerdictName = _f("the overall outcome; the exit code follows it. A document without one reads as BLOCK "
                              "(fail closed; ``runs.read_verdict`` refuses a file without it)", "BLOCK")
    reasons: list[str] = _list("one sentence per reason, failures that always block first")
    tasks: list[TaskVerdict] = _list("every task, in the gate's order")
    config_diff: list[DiffRow] = _list("requested engine config (config files), keys that differ")
    effective_diff: list[DiffRow] = _list("effective engine config (as the engine applied it), keys that differ")
    spec_decode: dict[str, SpecDecodeCounts | None] = Field(
        default_factory=dict, description="per side (``baseline``/``candidate``): spec-decode counters or None")
    spec_decode_source: str | None = _f("where the candidate's counts came from (``per_request``, ``engine_counters``, "
                                        "``mixed``); None when none")
    manifest: Manifest = Field(default_factory=lambda: Manifest.from_document({}), description=(
        "the run manifest (``results.manifest.Manifest``, as ``manifest.json``): ``baseline``/``candidate`` (name, "
        "path, expect, requested, effective, ...), model, limit, suites, versions, thresholds, timings; read with "
        "``Manifest.from_document`` (a required key the document lacks is not recorded)"))
    speed: SpeedBlock | None = _f("speed beside the quality delta; absent when speed was not measured")
    economics: EconomicsBlock | None = _f("cost per million output tokens per side and the switch's saving; absent "
                                          "without an ``economics`` section or a speed measurement")
    replay: ReplayBlock | None = _f("the replay gate; absent without a ``replay`` section")

    @field_validator("manifest", mode="before")
    @classmethod
    def _manifest_as_recorded(cls, value: Any) -> Manifest:
        return Manifest.from_document(value)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able document (``verdict.json``): the keys that were set, in the order evalgate writes them."""
        return self.model_dump(exclude_unset=True)

    def side(self, role: Literal["baseline", "candidate"]) -> Side:
        """The manifest entry of ``baseline`` or ``candidate`` (empty when not recorded)."""
        return self.manifest.baseline if role == "baseline" else self.manifest.candidate

    def config_name(self, role: Literal["baseline", "candidate"]) -> str:
        """The config name of ``baseline`` or ``candidate`` (the manifest's ``name``), the role when not recorded."""
        entry = self.side(role)
        return entry.name if "name" in entry.model_fields_set else role


def as_verdict(doc: Verdict | Mapping[str, Any]) -> Verdict:
    """``doc`` as a :class:`Verdict`; a mapping (a read ``verdict.json``) is validated.

    Raises:
        pydantic.ValidationError: the mapping is not a verdict document (e.g. no ``verdict``, a wrong type).
    """
    return doc if isinstance(doc, Verdict) else Verdict.model_validate(doc)


def as_task(t: TaskVerdict | Mapping[str, Any]) -> TaskVerdict:
    """``t`` as a :class:`TaskVerdict` (a mapping is validated)."""
    return t if isinstance(t, TaskVerdict) else TaskVerdict.model_validate(t)
