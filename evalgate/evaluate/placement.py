"""Where the two sides' engines live on one GPU: ``together`` (both resident) or ``alternate`` (both started with
vLLM's sleep mode, one awake at a time), decided before any engine starts (``decide``), and the one place that keeps
the never-two-awake rule while they run (``Alternation``).

vLLM's sleep mode (``enable_sleep_mode``; ``LLM.sleep(level=1)`` offloads the weights to host memory and drops the KV
cache, ``LLM.wake_up()`` brings both back; the prefix cache is reset after each wake, ``LLM.reset_prefix_cache()``)
exists in vLLM 0.26.0 and 0.32 under these names; vLLM's platform layer reports it for CUDA, ROCm and XPU only
(``Platform.is_sleep_mode_available``), never for its CPU build. Measured on an H200 (vLLM 0.26.0, two 8B-shaped
engines at ``gpu_memory_utilization`` 0.80): level-1 sleep 0.35-0.41 s, wake 0.45-0.82 s, the first sleep after start
10-16 s, throughput unchanged after wake; but the 10th switch died twice (``CUDA Error: invalid argument at
csrc/cumem_allocator.cpp:235``): a sleep or wake can fail, and ``Alternation`` restarts the side it failed on, as it
restarts (either mode) a side whose engine died in a speed pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgate.engine import platform  # read at call time: tests stand in for the hardware
from evalgate.errors import ConfigError
from evalgate.evaluate.procs import GROUP_GONE_S
from evalgate.evaluate.runner import SpeedError
from evalgate.fmt import clip, count
from evalgate.models.embedded import resolve_model

log = logging.getLogger("evalgate")

PLACEMENTS = ("auto", "together", "alternate")
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default (EngineArgs / CacheConfig), 0.26.0 and 0.32 alike
RESIDENT_LIMIT = 0.95  # both sides' gpu_memory_utilization summed above this cannot be resident at once
SLEEP_LEVEL = 1        # weights offloaded to host memory, KV cache dropped; level 2 would drop the weights too
MAX_RESTARTS = 2       # per side, in the speed phase; then the speed part fails (exit 3)
REASON_CHARS = 300     # a restart's reason as recorded and shown (cut at a word: fmt.clip)
WARMUP_LABEL = "warm-up"  # the label of a level's untimed warm-up command (speed.measure), run again after a restart


@dataclass(frozen=True)
class Placement:
    """The decision: ``mode`` ``together`` or ``alternate``; ``requested`` ``auto``/``together``/``alternate``;
    ``source`` where the request came from (``--placement``, the config file, or ``default``); ``reason`` one
    sentence; ``figures`` what it was decided from (utilizations, weight bytes, GPU bytes; None where unknown)."""

    mode: str
    requested: str
    source: str
    reason: str
    figures: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The manifest's ``placement`` block (before the speed phase adds its sleeps and wakes)."""
        return {"mode": self.mode, "requested": self.requested, "source": self.source, "reason": self.reason,
                **({"sleep_level": SLEEP_LEVEL} if self.mode == "alternate" else {}), "figures": dict(self.figures)}


def utilization(engine_args: dict[str, Any]) -> float:
    """A side's ``gpu_memory_utilization`` (share of the GPU's memory its engine reserves, 0-1): the config's, else
    vLLM's default 0.9."""
    value = engine_args.get("gpu_memory_utilization")
    return VLLM_DEFAULT_GPU_MEMORY_UTILIZATION if value is None else float(value)


