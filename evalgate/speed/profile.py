"""The traffic profile: the load a speed-up is measured at, one typed model from the thresholds to ``verdict.json``.

``speedup.resolve_profile`` builds it (the platform's default, the thresholds' ``traffic`` keys, the command line),
``measure`` and ``serve`` measure it, and the ``speed`` block records it (``block.SpeedBlock.profile``); the gate,
the report and ``ablate`` read it there. A profile built in code is whole: every field is recorded, and it dumps as
evalgate has always written it (every field in the order below, ``concurrency`` as a list, and ``requests``,
``goodput``, ``precision``, ``max_repeats``, ``max_seconds`` and ``range_ratio`` only when set). A profile read back from a document
(``TrafficProfile.from_document``, as ``SpeedBlock`` reads it) holds what the document held: a failed measurement's
or a hand-built profile may lack even ``input_len``, ``output_len`` or ``concurrency``, which then read as not
recorded (None, 0, empty) and dump back absent.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ConfigDict, Field, ValidationInfo, ValidatorFunctionWrapHandler, field_serializer, model_validator

from evalgate.results.document import Number, Record, Recorded

__all__ = ["PLANNING_POWER", "TrafficProfile"]

PLANNING_POWER = 0.8  # the speed MDE's power unless the profile says otherwise: the thresholds' default ``power``
_ONLY_WHEN_SET = ("requests", "goodput", "precision", "max_repeats", "max_seconds", "range_ratio")  # written only when not None


class TrafficProfile(Recorded, Record):
    """The load a speed-up is measured at (``traffic`` in ``thresholds.yaml``, resolved by
    ``speedup.resolve_profile``), built by keyword: ``TrafficProfile(input_len=512, output_len=512,
    concurrency=(256,))``. Frozen: a changed profile is a new one (:meth:`replace`)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    NOT_RECORDED: ClassVar[dict[str, Any]] = {"input_len": None, "output_len": 0, "concurrency": ()}

    input_len: int | None = Field(description="prompt tokens per request; None with a request log (``prompts: "
                                              "log``: each request's own prompt)")
    output_len: int = Field(description="generated tokens per request (``ignore_eos``: exactly this many); with a "
                                        "request log, the budget of a record without one")
    concurrency: tuple[int, ...] = Field(description="requests in flight at once, one value per level of a sweep "
                                                     "(each <= ``max_num_seqs``); written as a list")
    num_prompts: int | None = Field(None, description="requests per repeat at each level; None = as many as the "
                                                      "level's concurrency (one wave)")
    repeats: int = Field(3, description="timed passes per side and level (>= 1; >= 2 for an interval); with "
                                        "``precision``, Stein's first stage")
    prompts: str = Field("random", description="``random`` (vLLM's RandomDataset), ``suites`` (the suites' own "
                                               "prompts, cut/cycled to ``input_len``) or ``log`` (a request log)")
    mode: str = Field("offline", description="``offline`` (``vllm.LLM`` in the engine worker) or ``serve`` (``vllm "
                                             "serve`` + ``vllm bench serve``)")
    level: Number = Field(0.95, description="the confidence level of the speed-up interval (two-sided)")
    power: Number = Field(PLANNING_POWER, description="the power of the speed-up's MDE and repeats needed (the "
                                                      "thresholds' ``power``; not a traffic key); 0.8 in a document "
                                                      "written before it was recorded")
    requests: dict[str, Any] | None = Field(None, description=(
        "with ``traffic.from``: what the gate read of the request log, ``{path, sha256, requests (in the log), "
        "formats, concurrency: {source, ...}}``; after the measurement also ``sent`` (the worker's summary of the "
        "requests sent: count and token-length quantiles; ``sent_candidate`` when the candidate's tokenizer counted "
        "differently) and ``same_requests``. Never a request's text. Absent otherwise"))
    goodput: dict[str, Number] | None = Field(None, description=(
        "serve mode with latency objectives: the per-request objectives in ms passed to ``vllm bench serve "
        "--goodput`` (``{ttft: 500.0}``; from the thresholds' ``speed`` section); absent otherwise"))
    precision: Number | None = Field(None, description=(
        "``traffic.precision``: the target half-width of the speed-up's interval as a share of the ratio (0.02 = "
        "±2 %), reached by Stein's two-stage rule (``speed.precision``); absent: ``repeats`` pairs, no target"))
    max_repeats: int | None = Field(None, description="with ``precision``, the pairs in all at most (absent: "
                                                      "``precision.pair_cap``'s default)")
    max_seconds: Number | None = Field(None, description="with ``precision``, the speed phase's wall-clock budget in "
                                                         "seconds (absent: no budget)")
    range_ratio: Number | None = Field(None, description=(
        "``traffic.range_ratio``: with ``prompts: random``, each request's prompt and output lengths drawn uniformly "
        "from ``[len * (1 - r), len * (1 + r)]`` (vLLM's ``RandomDataset`` ``range_ratio`` / ``vllm bench "
        "--random-range-ratio``, 0 <= r < 1), so a refilled pass (``num_prompts`` > concurrency) turns requests over "
        "one at a time and reaches a steady state instead of lock-step waves; absent: exact lengths"))

    @model_validator(mode="wrap")
    @classmethod
    def _whole(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        model = handler(data)
        if isinstance(data, dict) and not cls.reading_document(info):  # built whole: every field is recorded
            model.__pydantic_fields_set__.update(cls.model_fields)
        return model

    @field_serializer("concurrency")
    def _concurrency_list(self, value: tuple[int, ...]) -> list[int]:
        return list(value)

    def _serialized(self, out: dict[str, Any]) -> dict[str, Any]:
        """The dumped profile without the options that are None (the keys of a profile without them stay as they
        were)."""
        return {k: v for k, v in out.items() if not (k in _ONLY_WHEN_SET and v is None)}

    def prompts_at(self, concurrency: int) -> int:
        """Requests per repeat at one concurrency level."""
        return self.num_prompts if self.num_prompts is not None else concurrency

    def as_dict(self) -> dict[str, Any]:
        """The profile as ``verdict.json`` records it: the fields recorded (all of a profile built in code), in field
        order, ``concurrency`` as a list, the options above only when set."""
        return self.model_dump(exclude_unset=True)

    def replace(self, **changes: Any) -> TrafficProfile:
        """A copy with ``changes`` applied, validated and whole (``dataclasses.replace`` for this frozen model)."""
        return type(self)(**{**dict(self), **changes})
