"""Plain records that flow one way: runner -> store -> stats/gate -> report.

Scores are per item in [0, 1] (1 = fully correct). Everything downstream of ``stats`` reports
differences in *points* (percentage points, 0-100 scale).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class ItemResult:
    """One evaluated item of one task, as lm-eval logged it.

    Attributes:
        task: lm-eval task name, e.g. ``"docparse_fields"``.
        item_id: lm-eval ``doc_id`` (0-based position in the task's evaluation split).
        item_hash: lm-eval ``doc_hash`` (sha256 of the item); pairs baseline and candidate items.
        prompt: the exact text sent to the engine.
        target: the reference answer, as text.
        output: the engine's raw generation (untrusted).
        score: the task's primary metric for this item, in [0, 1].
        metrics: every per-item metric lm-eval computed, by name.
        n_tokens: tokens the engine generated for this item (None when unknown).
        divergence: for a candidate item, ``evidence.LogitDivergence`` as a dict (KL along the baseline's
            output under the candidate engine, teacher-forced prefill); None when not measured.
        decode: for a candidate item, ``evidence.DecodeDivergence`` as a dict (decode-time log-probs of both
            engines along the tokens they generated alike, and how close to a tie the first flip was); None
            when not measured.
        finish_reason: vLLM's reason the generation ended: "stop" (a stop string or EOS) or "length"
            (hit ``max_tokens``: the output is truncated); None when unknown.
        cluster: the item's source document (the suite's ``doc_group``); items with the same
            cluster are resampled together. None = its own cluster (and in records stored before
            this field existed).
        source_id: the dataset's own id of the item (its doc's ``id``, ``doc_id``, ``uid``, ``qid`` or ``task_id``
            field, the first present, as text; ``engine.suite_eval.SOURCE_ID_FIELDS``); None when its docs carry
            none (and in records stored before this field existed). Shown in the report instead of ``item_id``.
        choices: for a loglikelihood (multiple-choice) item, one dict per choice, in the task's order:
            ``continuation`` (text), ``logprob`` (nats, summed over its tokens), ``is_greedy`` (greedy decoding
            would produce it; None for rolling log-likelihoods), ``n_tokens``; ``output`` is then the most likely
            continuation. None for a generated item.
        thought: with ``chat.think_end``, the reasoning text stripped before scoring (up to and including the last
            end-of-thinking marker; the whole output when truncated), untrusted; None when the output had none.
        thinking_tokens, answer_tokens: with ``chat.think_end``, the thought's and the scored answer's token counts
            (the engine's tokenizer, no special tokens); None without ``think_end``.
        truncated_thought: with ``chat.think_end``, the thought was opened but never closed (the token budget ran
            out): the answer scored is empty.
        images: for an item whose request carried images (lm-eval's ``doc_to_image``), one dict per image, in
            order: ``sha256`` (its content hash, part of ``item_hash`` and of the journal key) and ``thumbnail`` (a
            small PNG as a ``data:`` URI for the report, or None); None for a text-only item.
    """

    task: str
    item_id: int
    item_hash: str
    prompt: str
    target: str
    output: str
    score: float
    metrics: dict[str, float] = field(default_factory=dict)
    n_tokens: int | None = None
    finish_reason: str | None = None
    cluster: str | None = None
    divergence: dict[str, Any] | None = None
    decode: dict[str, Any] | None = None
    choices: tuple[dict[str, Any], ...] | None = None
    source_id: str | None = None
    thought: str | None = None
    thinking_tokens: int | None = None
    answer_tokens: int | None = None
    truncated_thought: bool = False
    images: tuple[dict[str, Any], ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["thinking_tokens"] is None:  # no think_end: records stay as they were
            for k in ("thought", "thinking_tokens", "answer_tokens", "truncated_thought"):
                del d[k]
        if d["choices"] is None:
            del d["choices"]  # generated items' records stay as they were
        else:
            d["choices"] = list(d["choices"])
        if d["source_id"] is None:
            del d["source_id"]  # records of items without a dataset id stay as they were
        if d["images"] is None:
            del d["images"]  # text-only items' records stay as they were
        else:
            d["images"] = list(d["images"])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ItemResult":
        d = dict(d)
        if d.get("choices") is not None:
            d["choices"] = tuple(d["choices"])
        if d.get("images") is not None:
            d["images"] = tuple(d["images"])
        return cls(**d)


@dataclass(frozen=True)
class TaskResult:
    """All items of one task for one engine configuration.

    Attributes:
        task: lm-eval task name.
        suite: the evalgate suite (folder under ``suites/``) the task belongs to.
        metric: name of the primary metric (``score`` of each item).
        items: per-item results, ordered by ``item_id``.
    """

    task: str
    suite: str
    metric: str
    items: tuple[ItemResult, ...]

    @property
    def score(self) -> float:
        """Mean primary metric in points (0-100); NaN for an empty task."""
        if not self.items:
            return float("nan")
        return 100.0 * sum(i.score for i in self.items) / len(self.items)
