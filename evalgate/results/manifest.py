"""``manifest.json``: what a run ran (configs requested and applied, suites, versions, timings), as a typed model.

The file's keys are unchanged from the untyped dict it replaces (and it is embedded as ``verdict.json``'s
``manifest``, whose keys stay byte-compatible), so the schema version is not written into the file: a manifest
without one is version ``VERSION``. ``evalgate compare`` writes the same model with ``compared_runs`` and each side's
``run_dir``; readers of older or foreign manifests get extra keys kept, never dropped.

The models live here, below every stage, because the stages meet on them: ``evaluate`` builds a run's manifest
(``evalgate.evaluate.manifest.side`` from a ``runner.ConfigRun``, re-exporting these names), the gate
(``gate.judge_run``) and the verdict builder (``report.document.build_verdict``) read it typed, and a stored or
merged manifest (``evalgate compare``) is validated once where it is read (:meth:`Manifest.checked`): whole, every
required field there.

``verdict.json`` embeds the manifest (``report.verdict.Verdict.manifest``), read back with
``Manifest.from_document`` (``results.document.Recorded``): a required field a stored verdict does not hold (a
hand-built or foreign document) is not recorded (``NOT_RECORDED``: empty) and dumps back absent, while a field it
holds must have its type (``manifest.timings: Input should be a valid dictionary``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import ConfigDict, Field, ValidationError
from typing_extensions import TypedDict

from evalgate.errors import StoreError
from evalgate.results.document import Number, Recorded, validation_problem
from evalgate.results.store import read_json

__all__ = ["DeviceIdentity", "Manifest", "Side", "SuiteEntry"]


class DeviceIdentity(TypedDict, total=False):
    """A side's hardware (``engine.device.device_identity``), as the store keys and ``evalgate compare`` read it:
    ``{"platform": "cuda", "gpus": [...]}`` or ``{"platform": "cpu", "cpu": "<model>", "isa": [...]}``. Still a plain
    dict where it is read; typed so that a stored manifest whose device field has the wrong type (``isa: null``,
    ``isa: [5]``) is one line naming the field (exit 3), never an internal error in ``device.describe``. Keys it
    does not name are kept."""

    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]

    platform: str
    cpu: str
    isa: list[str]
    gpus: list[str]


class SuiteEntry(Recorded):
    """One suite run: its name, its tasks and the content hash of its files (the store key part)."""

    model_config = ConfigDict(extra="allow")
    NOT_RECORDED: ClassVar[dict[str, Any]] = {"name": "", "tasks": [], "content_hash": ""}

    name: str = Field(description="suite name (its folder under suites/)")
    tasks: list[str] = Field(description="task names, in the suite's order")
    content_hash: str = Field(description="sha256 over the suite's files (suites.content_hash)")


class Side(Recorded):
    """One side (baseline or candidate) of a run."""

    model_config = ConfigDict(extra="allow")
    NOT_RECORDED: ClassVar[dict[str, Any]] = {"name": ""}

    name: str = Field(description="config name")
    path: str | None = Field(None, description="the config file")
    expect: str | None = Field(None, description="'lossy' or 'lossless' (the config's expectation)")
    requested: dict[str, Any] = Field(default_factory=dict, description="the config's identity as requested")
    effective: dict[str, Any] = Field(default_factory=dict, description="what the engine applied (read back)")
    spec_decode: dict[str, Any] = Field(default_factory=dict, description="speculative-decoding counters, summed")
    evidence_sources: dict[str, str] = Field(default_factory=dict, description="where evidence came from")
    cached_suites: list[str] = Field(default_factory=list, description="suites served from the store")
    generations: dict[str, int] = Field(default_factory=dict, description="requests reused / generated")
    device: DeviceIdentity | None = Field(None, description="the hardware the side ran on "
                                          "(engine.device.device_identity); None in runs made before it was recorded")
    protocol: dict[str, Any] | None = Field(None, description="how prompts were sent (chat.protocol: completion or "
                                            "chat, template sha256, kwargs, system prompt hash); None in runs made "
                                            "before it was recorded (completion)")


class Manifest(Recorded):
    """The run manifest (``manifest.json``). Dumped with ``exclude_unset``: only the keys a run set are written."""

    model_config = ConfigDict(extra="allow")
    VERSION: ClassVar[int] = 1
    NOT_RECORDED: ClassVar[dict[str, Any]] = {
        "created": "", "model": None, "limit": None, "versions": {}, "thresholds": "", "timings": {}, "suites": [],
        "baseline": {}, "candidate": {}}

    created: str = Field(description="the run's UTC time stamp, e.g. 20261201T104705Z")
    model: Any = Field(description="the model evaluated (a compare of two models: 'a → b')")
    limit: Any = Field(description="items per task (None = all; a compare of two limits: 'a → b')")
    versions: dict[str, str] = Field(description="installed package versions (runner.versions)")
    thresholds: str = Field(description="the thresholds file applied")
    timings: dict[str, Number] = Field(description="seconds by phase, e.g. load, baseline:total, compare")
    suites: list[SuiteEntry] = Field(description="the suites run")
    compared_runs: dict[str, str] | None = Field(None, description="evalgate compare: the two run directories")
    placement: dict[str, Any] | None = Field(
        None, description="where the two engines lived (evalgate.evaluate.placement): mode together/alternate, requested, "
                          "source, reason, figures; per side the sleep mode applied, sleeps, wakes, restarts")
    speed_only: bool | None = Field(
        None, description="--speed-only: no quality suite ran, only speed was measured (the verdict is never PASS)")
    baseline: Side = Field(description="the baseline side")
    candidate: Side = Field(description="the candidate side")

    def as_json(self) -> dict[str, Any]:
        """The JSON object written to ``manifest.json`` (and embedded in ``verdict.json``)."""
        return self.model_dump(mode="json", exclude_unset=True)

    @classmethod
    def read(cls, path: Path) -> Manifest:
        """Load ``path``.

        Raises:
            StoreError: missing, unreadable or not a manifest (naming the file and the first bad field).
        """
        return cls.checked(read_json(path, "run manifest"), path)

    @classmethod
    def checked(cls, data: Any, path: Path) -> Manifest:
        """``data`` (a JSON value read from ``path``) validated as a manifest: every required key present and of its
        type (``suites`` a list of ``{name, tasks, content_hash}`` with string hashes, ...).

        Raises:
            StoreError (exit 3): naming ``path`` and the first bad field (``document.validation_problem``), e.g.
                ``suites: missing (...)`` or ``suites[0].content_hash: expected a string, got 5``.
        """
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise StoreError(f"{path}: malformed run manifest: {validation_problem(exc)}") from None
