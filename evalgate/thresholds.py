"""Load and validate ``thresholds.yaml``: margins, levels, power and how to treat each outcome.

Schema (margins are in points, i.e. percentage points of a task's primary metric)::

    alpha: 0.05                  # required. One-sided level, 0 < alpha < 0.5, of (a) the
                                 # non-inferiority bound and (b) the loss test (Holm across tasks)
    power: 0.8                   # optional, 0.5 <= power < 1 (default 0.8). MDE = (z_{1-alpha} +
                                 # z_power) * SE; a task whose MDE exceeds its margin is INCONCLUSIVE
    on_inconclusive: warn        # optional, "block" (default: exit 1) or "warn" (exit 5)
    bootstrap_resamples: 10000   # optional, int >= 1000
    seed: 0                      # optional, int >= 0, seeds the bootstrap
    lossless:                    # for configs with expect: lossless (spec decoding, async scheduling)
      min_identical_share: 0.95  # optional, 0..1 (default 0.95): share of items whose greedy outputs must
                                 # agree: byte-identical, or diverging first at a near-tie (below)
      near_tie_logprob: 0.01     # optional, nats >= 0 (default 0.01): a divergence whose first differing
                                 # token was within this of the baseline's own token, under the baseline's
                                 # decode-time log-probs, is a numerical tie-flip, not a changed model
      max_kl_mean: 0.001         # optional, nats >= 0 (default 0.001): mean decode-time KL(baseline ||
                                 # candidate) per token along the outputs' common prefix
    spec_decode:                 # optional floors for a candidate that runs speculative decoding
      min_acceptance_rate: 0.5   #   accepted / draft tokens, 0..1
      min_mean_acceptance_length: 1.5   # 1 + accepted / drafts, >= 1
    traffic:                     # optional: measure speed after the suites (evalgate.speed); every key optional,
      input_len: 512             #   defaults: 512/512/256 with CUDA, 256/256/64 (192 prompts) on CPU. ints >= 1
      output_len: 512
      concurrency: [1, 16, 256]  #   one int >= 1 or a list of distinct ones (a sweep), each <= max_num_seqs
      num_prompts: 256           #   requests per repeat (null: = the level's concurrency, one wave)
      repeats: 3                 #   interleaved timed passes per side (>= 2 for an interval)
      prompts: random            #   random (vLLM's RandomDataset) | suites (the suites' own prompts)
      mode: offline              #   offline | serve (serve is refused in this version)
    speed:                       # optional, BLOCK thresholds on the measured speed-up (absent: report only)
      min_speedup: 1.1           #   a lossy config must show candidate/baseline >= this (interval's lower end)
      max_slowdown: 0.05         #   a lossless config may not be shown slower than 1 - this (interval's upper end)
    default:
      margin: 2.0                # required. Non-inferiority margin in points, >= 0
    configs:                     # optional, per candidate config (name as in configs/)
      fp16-state:
        margin: 3.0              #   margin / alpha / min_identical_share / min_acceptance_rate /
                                 #   min_mean_acceptance_length / min_speedup / max_slowdown for this config
        traffic: {concurrency: 64}         # and its own traffic fields (over the top-level ones, key by key)
        suites: {coding: {margin: 6.0}}    # and this config's own suite / task entries
        tasks: {finance_tableqa: {margin: 4.0}}
    suites:
      docparse: {margin: 3.0}    # margin / alpha
      coding: {margin: 5.0, alpha: 0.05}
    tasks:
      finance_tableqa: {margin: 2.0}

Precedence for a task's margin and alpha, lowest to highest (the most specific entry wins):

    default (and the top-level alpha)
    < configs.<config>            (replaces the default for every task of that config)
    < suites.<suite> < tasks.<task>
    < configs.<config>.suites.<suite> < configs.<config>.tasks.<task>

so a config's flat entry does not override a suite's or task's margin, but a config's own suite or
task entry does. ``min_identical_share``: ``configs.<config>`` > ``lossless``; ``near_tie_logprob`` and
``max_kl_mean`` are set under ``lossless`` only. Acceptance floors: ``configs.<config>`` > ``spec_decode``. Every problem raises ``ConfigError(message, path=file,
field=dotted.field)`` with a one-line message; nothing is silently defaulted or ignored (unknown
keys and duplicate keys are errors; ``check_names`` rejects names that match no suite, task or
config).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from evalgate.errors import ConfigError

__all__ = ["LevelOverride", "SpecDecodeFloors", "TaskThreshold", "Thresholds", "load_thresholds"]

DEFAULT_BOOTSTRAP_RESAMPLES = 10_000
DEFAULT_SEED = 0
DEFAULT_POWER = 0.8
DEFAULT_ON_INCONCLUSIVE = "block"
DEFAULT_MIN_IDENTICAL_SHARE = 0.95
# A flip at a gap this small (nats) is what FP32 reduction-order noise can cause; an MTP path that corrupts
# the state moves the distribution by 0.02-0.75 nats of KL per token (measured on the embedded hybrid).
DEFAULT_NEAR_TIE_LOGPROB = 0.01
DEFAULT_MAX_KL_MEAN = 0.001
ON_INCONCLUSIVE = ("warn", "block")
MIN_BOOTSTRAP_RESAMPLES = 1_000
MAX_MARGIN = 100.0  # points: a margin above the whole scale gates nothing

_TOP_KEYS = ("alpha", "power", "on_inconclusive", "bootstrap_resamples", "seed", "lossless", "spec_decode", "default",
             "configs", "suites", "tasks", "traffic", "speed")
_DEFAULT_KEYS = ("margin",)
_LEVEL_KEYS = ("margin", "alpha")
_SPEC_KEYS = ("min_acceptance_rate", "min_mean_acceptance_length")
_SPEED_KEYS = ("min_speedup", "max_slowdown")
_CONFIG_KEYS = ("margin", "alpha", "min_identical_share", *_SPEC_KEYS, *_SPEED_KEYS, "traffic", "suites", "tasks")
TRAFFIC_KEYS = ("input_len", "output_len", "concurrency", "num_prompts", "repeats", "prompts", "mode")
TRAFFIC_PROMPTS = ("random", "suites")
TRAFFIC_MODES = ("offline", "serve")
MAX_CONCURRENCY_LEVELS = 16
_LOSSLESS_KEYS = ("min_identical_share", "near_tie_logprob", "max_kl_mean")
_ABSENT = object()


@dataclass(frozen=True)
class TaskThreshold:
    """The threshold that applies to one task.

    Attributes:
        margin: non-inferiority margin in points (>= 0); the task blocks when the lower
            confidence bound of (candidate - baseline) is below ``-margin``.
        alpha: one-sided significance level, 0 < alpha < 0.5.
        source: the level that set the margin: ``"tasks.<task>"``, ``"suites.<suite>"``,
            ``"configs.<config>"`` or ``"default"``.
    """

    margin: float
    alpha: float
    source: str


@dataclass(frozen=True)
class LevelOverride:
    """A ``configs.<name>``, ``suites.<name>`` or ``tasks.<name>`` entry; ``None`` means "inherit".

    ``min_identical_share``, ``suites`` and ``tasks`` (nested entries for that config) are only
    allowed under ``configs``.
    """

    margin: float | None = None
    alpha: float | None = None
    min_identical_share: float | None = None
    suites: Mapping[str, LevelOverride] = field(default_factory=lambda: MappingProxyType({}))
    tasks: Mapping[str, LevelOverride] = field(default_factory=lambda: MappingProxyType({}))
    min_acceptance_rate: float | None = None
    min_mean_acceptance_length: float | None = None
    min_speedup: float | None = None
    max_slowdown: float | None = None
    traffic: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class SpeedFloors:
    """Speed thresholds for one candidate; None = report only.

    Attributes:
        min_speedup: a lossy candidate must show speed-up >= this ratio (the interval's lower end), else BLOCK.
        max_slowdown: a lossless candidate may be at most this fraction slower (the interval's upper end must
            reach ``1 - max_slowdown``), else BLOCK.
    """

    min_speedup: float | None = None
    max_slowdown: float | None = None


@dataclass(frozen=True)
class SpecDecodeFloors:
    """Speculative-decoding floors for one candidate; None = no floor.

    Attributes:
        min_acceptance_rate: accepted / draft tokens (0..1).
        min_mean_acceptance_length: 1 + accepted / drafts (tokens per target step, >= 1).
    """

    min_acceptance_rate: float | None = None
    min_mean_acceptance_length: float | None = None

    @property
    def any(self) -> bool:
        return self.min_acceptance_rate is not None or self.min_mean_acceptance_length is not None


@dataclass(frozen=True)
class Thresholds:
    """A validated thresholds file. Build it with ``load_thresholds``.

    Attributes beyond the file's keys: ``power`` (target power of every task, 0.5..1),
    ``on_inconclusive`` (``"warn"`` or ``"block"``), ``min_identical_share`` (the ``lossless``
    default, 0..1), ``near_tie_logprob`` and ``max_kl_mean`` (the ``lossless`` tolerances, nats),
    ``configs`` (per-config overrides).
    """

    alpha: float
    default_margin: float
    suites: Mapping[str, LevelOverride] = field(default_factory=lambda: MappingProxyType({}))
    tasks: Mapping[str, LevelOverride] = field(default_factory=lambda: MappingProxyType({}))
    bootstrap_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES
    seed: int = DEFAULT_SEED
    path: Path | None = None
    power: float = DEFAULT_POWER
    on_inconclusive: str = DEFAULT_ON_INCONCLUSIVE
    min_identical_share: float = DEFAULT_MIN_IDENTICAL_SHARE
    configs: Mapping[str, LevelOverride] = field(default_factory=lambda: MappingProxyType({}))
    near_tie_logprob: float = DEFAULT_NEAR_TIE_LOGPROB
    max_kl_mean: float = DEFAULT_MAX_KL_MEAN
    spec_decode: SpecDecodeFloors = SpecDecodeFloors()
    traffic: Mapping[str, Any] | None = None  # the validated ``traffic`` entry (partial); None: section absent
    speed: SpeedFloors = SpeedFloors()

    def traffic_for(self, config: str | None) -> dict[str, Any] | None:
        """The ``traffic`` fields for candidate ``config``: ``configs.<config>.traffic`` over ``traffic``, field by
        field; None when neither is set (speed is then measured only when the command line asks for it)."""
        override = self.configs.get(config) if config is not None else None
        own = dict(override.traffic) if override is not None else {}
        if self.traffic is None and not own:
            return None
        return {**dict(self.traffic or {}), **own}

    def speed_floors_for(self, config: str | None) -> SpeedFloors:
        """``min_speedup`` / ``max_slowdown`` for ``config``: its ``configs.<config>`` entry over ``speed``."""
        override = self.configs.get(config) if config is not None else None
        lo, slow = self.speed.min_speedup, self.speed.max_slowdown
        if override is not None:
            lo = override.min_speedup if override.min_speedup is not None else lo
            slow = override.max_slowdown if override.max_slowdown is not None else slow
        return SpeedFloors(lo, slow)

    def spec_floors_for(self, config: str | None) -> SpecDecodeFloors:
        """Acceptance floors for candidate ``config``: its ``configs.<config>`` entry over ``spec_decode``."""
        override = self.configs.get(config) if config is not None else None
        rate, length = self.spec_decode.min_acceptance_rate, self.spec_decode.min_mean_acceptance_length
        if override is not None:
            rate = override.min_acceptance_rate if override.min_acceptance_rate is not None else rate
            length = (override.min_mean_acceptance_length if override.min_mean_acceptance_length is not None
                      else length)
        return SpecDecodeFloors(rate, length)

    def for_task(self, suite: str, task: str, config: str | None = None) -> TaskThreshold:
        """Margin (points) and alpha for ``task`` of ``suite`` when gating candidate ``config``.

        Precedence (lowest first): default < ``configs.<config>`` < ``suites.<suite>`` <
        ``tasks.<task>`` < ``configs.<config>.suites.<suite>`` < ``configs.<config>.tasks.<task>``.
        """
        margin, alpha, source = self.default_margin, self.alpha, "default"
        cfg = self.configs.get(config) if config is not None else None
        chain = [(f"configs.{config}", cfg), (f"suites.{suite}", self.suites.get(suite)),
                 (f"tasks.{task}", self.tasks.get(task))]
        if cfg is not None:
            chain += [(f"configs.{config}.suites.{suite}", cfg.suites.get(suite)),
                      (f"configs.{config}.tasks.{task}", cfg.tasks.get(task))]
        for where, override in chain:
            if override is None:
                continue
            if override.margin is not None:
                margin, source = override.margin, where
            if override.alpha is not None:
                alpha = override.alpha
        return TaskThreshold(margin=margin, alpha=alpha, source=source)

    def identical_share_for(self, config: str | None) -> float:
        """Required share (0..1) of byte-identical outputs for a lossless ``config``."""
        override = self.configs.get(config) if config is not None else None
        if override is not None and override.min_identical_share is not None:
            return override.min_identical_share
        return self.min_identical_share

    def check_names(self, suites: Iterable[str], tasks: Iterable[str],
                    configs: Iterable[str] | None = None) -> None:
        """Raise ConfigError if ``suites.<x>``, ``tasks.<x>`` or (when ``configs`` is given)
        ``configs.<x>`` names no known suite/task/config.

        A misspelt name would otherwise silently fall back to the default margin.
        """
        suites, tasks = list(suites), list(tasks)
        levels = [("", "suites", self.suites, suites), ("", "tasks", self.tasks, tasks)]
        if configs is not None:
            levels.append(("", "configs", self.configs, list(configs)))
        for cname, cfg in self.configs.items():
            levels += [(f"configs.{cname}.", "suites", cfg.suites, suites),
                       (f"configs.{cname}.", "tasks", cfg.tasks, tasks)]
        for prefix, level, entries, known in levels:
            for name in entries:
                if name not in known:
                    raise ConfigError(
                        f"unknown {level[:-1]} {name!r}{_suggest(name, known, list_all=False)}",
                        path=self.path,
                        field=f"{prefix}{level}.{name}",
                    )


# ---------------------------------------------------------------------------------- parsing


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects duplicate keys (PyYAML keeps the last one silently)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _show(value: Any) -> str:
    """A short one-line rendering of a YAML value for error messages."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if value is None:
        return "null"
    if isinstance(value, str):
        text = repr(value)
        return (text if len(text) <= 40 else text[:37] + "...'") + " (a string)"
    if isinstance(value, (list, dict)):
        return f"a {'list' if isinstance(value, list) else 'mapping'}"
    return repr(value)


def _suggest(key: str, valid: Iterable[str], *, list_all: bool = True) -> str:
    valid = list(valid)
    close = difflib.get_close_matches(key, valid, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; valid keys: {', '.join(valid)}" if list_all else ""


def _read_yaml(path: Path) -> Any:
    if path.is_dir():
        raise ConfigError("is a directory, not a thresholds file", path=path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("file not found", path=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", path=path) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"not valid UTF-8: byte 0x{data[exc.start]:02x} at line {line} (offset {exc.start})",
            path=path,
        ) from None
    try:
        loaded = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"invalid YAML{where}: {problem}", path=path) from None
    if loaded is None:
        raise ConfigError("file is empty: expected keys alpha and default.margin", path=path)
    return loaded


class _Validator:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, message: str, dotted: str | None) -> ConfigError:
        return ConfigError(message, path=self.path, field=dotted)

    def mapping(
        self, value: Any, dotted: str | None, allowed: tuple[str, ...] | None
    ) -> dict[str, Any]:
        """Check ``value`` is a mapping with string keys, all in ``allowed`` (None: any)."""
        if not isinstance(value, dict):
            what = "top level" if dotted is None else "value"
            raise self.fail(f"{what} must be a mapping, got {_show(value)}", dotted)
        for key in value:
            if not isinstance(key, str) or not key:
                raise self.fail(f"keys must be non-empty strings, got {_show(key)}", dotted)
            if allowed is not None and key not in allowed:
                child = key if dotted is None else f"{dotted}.{key}"
                raise self.fail(f"unknown key {key!r}{_suggest(key, allowed)}", child)
        return value

    @staticmethod
    def _is_number(value: Any) -> bool:
        """int or float, but not bool (YAML ``true`` would otherwise count as 1)."""
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    def margin(self, value: Any, dotted: str) -> float:
        if not self._is_number(value) or not math.isfinite(value) or value < 0:
            message = f"margin must be a finite number >= 0 (points), got {_show(value)}"
            raise self.fail(message, dotted)
        if value > MAX_MARGIN:
            raise self.fail(f"margin must be <= {MAX_MARGIN:g} points, got {value!r}", dotted)
        return float(value)

    def alpha(self, value: Any, dotted: str) -> float:
        if not self._is_number(value) or not (0.0 < value < 0.5):
            message = f"alpha must be a number with 0 < alpha < 0.5, got {_show(value)}"
            raise self.fail(message, dotted)
        return float(value)

    def share(self, value: Any, dotted: str) -> float:
        if not self._is_number(value) or not (0.0 <= value <= 1.0):
            raise self.fail(f"must be a number with 0 <= share <= 1, got {_show(value)}", dotted)
        return float(value)

    def power(self, value: Any, dotted: str) -> float:
        if not self._is_number(value) or not (0.5 <= value < 1.0):
            raise self.fail(f"power must be a number with 0.5 <= power < 1, got {_show(value)}", dotted)
        return float(value)

    def choice(self, value: Any, dotted: str, choices: tuple[str, ...]) -> str:
        if value not in choices:
            raise self.fail(f"must be one of {', '.join(choices)}, got {_show(value)}", dotted)
        return str(value)

    def lossless(self, value: Any) -> tuple[float, float, float]:
        """``(min_identical_share, near_tie_logprob, max_kl_mean)`` of the ``lossless`` entry."""
        entry = {} if value is None else self.mapping(value, "lossless", _LOSSLESS_KEYS)
        return (self.share(entry.get("min_identical_share", DEFAULT_MIN_IDENTICAL_SHARE), "lossless.min_identical_share"),
                self.nats(entry.get("near_tie_logprob", DEFAULT_NEAR_TIE_LOGPROB), "lossless.near_tie_logprob"),
                self.nats(entry.get("max_kl_mean", DEFAULT_MAX_KL_MEAN), "lossless.max_kl_mean"))

    def acceptance_length(self, value: Any, dotted: str) -> float:
        if not self._is_number(value) or not (1.0 <= value < math.inf):
            raise self.fail(f"must be a finite number >= 1 (tokens per target step), got {_show(value)}", dotted)
        return float(value)

    def spec_floors(self, value: Any) -> SpecDecodeFloors:
        """The top-level ``spec_decode`` entry."""
        entry = {} if value is None else self.mapping(value, "spec_decode", _SPEC_KEYS)
        rate, length = entry.get("min_acceptance_rate", _ABSENT), entry.get("min_mean_acceptance_length", _ABSENT)
        return SpecDecodeFloors(
            None if rate is _ABSENT else self.share(rate, "spec_decode.min_acceptance_rate"),
            None if length is _ABSENT else self.acceptance_length(length, "spec_decode.min_mean_acceptance_length"))

    def speedup(self, value: Any, dotted: str) -> float:
        if not self._is_number(value) or not (0.0 < value < math.inf):
            raise self.fail(f"must be a finite ratio > 0 (candidate / baseline throughput), got {_show(value)}", dotted)
        return float(value)

    def slowdown(self, value: Any, dotted: str) -> float:
        if not self._is_number(value) or not (0.0 <= value < 1.0):
            raise self.fail(f"must be a fraction with 0 <= max_slowdown < 1 (0.05 = 5 % slower), got {_show(value)}",
                            dotted)
        return float(value)

    def speed_floors(self, value: Any) -> SpeedFloors:
        """The top-level ``speed`` entry."""
        entry = {} if value is None else self.mapping(value, "speed", _SPEED_KEYS)
        lo, slow = entry.get("min_speedup", _ABSENT), entry.get("max_slowdown", _ABSENT)
        return SpeedFloors(None if lo is _ABSENT else self.speedup(lo, "speed.min_speedup"),
                           None if slow is _ABSENT else self.slowdown(slow, "speed.max_slowdown"))

    def traffic(self, value: Any, dotted: str) -> Mapping[str, Any]:
        """A ``traffic`` entry (every key optional; defaults depend on the platform, see ``speed.resolve_profile``)."""
        entry = {} if value is None else self.mapping(value, dotted, TRAFFIC_KEYS)
        out: dict[str, Any] = {}
        for key in ("input_len", "output_len", "repeats"):
            if key in entry:
                out[key] = self.integer(entry[key], f"{dotted}.{key}", 1)
        if "num_prompts" in entry:
            out["num_prompts"] = None if entry["num_prompts"] is None else self.integer(
                entry["num_prompts"], f"{dotted}.num_prompts", 1)
        if "concurrency" in entry:
            out["concurrency"] = self.concurrency(entry["concurrency"], f"{dotted}.concurrency")
        if "prompts" in entry:
            out["prompts"] = self.choice(entry["prompts"], f"{dotted}.prompts", TRAFFIC_PROMPTS)
        if "mode" in entry:
            out["mode"] = self.choice(entry["mode"], f"{dotted}.mode", TRAFFIC_MODES)
        return MappingProxyType(out)

    def concurrency(self, value: Any, dotted: str) -> tuple[int, ...]:
        """One integer >= 1 or a non-empty list of distinct ones (a sweep)."""
        values = value if isinstance(value, list) else [value]
        if not values or len(values) > MAX_CONCURRENCY_LEVELS:
            raise self.fail(f"must be an integer >= 1 or a list of 1 to {MAX_CONCURRENCY_LEVELS} of them, got "
                            f"{_show(value)}", dotted)
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise self.fail(f"must be an integer >= 1 or a list of them, got {_show(v)}", dotted)
        if len(set(values)) != len(values):
            raise self.fail(f"repeats a level: {values}", dotted)
        return tuple(values)

    def nats(self, value: Any, dotted: str) -> float:
        if not self._is_number(value) or not (0.0 <= value < math.inf):
            raise self.fail(f"must be a finite number of nats >= 0, got {_show(value)}", dotted)
        return float(value)

    def integer(self, value: Any, dotted: str, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(f"{dotted} must be an integer >= {minimum}, got {_show(value)}", dotted)
        return value

    def levels(self, value: Any, level: str) -> Mapping[str, LevelOverride]:
        """Entries of ``suites``, ``tasks`` or ``configs`` (``level`` is the dotted path to it)."""
        if value is None:
            return MappingProxyType({})
        is_config = level == "configs"
        keys = _CONFIG_KEYS if is_config else _LEVEL_KEYS
        out: dict[str, LevelOverride] = {}
        for name, entry in self.mapping(value, level, None).items():
            dotted = f"{level}.{name}"
            entry = self.mapping(entry, dotted, keys)
            if not entry:
                raise self.fail(f"empty entry: set {' and/or '.join(keys)}", dotted)
            margin = entry.get("margin", _ABSENT)
            alpha = entry.get("alpha", _ABSENT)
            share = entry.get("min_identical_share", _ABSENT)
            rate = entry.get("min_acceptance_rate", _ABSENT)
            length = entry.get("min_mean_acceptance_length", _ABSENT)
            speedup, slowdown = entry.get("min_speedup", _ABSENT), entry.get("max_slowdown", _ABSENT)
            out[name] = LevelOverride(
                min_speedup=None if speedup is _ABSENT else self.speedup(speedup, f"{dotted}.min_speedup"),
                max_slowdown=None if slowdown is _ABSENT else self.slowdown(slowdown, f"{dotted}.max_slowdown"),
                traffic=self.traffic(entry.get("traffic"), f"{dotted}.traffic") if is_config and "traffic" in entry
                else MappingProxyType({}),
                margin=None if margin is _ABSENT else self.margin(margin, f"{dotted}.margin"),
                alpha=None if alpha is _ABSENT else self.alpha(alpha, f"{dotted}.alpha"),
                min_identical_share=None if share is _ABSENT else self.share(share, f"{dotted}.min_identical_share"),
                min_acceptance_rate=None if rate is _ABSENT else self.share(rate, f"{dotted}.min_acceptance_rate"),
                min_mean_acceptance_length=(None if length is _ABSENT
                                            else self.acceptance_length(length, f"{dotted}.min_mean_acceptance_length")),
                suites=self.levels(entry.get("suites"), f"{dotted}.suites") if is_config else MappingProxyType({}),
                tasks=self.levels(entry.get("tasks"), f"{dotted}.tasks") if is_config else MappingProxyType({}),
            )
        return MappingProxyType(out)


def load_thresholds(path: Path) -> Thresholds:
    """Read, parse and validate a thresholds YAML file.

    Args:
        path: the ``thresholds.yaml`` file (UTF-8).

    Returns:
        A frozen ``Thresholds``; margins in points, alpha one-sided.

    Raises:
        ConfigError: (``path=`` the file, ``field=`` the dotted field when one is at fault)
            missing file, directory, unreadable or non-UTF-8 file, YAML syntax error (with line
            and column), duplicate key, empty file, non-mapping top level, unknown key (with
            the closest valid key suggested), missing ``alpha`` or ``default.margin``, wrong
            types (a boolean is not a number), margin negative/NaN/inf/> 100, alpha outside
            (0, 0.5), ``bootstrap_resamples`` not an int >= 1000, ``seed`` not an int >= 0,
            ``power`` outside [0.5, 1), ``on_inconclusive`` not warn/block, a
            ``min_identical_share`` outside [0, 1], ``lossless.near_tie_logprob`` or
            ``lossless.max_kl_mean`` negative, NaN or infinite, an acceptance-rate floor outside [0, 1]
            or a mean-acceptance-length floor below 1.
    """
    path = Path(path)
    v = _Validator(path)
    doc = v.mapping(_read_yaml(path), None, _TOP_KEYS)
    if "alpha" not in doc:
        raise v.fail("alpha is required (one-sided level, e.g. 0.05)", "alpha")
    if "default" not in doc:
        raise v.fail("default is required (e.g. default: {margin: 2.0})", "default")
    default = v.mapping(doc["default"], "default", _DEFAULT_KEYS)
    if "margin" not in default:
        raise v.fail("default.margin is required (points, e.g. 2.0)", "default.margin")
    share, near_tie, max_kl = v.lossless(doc.get("lossless"))
    return Thresholds(
        alpha=v.alpha(doc["alpha"], "alpha"),
        default_margin=v.margin(default["margin"], "default.margin"),
        suites=v.levels(doc.get("suites"), "suites"),
        tasks=v.levels(doc.get("tasks"), "tasks"),
        bootstrap_resamples=v.integer(
            doc.get("bootstrap_resamples", DEFAULT_BOOTSTRAP_RESAMPLES),
            "bootstrap_resamples",
            MIN_BOOTSTRAP_RESAMPLES,
        ),
        seed=v.integer(doc.get("seed", DEFAULT_SEED), "seed", 0),
        path=path,
        power=v.power(doc.get("power", DEFAULT_POWER), "power"),
        on_inconclusive=v.choice(doc.get("on_inconclusive", DEFAULT_ON_INCONCLUSIVE), "on_inconclusive",
                                 ON_INCONCLUSIVE),
        min_identical_share=share,
        configs=v.levels(doc.get("configs"), "configs"),
        near_tie_logprob=near_tie,
        max_kl_mean=max_kl,
        spec_decode=v.spec_floors(doc.get("spec_decode")),
        traffic=v.traffic(doc["traffic"], "traffic") if "traffic" in doc else None,
        speed=v.speed_floors(doc.get("speed")),
    )
