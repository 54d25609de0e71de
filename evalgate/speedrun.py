"""Parent side of the speed measurement: interleaved repeats on two live engine workers (``runner.Worker``).

Both workers have finished their suites and keep their engines warm. Per concurrency level: one warm-up pass per
side (different prompts, a short output; excluded), then ``repeats`` timed passes per side, interleaved: repeat i
runs baseline then candidate when i is even, candidate then baseline when odd (an ABBA order, so a steady drift of
the host's load does not favour the side measured second). Statistics: ``evalgate.speed``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from evalgate.speed import TrafficProfile, compare_speed, speed_block

log = logging.getLogger("evalgate")
WARMUP_OUTPUT_LEN = 16  # tokens: enough to run the decode path at the level's batch size


def measure_speed(workers: Mapping[str, Any], profile: TrafficProfile,
                  progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure ``profile`` on both sides and compare; ``workers`` maps ``baseline``/``candidate`` to an object with
    ``measure(command) -> result`` (``throughput.measure``'s fields) and ``info`` (its ``ready`` reply).

    Returns:
        The ``speed`` block (``speed.speed_block``) with every raw repeat under ``sides.<role>.runs``.
    Raises:
        SpeedError (from a worker): a measurement failed.
    """
    say = progress or log.info
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "candidate": []}
    levels = []
    for c in profile.concurrency:
        n = profile.prompts_at(c)
        cmd = {"input_len": profile.input_len, "output_len": profile.output_len, "num_prompts": n,
               "prompts": profile.prompts, "concurrency": c}
        warm = {**cmd, "output_len": min(profile.output_len, WARMUP_OUTPUT_LEN), "num_prompts": min(n, c), "seed": 1,
                "label": "warm-up"}
        for role in ("baseline", "candidate"):
            workers[role].measure(warm)
        out: dict[str, list[float]] = {"baseline": [], "candidate": []}
        total: dict[str, list[float]] = {"baseline": [], "candidate": []}
        for i in range(profile.repeats):
            order = ("baseline", "candidate") if i % 2 == 0 else ("candidate", "baseline")
            for role in order:
                r = workers[role].measure({**cmd, "label": f"repeat {i + 1}/{profile.repeats}"})
                out[role].append(float(r["output_tok_s"]))
                total[role].append(float(r["total_tok_s"]))
                runs[role].append({"concurrency": c, "repeat": i, **r})
            say(f"speed c={c} repeat {i + 1}/{profile.repeats}: baseline {out['baseline'][-1]:,.0f}, candidate "
                f"{out['candidate'][-1]:,.0f} output tok/s")
        levels.append(compare_speed(c, out["baseline"], out["candidate"], profile.level,
                                    total["baseline"], total["candidate"]))
    sides = {role: {**{k: v for k, v in (workers[role].info or {}).items() if k != "event"}, "runs": runs[role]}
             for role in ("baseline", "candidate")}
    return speed_block(levels, profile, sides)
