"""How busy the gate keeps the engine: a suite through the gate vs the raw engine on the same prompts.

Run (about 10 minutes on 2 CPU cores for both sides and the three shipped suites)::

    python benchmarks/engine_busy.py [--configs baseline fp16-state] [--suites coding docparse finance]
                                     [--limit N] [--out FILE.json]

For each config (one engine process each, started with the config's engine args), for each suite:

* **raw**: the prompts the gate sends (captured from lm-eval through the gate's own ``_evaluate_suite``), one
  ``LLM.generate`` per (stop strings, token budget) group with the gate's sampling parameters (greedy, top-5
  decode-time log-probs): the engine's own work, the floor of the gate's cost;
* **gate**: the suite as the engine worker runs it (``engine.suite_eval.evaluate_suite`` through ``engine.make_lm`` with a
  fresh generation journal, scoring included: the coding suite executes every completion in the sandbox).

* **old** (with ``--old-tree DIR``, e.g. a checkout of main): the same, through that tree's ``engine.make_lm`` and
  its suites (for evalgate before this change: chunks of 32 prompts, coding programs run one by one after
  generation), in the same engine process.

They alternate raw, gate[, old], raw (``--reps`` times) in one process, so load on the machine hits all alike.
Printed per suite: seconds of each (mean), the gate's engine-submission seconds, the seconds its scorer waited on
sandboxed programs (the coding suite's tail after the last generation), **busy = raw / gate** (1.0: the gate costs
exactly the engine's time; the goal is >= 0.9) and ``busy_generation`` = raw / engine submissions (the gate's
generation window alone), and the same for old.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


class _Captured(Exception):
    """Raised by the capturing model to stop lm-eval once it has handed over its requests."""

    def __init__(self, requests: list[Any]) -> None:
        super().__init__("captured")
        self.requests = requests


def _capture_requests(suite: dict[str, Any], limit: int | None, sampling: Any) -> list[tuple[str, dict[str, Any]]]:
    from lm_eval.api.model import LM

    from evalgate.worker.suite_eval import evaluate_suite as _evaluate_suite

    class Capture(LM):
        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            raise _Captured([r.args for r in requests])

        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            raise TypeError("generate_until only")

        loglikelihood_rolling = loglikelihood

    try:
        _evaluate_suite(Capture(), suite, limit, sampling)
    except _Captured as c:
        return c.requests
    raise RuntimeError(f"suite {suite['name']} sent no generate_until requests")


def _raw(engine: Any, requests: list[tuple[str, dict[str, Any]]], logprobs: int) -> tuple[float, dict[str, str]]:
    """One ``LLM.generate`` per (stop, budget) group of the unique requests; (seconds, key -> text)."""
    from vllm import SamplingParams

    from evalgate.worker.lm_adapter import request_key, request_params

    groups: dict[tuple[tuple[str, ...], int], dict[str, str]] = {}
    for context, kwargs in requests:
        stop, max_toks = request_params(kwargs, engine.sampling)
        groups.setdefault((tuple(stop), max_toks), {})[request_key(context, stop, max_toks)] = context
    texts: dict[str, str] = {}
    s = engine.sampling
    t0 = time.perf_counter()
    for (stop, max_toks), prompts in groups.items():
        params = SamplingParams(temperature=s.temperature, top_p=s.top_p, seed=s.seed, max_tokens=max_toks,
                                stop=list(stop) or None, logprobs=logprobs or None)
        outs = engine.llm.generate(list(prompts.values()), params, use_tqdm=False)
        texts.update({k: o.outputs[0].text for k, o in zip(prompts, outs)})
    return time.perf_counter() - t0, texts


def _old_make_lm(tree: Path) -> Any:
    """``make_lm`` of another evalgate tree's ``engine.py`` (loaded under another module name)."""
    spec = importlib.util.spec_from_file_location("evalgate_old_engine", tree / "evalgate" / "engine.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.make_lm


def _gate(engine: Any, make_lm: Any, suite: dict[str, Any], limit: int | None,
          logprobs: int) -> tuple[float, float | None, float, dict[str, str]]:
    """The suite through an adapter and lm-eval; (seconds, engine-submission seconds or None, seconds the scorer
    waited on sandboxed programs, key -> text)."""
    from evalgate.results.store import GenerationJournal
    from evalgate.suites import scoring
    from evalgate.worker.suite_eval import evaluate_suite as _evaluate_suite

    extra: dict[str, Any] = {}
    if "on_answer" in inspect.signature(make_lm).parameters:
        from evalgate.suites import scoring

        extra["on_answer"] = scoring.on_answer
    with tempfile.TemporaryDirectory(prefix="engine-busy-") as tmp:
        lm = make_lm(engine, GenerationJournal(Path(tmp) / "journal.jsonl"), logprobs=logprobs, **extra)
        t0, w0 = time.perf_counter(), scoring.wait_seconds()
        _evaluate_suite(lm, suite, limit, engine.sampling)
        secs = time.perf_counter() - t0
    return secs, getattr(lm, "engine_s", None), scoring.wait_seconds() - w0, {k: r["text"] for k, r in lm.records.items()}


def _side(config: str, suites: list[str], limit: int | None, reps: int, old_tree: Path | None) -> dict[str, Any]:
    from evalgate.engine.protocol import LOGPROBS_K
    from evalgate.inputs.config import load_config
    from evalgate.models.embedded import resolve_model
    from evalgate.suites.discovery import load_suite
    from evalgate.worker.engine_args import prepare_process_env
    from evalgate.worker.lm_adapter import make_lm
    from evalgate.worker.vllm_engine import VllmEngine

    cfg = load_config(config)
    prepare_process_env(dict(cfg.env))
    engine = VllmEngine(resolve_model(cfg.model), dict(cfg.engine_args), cfg.sampling)
    out: dict[str, Any] = {"config": config, "suites": {}}
    variants = {"gate": (make_lm, None)}
    if old_tree is not None:
        variants["old"] = (_old_make_lm(old_tree), old_tree / "suites")
    for name in suites:
        specs = {}
        for label, (_, suites_dir) in variants.items():
            s = load_suite(name, suites_dir)
            specs[label] = {"name": s.name, "dir": str(s.path.parent), "tasks": list(s.tasks), "metrics": s.primary_metric}
        requests = _capture_requests(specs["gate"], limit, cfg.sampling)
        secs: dict[str, list[float]] = {"raw": [], **{label: [] for label in variants}}
        engine_s: dict[str, list[float]] = {label: [] for label in variants}
        sandbox_s: dict[str, list[float]] = {label: [] for label in variants}
        texts: dict[str, dict[str, str]] = {}
        for _ in range(reps):
            for step in ("raw", *variants, "raw"):
                if step == "raw":
                    t, texts["raw"] = _raw(engine, requests, LOGPROBS_K)
                else:
                    t, gen, waited, texts[step] = _gate(engine, variants[step][0], specs[step], limit, LOGPROBS_K)
                    sandbox_s[step].append(waited)
                    if gen is not None:
                        engine_s[step].append(gen)
                secs[step].append(t)
        mean = {k: sum(v) / len(v) for k, v in secs.items()}
        row: dict[str, Any] = {"requests": len(requests), "seconds": secs, "engine_submission_s": engine_s,
                               "sandbox_wait_s": sandbox_s}
        line = f"engine-busy: {config:10s} {name:8s} {len(requests):3d} requests: raw {mean['raw']:6.1f} s"
        for label in variants:
            same = sum(texts["raw"].get(k) == t for k, t in texts[label].items())
            row[label] = {"busy": mean["raw"] / mean[label], "same_text_as_raw": same, "unique": len(texts[label])}
            sub = f", engine submissions {sum(engine_s[label]) / len(engine_s[label]):5.1f} s" if engine_s[label] else ""
            sub += f", sandbox wait {sum(sandbox_s[label]) / len(sandbox_s[label]):5.1f} s"
            if engine_s[label]:
                row[label]["busy_generation"] = mean["raw"] / (sum(engine_s[label]) / len(engine_s[label]))
            line += (f" | {label} {mean[label]:6.1f} s{sub}, busy {mean['raw'] / mean[label]:.3f}, "
                     f"same text {same}/{len(texts[label])}")
        out["suites"][name] = row
        print(line, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", nargs="+", default=["baseline", "fp16-state"])
    p.add_argument("--suites", nargs="+", default=["coding", "docparse", "finance"])
    p.add_argument("--limit", type=int, default=None, help="items per task (default: all)")
    p.add_argument("--reps", type=int, default=1, help="raw/gate/gate/raw rounds per suite")
    p.add_argument("--old-tree", type=Path, default=None, help="also measure this evalgate checkout's adapter")
    p.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    p.add_argument("--side", help=argparse.SUPPRESS)  # internal: run one config in this process
    args = p.parse_args(argv)
    if args.side:
        result = _side(args.side, args.suites, args.limit, args.reps, args.old_tree)
        print("ENGINE-BUSY-RESULT " + json.dumps(result), flush=True)
        return 0
    results: dict[str, Any] = {"load_before": os.getloadavg(), "sides": []}
    for config in args.configs:  # one process per engine (vLLM starts one engine per process cleanly)
        cmd = [sys.executable, __file__, "--side", config, "--suites", *args.suites, "--reps", str(args.reps)]
        if args.limit is not None:
            cmd += ["--limit", str(args.limit)]
        if args.old_tree is not None:
            cmd += ["--old-tree", str(args.old_tree.resolve())]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("ENGINE-BUSY-RESULT ")]
        if proc.returncode != 0 or not lines:
            print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
            return 3
        print("\n".join(ln for ln in proc.stdout.splitlines() if ln.startswith("engine-busy: ")), flush=True)
        results["sides"].append(json.loads(lines[-1].split(" ", 1)[1]))
    results["load_after"] = os.getloadavg()
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