def decide(requested: str, *, source: str, cuda: bool, sleep_problem: str | None,
           utilizations: tuple[float, float], weight_bytes: tuple[int | None, int | None] = (None, None),
           gpu_bytes: int | None = None, kv_bytes: tuple[int | None, int | None] = (None, None),
           path: Any = None, fld: str = "placement") -> Placement:
    """Decide where the baseline and candidate engines live (pure: every fact is an argument).

    Rule: ``together`` is honoured as asked; ``alternate`` needs sleep mode (``sleep_problem`` None); ``auto`` is
    ``together`` on CPU (vLLM's CPU build has no sleep mode and ``gpu_memory_utilization`` is a share of host RAM),
    else ``alternate`` when both sides cannot be resident at once, else ``together``. Both fit when the share of the
    GPU the baseline holds plus the share the candidate asks for stays within ``RESIDENT_LIMIT`` (0.95): vLLM's
    worker refuses to start unless ``gpu_memory_utilization`` x total memory is free (``request_memory`` in
    ``vllm/v1/worker/utils.py``, 0.26.0 and 0.32), and an engine then holds that share, except one whose KV cache is
    sized by ``kv_cache_memory_bytes``, which holds its weights plus those bytes (its share when both are known);
    and when both sides' weights together exceed ``RESIDENT_LIMIT`` of the GPU. An ``auto`` that would alternate on
    a vLLM without sleep mode stays ``together`` and says why (the second engine may then fail to start: exit 3).

    Args:
        requested: ``auto``, ``together`` or ``alternate``. source: where it came from (for the record and errors).
        cuda: whether the platform is CUDA. sleep_problem: why sleep mode is unavailable (None: available).
        utilizations: (baseline, candidate) ``gpu_memory_utilization`` (``utilization``), fractions 0-1.
        weight_bytes: (baseline, candidate) checkpoint bytes (``weight_bytes``), None where unknown.
        gpu_bytes: the GPU's total memory in bytes, None where unknown (CPU, no ``nvidia-smi``).
        kv_bytes: (baseline, candidate) ``kv_cache_memory_bytes``, None where unset.
        path, fld: the file and field named in an error (``--placement`` has no file).
    Returns:
        The ``Placement``.
    Raises:
        ConfigError (exit 2): ``alternate`` asked where sleep mode is unavailable (CPU, or a vLLM without it).
    """
    def held(i: int) -> float:  # the share of the GPU side i holds once started
        if kv_bytes[i] and weight_bytes[i] is not None and gpu_bytes:
            return (kv_bytes[i] + weight_bytes[i]) / gpu_bytes
        return utilizations[i]

    base_held, cand_asks = held(0), max(utilizations[1], held(1))
    total = round(base_held + cand_asks, 3)
    weights = None if None in weight_bytes else sum(w or 0 for w in weight_bytes)
    figures = {"gpu_memory_utilization": list(utilizations), "kv_cache_memory_bytes": list(kv_bytes),
               "weight_bytes": list(weight_bytes), "gpu_bytes": gpu_bytes,
               "baseline_share": round(base_held, 4), "candidate_share": round(cand_asks, 4)}
    if requested == "together":
        return Placement("together", requested, source, "asked for: both engines resident at once", figures)
    if requested == "alternate":
        if sleep_problem:
            raise ConfigError(f"alternate needs vLLM's sleep mode: {sleep_problem}", path=path, field=fld)
        return Placement("alternate", requested, source, "asked for: one engine awake at a time (sleep mode, level 1)",
                         figures)
    if not cuda:
        return Placement("together", requested, source, "CPU: vLLM's CPU build has no sleep mode; both engines share "
                                                        "host memory", figures)
    shares = f"GPU share {base_held:.3g} (baseline) + {cand_asks:.3g} (candidate) = {total:.3g}"
    why = []
    if total > RESIDENT_LIMIT:
        why.append(f"{shares} > {RESIDENT_LIMIT:g}")
    if weights is not None and gpu_bytes and weights > RESIDENT_LIMIT * gpu_bytes:
        why.append(f"both sides' weights ({weights / 2**30:.1f} GiB) exceed {RESIDENT_LIMIT:g} of the GPU's "
                   f"{gpu_bytes / 2**30:.1f} GiB")
    if not why:
        return Placement("together", requested, source, f"both fit at once ({shares} <= {RESIDENT_LIMIT:g})", figures)
    if sleep_problem:
        return Placement("together", requested, source, f"both cannot be resident ({'; '.join(why)}), but "
                                                        f"{sleep_problem}: together anyway", figures)
    return Placement("alternate", requested, source, f"both cannot be resident at once ({'; '.join(why)})", figures)


