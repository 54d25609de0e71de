"""What the measured throughput costs: dollars per million output tokens per side, the switch's saving, and the
utilisation below which an API is cheaper (issue 27, item 4). Pure computation, no I/O.

Inputs are the ``speed`` block (``block.SpeedBlock`` from ``speed.speed_block``: per concurrency level the median output
tok/s of each side and the speed-up's interval) and the ``economics`` keys of ``thresholds.yaml`` (``ConfigPolicy.economics``).
Formulas (units: US dollars, GPU-hours, output tokens per second):

* cost per million output tokens of one side at full load (the GPUs busy the whole hour at the measured throughput)::

      usd_per_mtok = gpu_hour_usd * gpus * 1e6 / (output_tok_s * 3600)

* the switch's cost change, candidate over baseline: ``cost_ratio = (gpus_cand / gpus_base) / speed_up`` with
  ``speed_up = cand / base`` output tok/s (medians), so the speed-up's interval ``[lo, hi]`` maps to the cost ratio's
  interval ``[g / hi, g / lo]`` (``g = gpus_cand / gpus_base``; 1 / x is decreasing, so the bounds swap). The change
  is ``cost_ratio - 1`` (negative: the candidate is cheaper); the saving is ``usd_per_mtok_base - usd_per_mtok_cand``.
* against an API priced ``api_usd_per_mtok``: at utilisation ``u`` (share of the hour the GPUs do useful work at
  that throughput; the hour is paid in full) self-hosting costs ``usd_per_mtok / u``, so it is cheaper when
  ``u > u* = usd_per_mtok / api_usd_per_mtok``, the break-even utilisation (``u* > 1``: the API is cheaper even at
  100 %). The saving at full load is ``api_usd_per_mtok - usd_per_mtok`` (share: ``1 - u*``).

Economics is reported beside the verdict and never changes it. Its block's typed records (:class:`EconomicsBlock`,
:class:`EconomicsLevel`, :class:`EconomicsSide`) live here, as the speed block's live in ``block``: the verdict
(``report.verdict``, which re-exports them) and the ablation's rows (``gate.recommend.AblationRow``) both carry them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from evalgate.fmt import num
from evalgate.results.document import Number
from evalgate.results.document import Record as _Record
from evalgate.results.document import described as _f
from evalgate.results.document import described_list as _list
from evalgate.speed.block import SpeedBlock

__all__ = ["SECONDS_PER_HOUR", "TOKENS_PER_MILLION", "EconomicsBlock", "EconomicsLevel", "EconomicsSide",
           "break_even_utilisation", "cost_ratio_interval", "economics_block", "economics_lines",
           "economics_properties", "engine_gpus", "pct", "usd", "usd_per_mtok", "utilisation"]

SECONDS_PER_HOUR = 3600.0
TOKENS_PER_MILLION = 1e6
ROLES = ("baseline", "candidate")


class EconomicsSide(_Record):
    """One side's cost at one concurrency level, at full load (``economics.economics_block``); US dollars."""

    output_tok_s: Number | None = _f("the side's median output tok/s at this level")
    usd_per_mtok: Number | None = _f("gpu_hour_usd * gpus * 1e6 / (output tok/s * 3600): $ per million output tokens")
    break_even_utilisation: Number | None = _f("usd_per_mtok / api_usd_per_mtok: the share of the hour the GPUs must be "
                                               "busy for self-hosting to beat the API (> 1: never); None without an "
                                               "API price")
    api_saving_usd_per_mtok: Number | None = _f("api_usd_per_mtok − usd_per_mtok (full load); None without an API price")
    api_saving_share: Number | None = _f("1 − break_even_utilisation (full load); None without an API price")


class EconomicsLevel(_Record):
    """The switch's cost change at one concurrency level (``economics.economics_block``)."""

    concurrency: int = _f("concurrent requests", 0)
    baseline: EconomicsSide = Field(default_factory=EconomicsSide, description="the baseline's cost")
    candidate: EconomicsSide = Field(default_factory=EconomicsSide, description="the candidate's cost")
    saving_usd_per_mtok: Number | None = _f("baseline − candidate $ per million output tokens (> 0: the switch saves)")
    cost_change: Number | None = _f("candidate / baseline cost − 1 (negative: cheaper) = (GPU ratio / speed-up) − 1")
    cost_change_low: Number | None = _f("its interval's low end, from the speed-up's high end; None without one")
    cost_change_high: Number | None = _f("its interval's high end, from the speed-up's low end; None without one")
    level: Number | None = _f("the interval's level (the speed-up's)")


class EconomicsBlock(_Record):
    """What the measured throughput costs (``economics``; ``thresholds.yaml`` ``economics``). Report only: never
    changes the verdict."""

    gpu_hour_usd: Number | None = _f("price of one GPU-hour, US dollars")
    api_usd_per_mtok: Number | None = _f("the API price compared against, $ per million output tokens; None: not set")
    gpus: dict[str, int] = Field(default_factory=dict, description="GPUs per engine, per side")
    gpus_source: str = _f("``economics.gpus`` or the engine args' parallel sizes", "")
    levels: list[EconomicsLevel] = _list("one row per measured concurrency level")


def usd_per_mtok(gpu_hour_usd: float, gpus: int, output_tok_s: float) -> float:
    """Dollars per million output tokens at full load: ``gpu_hour_usd * gpus * 1e6 / (output_tok_s * 3600)``.

    Args:
        gpu_hour_usd: price of one GPU-hour, US dollars (> 0). gpus: GPUs one engine occupies (>= 1).
        output_tok_s: measured output tokens per second of that engine (> 0).
    Returns:
        US dollars per 10^6 output tokens.
    Raises:
        ValueError: a non-positive or non-finite argument (no throughput, no cost).
    """
    for name, value in (("gpu_hour_usd", gpu_hour_usd), ("gpus", gpus), ("output_tok_s", output_tok_s)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return gpu_hour_usd * gpus * TOKENS_PER_MILLION / (output_tok_s * SECONDS_PER_HOUR)


def break_even_utilisation(cost_usd_per_mtok: float, api_usd_per_mtok: float) -> float:
    """``u* = cost_usd_per_mtok / api_usd_per_mtok``: the share of the hour (0..1; above 1: never) the GPUs must be busy
    at the measured throughput for self-hosting to cost less per output token than the API. Raises ValueError for a
    non-positive API price."""
    if not api_usd_per_mtok > 0:
        raise ValueError(f"api_usd_per_mtok must be > 0, got {api_usd_per_mtok!r}")
    return cost_usd_per_mtok / api_usd_per_mtok


def cost_ratio_interval(ci_low: float | None, ci_high: float | None,
                        gpu_ratio: float = 1.0) -> tuple[float | None, float | None]:
    """The interval of the cost ratio (candidate / baseline $ per output token) from the speed-up's interval
    ``[ci_low, ci_high]`` (candidate / baseline output tok/s): ``[gpu_ratio / ci_high, gpu_ratio / ci_low]`` (the
    bounds swap, 1 / x being decreasing). ``gpu_ratio`` = candidate GPUs / baseline GPUs. ``(None, None)`` when the
    speed-up has no interval (fewer than 2 repeats) or a bound is not > 0 and finite."""
    ok = all(isinstance(b, (int, float)) and math.isfinite(b) and b > 0 for b in (ci_low, ci_high))
    if not ok:
        return None, None
    return gpu_ratio / ci_high, gpu_ratio / ci_low  # type: ignore[operator]


def engine_gpus(engine_args: Mapping[str, Any] | None) -> int:
    """GPUs one engine occupies: ``tensor_parallel_size * pipeline_parallel_size`` of its engine args (each 1 when
    unset or not a positive integer)."""
    args = engine_args or {}
    n = 1
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        v = args.get(key)
        n *= v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else 1
    return n


def _side(cost: float, tok_s: float, api: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {"output_tok_s": tok_s, "usd_per_mtok": cost}
    if api is not None:
        u = break_even_utilisation(cost, api)
        out.update(break_even_utilisation=u, api_saving_usd_per_mtok=api - cost, api_saving_share=1 - u)
    return out


def economics_block(speed: SpeedBlock | None, settings: Mapping[str, Any] | None,
                    engine_args: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """The ``economics`` block of ``verdict.json`` (``verdict.EconomicsBlock``), or None when there is nothing to cost:
    no ``economics`` settings, or no measured speed (absent, failed, or no level with both medians > 0).

    Args:
        speed: the ``speed`` block (``block.SpeedBlock`` from ``speed.speed_block``; None: not measured): its
            ``levels`` with ``concurrency``, ``ci_low``, ``ci_high``, ``level`` and per side ``median`` output tok/s.
        settings: ``ConfigPolicy.economics``: ``gpu_hour_usd`` (required), ``api_usd_per_mtok`` and ``gpus``
            (optional).
        engine_args: per side (``baseline``/``candidate``) the requested engine args; they give each side's GPUs
            (``engine_gpus``) when ``gpus`` is not set.
    Returns:
        ``{gpu_hour_usd, api_usd_per_mtok, gpus: {baseline, candidate}, gpus_source, levels: [...]}``; per level
        ``concurrency``, ``baseline``/``candidate`` (``output_tok_s``, ``usd_per_mtok`` and, with an API price,
        ``break_even_utilisation``, ``api_saving_usd_per_mtok``, ``api_saving_share``), ``saving_usd_per_mtok``
        (baseline − candidate), ``cost_change`` (candidate / baseline − 1; negative: cheaper) with ``cost_change_low``
        / ``cost_change_high`` (from the speed-up's interval, None without one) and the interval's ``level``.
    """
    if not settings or speed is None or not speed.measured:
        return None
    price = float(settings["gpu_hour_usd"])
    api = settings.get("api_usd_per_mtok")
    api = None if api is None else float(api)
    if settings.get("gpus") is not None:
        gpus = {role: int(settings["gpus"]) for role in ROLES}
        source = "economics.gpus"
    else:
        gpus = {role: engine_gpus(engine_args.get(role)) for role in ROLES}
        source = "tensor_parallel_size * pipeline_parallel_size"
    levels = []
    for row in speed.levels:
        tok = {"baseline": row.baseline.median, "candidate": row.candidate.median}
        if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in tok.values()):
            continue
        cost = {role: usd_per_mtok(price, gpus[role], tok[role]) for role in ROLES}
        g = gpus["candidate"] / gpus["baseline"]
        low, high = cost_ratio_interval(row.ci_low, row.ci_high, g)
        levels.append({
            "concurrency": row.concurrency,
            **{role: _side(cost[role], tok[role], api) for role in ROLES},
            "saving_usd_per_mtok": cost["baseline"] - cost["candidate"],
            "cost_change": cost["candidate"] / cost["baseline"] - 1,
            "cost_change_low": None if low is None else low - 1,
            "cost_change_high": None if high is None else high - 1,
            "level": row.level,
        })
    if not levels:
        return None
    return {"gpu_hour_usd": price, "api_usd_per_mtok": api, "gpus": gpus, "gpus_source": source, "levels": levels}


def pct(x: float | None) -> str:
    """A signed share as a percentage, signed as ``evalgate.fmt.num`` signs: ``−26 %``, ``+4 %``, ``0 %``."""
    if x is None:
        return "n/a"
    return f"{num(100 * x, 0)} %"


def usd(x: float | None) -> str:
    """Dollars with two decimals, two significant digits below $0.10: ``$0.42``, ``$0.0031``, ``−$1.20``; ``n/a``
    for None."""
    if x is None:
        return "n/a"
    sign, a = ("\u2212" if x < 0 else ""), abs(x)
    return f"{sign}${a:,.2f}" if a >= 0.1 else f"{sign}${a:.2g}" if a else "$0"


def economics_lines(block: Mapping[str, Any] | None) -> list[str]:
    """One line per concurrency level, e.g. ``c=256: $0.42 → $0.31 per M output tokens (−26 % [−31 %, −20 %]);
    API cheaper below 38 % utilisation`` (the API clause names each side where they differ; none without an API
    price), after a header line with the prices. Empty without a block."""
    if not block:
        return []
    api = block.get("api_usd_per_mtok")
    gpus = block.get("gpus") or {}
    g = (f"{gpus.get('baseline')} GPU(s) per engine" if gpus.get("baseline") == gpus.get("candidate")
         else f"{gpus.get('baseline')} → {gpus.get('candidate')} GPUs per engine")
    head = f"cost (${block['gpu_hour_usd']:g}/GPU-hour, {g}" + (f", API ${api:g} per M output tokens" if api else "")
    out = [head + ", at full load):"]
    for lv in block.get("levels") or []:
        b, c = lv["baseline"], lv["candidate"]
        ci = (f" [{pct(lv['cost_change_low'])}, {pct(lv['cost_change_high'])}]"
              if lv.get("cost_change_low") is not None else "")
        line = (f"c={lv['concurrency']}: {usd(b['usd_per_mtok'])} \u2192 {usd(c['usd_per_mtok'])} per M output tokens "
                f"({pct(lv['cost_change'])}{ci})")
        if api:
            line += "; " + _api_words(b, c)
        out.append(line)
    return out


def utilisation(u: float | None) -> str:
    """A break-even utilisation in words: ``below 38 %``; ``never (API cheaper even at 100 %)`` above 1."""
    if u is None:
        return "n/a"
    return "never (API cheaper even at 100 %)" if u > 1 else f"{100 * u:.0f} %"


def _api_words(b: Mapping[str, Any], c: Mapping[str, Any]) -> str:
    """``API cheaper below 38 % utilisation`` (the candidate's figure, the baseline's in brackets when it differs);
    ``API cheaper even at 100 % utilisation`` when the break-even is above 1."""
    def one(u: float) -> str:
        return "even at 100 %" if u > 1 else f"below {100 * u:.0f} %"

    cu, bu = c["break_even_utilisation"], b["break_even_utilisation"]
    text = f"API cheaper {one(cu)} utilisation"
    if one(bu) != one(cu):
        text += f" (baseline: {one(bu)})"
    return text


def economics_properties(block: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """JUnit ``<property>`` pairs of the economics block (none without one): per level ``usd_per_mtok_c<c>_<side>``,
    ``cost_change_c<c>`` (with its interval) and, with an API price, ``break_even_utilisation_c<c>_<side>``."""
    if not block:
        return []
    out: list[tuple[str, str]] = [("gpu_hour_usd", f"{block['gpu_hour_usd']:g}")]
    for lv in block.get("levels") or []:
        c = lv["concurrency"]
        for role in ROLES:
            out.append((f"usd_per_mtok_c{c}_{role}", f"{lv[role]['usd_per_mtok']:.6g}"))
        out.append((f"cost_change_c{c}", f"{lv['cost_change']:.4f}"))
        if lv.get("cost_change_low") is not None:
            out.append((f"cost_change_c{c}_ci", f"[{lv['cost_change_low']:.4f}, {lv['cost_change_high']:.4f}]"))
        for role in ROLES:
            if lv[role].get("break_even_utilisation") is not None:
                out.append((f"break_even_utilisation_c{c}_{role}", f"{lv[role]['break_even_utilisation']:.4f}"))
    return out