def resolve(base: Any, cand: Any, override: str | None = None) -> Placement:
    """The placement of a gate of ``cand`` against ``base`` (``config.EngineConfig``s), from the facts of this host:
    ``override`` (``--placement``) else the candidate config's ``placement``; the platform and sleep mode
    (``engine.sleep_mode_problem``), both sides' ``gpu_memory_utilization``, their weight bytes (``weight_bytes`` of
    a local checkpoint; embedded models are resolved to theirs, a hub name is unknown) and the GPU's memory
    (``engine.gpu_memory_bytes``, ``nvidia-smi``). No engine starts and vLLM is not imported.

    Raises:
        ConfigError (exit 2): ``alternate`` where sleep mode is unavailable, naming ``--placement`` or the config
            file's ``placement``.
    """
    if override:
        requested, source, path, fld = override, "--placement", None, "--placement"
    else:
        requested, path, fld = cand.placement, cand.placement_from, "placement"
        source = str(path) if path is not None else "default"
    cuda = platform.has_cuda()
    problem = platform.sleep_mode_problem() if (requested != "together") else None
    if requested == "together" or not cuda:  # nothing more to learn: no GPU to size against
        return decide(requested, source=source, cuda=cuda, sleep_problem=problem,
                      utilizations=(utilization(base.engine_args), utilization(cand.engine_args)), path=path, fld=fld)
    return decide(requested, source=source, cuda=cuda, sleep_problem=problem,
                  utilizations=(utilization(base.engine_args), utilization(cand.engine_args)),
                  weight_bytes=(_model_bytes(base), _model_bytes(cand)), gpu_bytes=platform.gpu_memory_bytes(
                      cand.env.get("CUDA_VISIBLE_DEVICES")), kv_bytes=(_kv_bytes(base), _kv_bytes(cand)),
                  path=path, fld=fld)


def _kv_bytes(cfg: Any) -> int | None:
    """``cfg``'s ``kv_cache_memory_bytes`` (an int), None when unset or not a number."""
    value = cfg.engine_args.get("kv_cache_memory_bytes")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _model_bytes(cfg: Any) -> int | None:
    """``weight_bytes`` of ``cfg``'s checkpoint (an embedded alias resolved to its packaged directory); None for a
    hub name or ``load_format: dummy`` (random weights: nothing on disk says their size)."""
    if str(cfg.engine_args.get("load_format", "")) == "dummy":
        return None
    try:
        return weight_bytes(resolve_model(cfg.model))
    except Exception:  # noqa: BLE001 - a model that cannot be prepared fails later, where it is loaded
        return None


def weight_bytes(model_path: str | Path) -> int | None:
    """The checkpoint's weight bytes: ``model.safetensors.index.json``'s ``metadata.total_size`` when present, else
    the summed sizes of its ``*.safetensors`` files; None for a hub name, a directory without weight files (a
    config-only ``load_format: dummy`` directory) or an unreadable one. No file is read beyond the index."""
    import json

    p = Path(model_path)
    if not p.is_dir():
        return None
    index = p / "model.safetensors.index.json"
    try:
        if index.is_file():
            total = json.loads(index.read_text(encoding="utf-8")).get("metadata", {}).get("total_size")
            if isinstance(total, int) and total > 0:
                return total
        files = sorted(p.glob("*.safetensors"))
        return sum(f.stat().st_size for f in files) or None
    except (OSError, ValueError):
        return None


class Alternation:
    """The engine workers of one gate and which of them are awake; in ``alternate`` mode, never two at once.

    Every sleep, wake and worker start goes through here: ``started(role, worker)`` registers a just-started worker
    (awake: vLLM starts awake); ``before_start(role)`` puts every other side to sleep first; ``use(role)`` wakes
    ``role`` (sleeping the others first) and returns its worker; ``stopped(role)`` forgets a closed worker. In
    ``together`` mode nothing sleeps and ``use`` only returns the worker.

    Restarts (``restart(role)``: a new worker whose suites all come from the store), at most ``max_restarts`` per side
    for the life of this object (``ablate``'s one alternation: the baseline's budget covers the whole ablation):

    - a failed sleep or wake (alternate; ``runner.SpeedError`` or any ``EngineError``, the CUDA errors of issue 25
      included) restarts that side, unless ``--timeout`` ran out (``timed_out``: raised as it came);
    - ``measure(role, command)``: a pass whose engine died (the worker process ended: the error's ``died``, set where
      the worker's exit is read, ``procs.exit_error``) restarts that side, in either mode; on the restarted engine the
      level's warm-up (the last ``WARMUP_LABEL`` command ``role`` ran) runs first, untimed, then the lost pass is
      repeated and its result carries ``after_restart: true``. Any other failure of a pass (an error reply from a
      live worker, e.g. vLLM raising ``ValueError``; a ``--timeout`` expiry) is raised at once: the speed part fails.

    The old worker is killed (its whole process group, ``procs.kill_group``) before the new one starts: never two
    copies of a side; where some of its group still runs ``procs.GROUP_GONE_S`` after the SIGKILL, no new one starts
    (SpeedError). Counts and seconds of every sleep, wake and restart are in ``record()``.

    Args:
        mode: ``together`` or ``alternate``.
        restart: ``restart(role) -> worker``, None: no restarts (a failure is raised as it came).
        max_restarts: per side.
    """

    def __init__(self, mode: str, restart: Callable[[str], Any] | None = None, max_restarts: int = MAX_RESTARTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.mode, self.restart, self.max_restarts, self.clock = mode, restart, max_restarts, clock
        self.workers: dict[str, Any] = {}
        self.awake: set[str] = set()
        self.events: list[dict[str, Any]] = []
        self.stats: dict[str, dict[str, Any]] = {}
        self.warmups: dict[str, dict[str, Any]] = {}  # the last warm-up command each side ran
        self.cold: set[str] = set()  # sides restarted and not warmed up since
        self.lost: dict[str, str] = {}  # sides left without an engine by a restart that failed or ran out, and why

    def _stat(self, role: str) -> dict[str, Any]:
        return self.stats.setdefault(role, {"sleeps": 0, "sleep_s": [], "wakes": 0, "wake_s": [], "restarts": 0,
                                            "restart_reasons": []})

    def _check(self) -> None:
        if self.mode == "alternate" and len(self.awake) > 1:  # a bug here, never the engine's: stop at once
            raise AssertionError(f"two sides awake at once: {sorted(self.awake)}")

    def before_start(self, role: str) -> None:
        """Put every other side to sleep before ``role``'s worker starts (alternate); nothing in together mode."""
        if self.mode == "alternate":
            for other in [r for r in self.awake if r != role]:
                self.sleep(other)

    def started(self, role: str, worker: Any) -> Any:
        """Register ``role``'s just-started (awake) worker; returns it."""
        self.before_start(role)
        self.workers[role] = worker
        self.awake.add(role)
        self.lost.pop(role, None)
        self._stat(role)
        self._check()
        return worker

    def stopped(self, role: str) -> None:
        """Forget ``role``'s worker (closed or killed by the caller)."""
        self.workers.pop(role, None)
        self.awake.discard(role)

    def sleep(self, role: str) -> None:
        """Put ``role`` to sleep (level 1); a failure restarts it (then it sleeps again).

        Raises:
            SpeedError: the sleep timed out (``--timeout``), or the side's restart failed or its restarts ran out.
        """
        if role not in self.awake or self.mode != "alternate":
            return
        try:
            t0 = self.clock()
            took = self.workers[role].sleep(SLEEP_LEVEL)
            self._record(role, "sleep", took if isinstance(took, (int, float)) else self.clock() - t0)
            self.awake.discard(role)
        except Exception as exc:  # noqa: BLE001 - EngineError/SpeedError from the worker: restart that side
            if getattr(exc, "timed_out", False):
                self._give_up(role, exc)
            self._restart(role, f"sleep failed: {exc}", exc)
            self.sleep(role)

    def use(self, role: str) -> Any:
        """``role``'s worker, awake and the only one awake (alternate): the others sleep first, then it wakes (and
        its prefix cache is reset by the worker). A failed wake restarts that side (not a timed-out one).

        Raises:
            SpeedError: ``role`` has no engine (its restart failed or its restarts ran out earlier); a wake timed
                out; the side's restart failed or its restarts ran out now.
        """
        if role not in self.workers:
            raise SpeedError(f"{role}: no engine ({self.lost.get(role, 'none was started, or it was stopped')})")
        if self.mode == "alternate" and role not in self.awake:
            self.before_start(role)
            try:
                t0 = self.clock()
                took = self.workers[role].wake()
                self._record(role, "wake", took if isinstance(took, (int, float)) else self.clock() - t0)
                self.awake.add(role)
            except Exception as exc:  # noqa: BLE001 - as in sleep
                if getattr(exc, "timed_out", False):
                    self._give_up(role, exc)
                self._restart(role, f"wake failed: {exc}", exc)
        self._check()
        return self.workers[role]

    def measure(self, role: str, command: dict[str, Any]) -> dict[str, Any]:
        """One measurement pass on ``role`` (woken first). A pass whose engine died restarts that side and is
        repeated (at most ``max_restarts`` restarts per side); a side restarted since its last pass (here, or on a
        failed sleep or wake) first runs its last warm-up command again, untimed. The result of a pass during or right
        after which a side was restarted carries ``after_restart: true`` (``measure_speed`` leaves its pair out of
        the pair-duration mean).

        Raises:
            SpeedError: the pass failed without its engine dying (an error reply, a timeout: raised as it came), the
                side has no engine, or its restart failed or its restarts ran out.
        """
        warm = command.get("label") == WARMUP_LABEL
        if warm:
            self.warmups[role] = command
        restarts, after = self._restarts(), role in self.cold
        while True:
            worker = self.use(role)
            try:
                if role in self.cold and not warm and role in self.warmups:
                    worker.measure(self.warmups[role])  # the restarted engine is cold: warm it up as the level did
                self.cold.discard(role)
                result = worker.measure(command)
            except Exception as exc:  # noqa: BLE001 - SpeedError: restart only a worker that died in the pass
                if getattr(exc, "timed_out", False):
                    self._give_up(role, exc)
                if not getattr(exc, "died", False):
                    raise
                self._restart(role, f"pass '{command.get('label', 'measure')}' failed: {exc}", exc)
                continue
            if after or self._restarts() != restarts:
                result = {**result, "after_restart": True}
            return result

    def _give_up(self, role: str, exc: BaseException) -> None:
        """``--timeout`` ran out on ``role`` (its worker already killed by ``runner.Worker``): forget that side, so a
        later pass says it has no engine (a new worker would get a fresh deadline), and re-raise ``exc``."""
        old = self.workers.get(role)
        if old is not None:
            old.kill()
        self.stopped(role)
        self.lost[role] = f"it timed out earlier: {str(exc)[:300]}"
        raise exc

    def _restarts(self) -> int:
        return sum(s["restarts"] for s in self.stats.values())

    def _restart(self, role: str, why: str, exc: BaseException) -> None:
        """Kill ``role``'s worker and start it again (either mode); without ``restart`` ``exc`` is re-raised as it
        came. SpeedError naming the side: some of the old worker's group outlived its kill (no second copy is
        started), after ``max_restarts`` (how often the side was restarted), or the new worker failed to start; the
        side then has no engine (``use`` says why)."""
        stat = self._stat(role)
        if self.restart is None:
            raise exc
        short = clip(why, REASON_CHARS)
        old = self.workers.get(role)
        left = old.kill() if old is not None else None
        self.stopped(role)
        if left:
            self.lost[role] = f"its old engine was still alive after {GROUP_GONE_S:g} s"
            raise SpeedError(f"{role}'s old engine still alive after {GROUP_GONE_S:g} s: pids "
                             f"{', '.join(map(str, left))}; not starting a second copy ({short})") from None
        if stat["restarts"] >= self.max_restarts:
            self.lost[role] = f"its restarts ran out earlier: {short}"
            raise SpeedError(f"{role}: {why} (after {stat['restarts']} restart(s) of that side, the most allowed)") from None
        stat["restarts"] += 1
        stat["restart_reasons"].append(short)
        log.warning("speed: %s: %s; restarting that side (%d of at most %d)", role, short, stat["restarts"],
                    self.max_restarts)
        self.before_start(role)
        t0 = self.clock()
        try:
            worker = self.restart(role)
        except Exception as err:  # noqa: BLE001 - EngineError, ConfigError, ...: the speed part fails, naming why
            self.lost[role] = f"its restart failed earlier: {err}"
            raise SpeedError(f"{role}: restart after {short} failed: the new engine did not start: {err}") from None
        self.events.append({"role": role, "event": "restart", "seconds": self.clock() - t0, "why": short})
        self.cold.add(role)
        self.started(role, worker)

    def _record(self, role: str, what: str, seconds: float) -> None:
        stat = self._stat(role)
        stat[f"{what}s"] += 1
        stat[f"{what}_s"].append(round(seconds, 4))
        self.events.append({"role": role, "event": what, "seconds": seconds})

    def proxy(self, role: str) -> Any:
        """An object with ``measure(command)`` and ``info`` for ``speedrun.measure_speed``: each pass goes through
        ``measure`` here (woken first, restarted on failure), never around the rule."""
        return _Side(self, role)

    def record(self) -> dict[str, Any]:
        """Per side: ``sleeps``, ``sleep_s`` (seconds of each), ``wakes``, ``wake_s``, ``restarts`` and their reasons."""
        return {role: {k: (list(v) if isinstance(v, list) else v) for k, v in s.items()}
                for role, s in sorted(self.stats.items())}


class _Side:
    """``Alternation.proxy``'s object for one side."""

    def __init__(self, alternation: Alternation, role: str) -> None:
        self.alternation, self.role = alternation, role

    @property
    def info(self) -> dict[str, Any]:
        return getattr(self.alternation.workers.get(self.role), "info", {}) or {}

    def measure(self, command: dict[str, Any]) -> dict[str, Any]:
        return self.alternation.measure(self.role, command)


def placement_record(placement: Placement, alternation: Alternation | None = None) -> dict[str, Any]:
    """The manifest's ``placement`` block: the decision (``Placement.as_dict``) and, once engines ran, per side the
    sleep mode the engine applied (read back by its worker: ``sleep_mode``; absent for a side evaluated without a live
    worker), its sleeps, wakes and restarts with their seconds (``Alternation.record``), and the totals
    ``sleeps``/``wakes``/``restarts``."""
    out = placement.as_dict()
    if alternation is None:
        return out
    sides = alternation.record()
    for role, worker in alternation.workers.items():
        info = getattr(worker, "info", None) or {}
        if "sleep_mode" in info:
            sides.setdefault(role, {})["sleep_mode"] = bool(info["sleep_mode"])
    out["sides"] = sides
    for key in ("sleeps", "wakes", "restarts"):
        out[key] = sum(int(s.get(key, 0)) for s in sides.values())
    return out


def summary_line(record: dict[str, Any]) -> str:
    """One line for the terminal from a ``placement_record``: the mode, and in ``alternate`` (or once a side was
    restarted, in either mode) each side's sleeps and wakes (count, slowest seconds) and restarts."""
    line = f"placement {record['mode']}"
    parts = []
    for role, s in (record.get("sides") or {}).items():
        sl, wk = s.get("sleep_s") or [], s.get("wake_s") or []
        parts.append(f"{role} {count(s.get('sleeps', 0), 'sleep')}" + (f" (max {max(sl):.2f} s)" if sl else "")
                     + f", {count(s.get('wakes', 0), 'wake')}" + (f" (max {max(wk):.2f} s)" if wk else "")
                     + f", {count(s.get('restarts', 0), 'restart')}")
    shown = record["mode"] == "alternate" or record.get("restarts")
    return line + (": " + "; ".join(parts) if parts and shown else "")
