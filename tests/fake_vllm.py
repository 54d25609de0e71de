"""Stand-ins for ``vllm serve`` and ``vllm bench serve`` in the unit tests of ``evalgate.engine.serve`` (no vLLM).

``python fake_vllm.py serve --port P --mode M --tok-s X --ttft-ms Y --pid-file F``: an HTTP server on 127.0.0.1:P
whose ``GET /health`` answers 200 (``--mode ok``), never (``hang``), or that exits at once with an error line
(``die``); ``ignore-term`` also ignores SIGTERM (the caller must escalate to SIGKILL); ``child`` starts a
grandchild in the same process group that ignores SIGTERM (as vLLM's engine-core processes can linger).
``GET /fake`` returns the side's numbers as JSON (times ``--factors``' i-th value at the i-th call). Every started pid is appended to ``--pid-file``.

``python fake_vllm.py bench serve --port P --num-prompts N --result-dir D --result-filename F [--order-file O]``
writes a result JSON with the keys vLLM's ``vllm/benchmarks/serve.py`` writes, from the server's ``/fake``
numbers; ``FAKE_BENCH=fail`` makes every request fail (vLLM still exits 0), ``FAKE_BENCH=crash`` exits 1.
"""

from __future__ import annotations

import argparse
import http.server
import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def _record(pid_file: str) -> None:
    with open(pid_file, "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()}\n")


def serve(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", default="ok")
    p.add_argument("--tok-s", type=float, default=100.0)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--factors", default="1")  # the numbers of the i-th /fake call are multiplied by factor i
    p.add_argument("--counter-file")  # counts /fake calls across restarts of this side's server
    p.add_argument("--pid-file", required=True)
    a, _ = p.parse_known_args(argv)
    factors = [float(f) for f in a.factors.split(",")]
    counter = Path(a.counter_file or f"{a.pid_file}.{os.getpid()}.count")
    _record(a.pid_file)
    print(f"fake vllm serve args: {argv}", flush=True)
    if a.mode == "die":
        print("ValueError: unrecognized engine argument (fake)", flush=True)
        return 3
    if a.mode in ("ignore-term", "child"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN) if a.mode == "ignore-term" else None
    if a.mode == "child":
        subprocess.Popen([sys.executable, __file__, "linger", a.pid_file])
    numbers = {"tok_s": a.tok_s, "ttft_ms": a.ttft_ms}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/health" and a.mode != "hang":
                body = b""
            elif self.path == "/fake":
                n = int(counter.read_text()) if counter.exists() else 0
                counter.write_text(str(n + 1))
                f = factors[n % len(factors)]
                body = json.dumps({"tok_s": numbers["tok_s"] * f, "ttft_ms": numbers["ttft_ms"] / f}).encode()
            else:
                self.send_error(503)
                return
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    http.server.HTTPServer(("127.0.0.1", a.port), Handler).serve_forever()
    return 0


def linger(pid_file: str) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _record(pid_file)
    time.sleep(600)
    return 0


def bench(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    for name in ("--port", "--num-prompts", "--max-concurrency", "--random-input-len", "--random-output-len"):
        p.add_argument(name, type=int)
    p.add_argument("--result-dir")
    p.add_argument("--result-filename")
    p.add_argument("--goodput", nargs="+")
    a, _ = p.parse_known_args(argv)
    mode = os.environ.get("FAKE_BENCH", "ok")
    if mode == "crash":
        print("RuntimeError: fake benchmark crash", flush=True)
        return 1
    with urllib.request.urlopen(f"http://127.0.0.1:{a.port}/fake", timeout=5) as r:
        numbers = json.loads(r.read())
    order = os.environ.get("FAKE_ORDER_FILE")
    if order:
        with open(order, "a", encoding="utf-8") as f:
            f.write(f"{a.port}\n")
    n = a.num_prompts
    ok = 0 if mode == "fail" else n
    tok_s, ttft = numbers["tok_s"], numbers["ttft_ms"]
    out_tokens = ok * a.random_output_len
    duration = out_tokens / tok_s if ok else 0.01
    doc = {"date": "20261201-000000", "backend": "vllm", "num_prompts": n, "request_rate": "inf",
           "max_concurrency": a.max_concurrency, "duration": duration, "completed": ok, "failed": n - ok,
           "total_input_tokens": ok * a.random_input_len, "total_output_tokens": out_tokens,
           "request_throughput": ok / duration, "output_throughput": out_tokens / duration,
           "total_token_throughput": (out_tokens + ok * a.random_input_len) / duration}
    for metric, median in (("ttft", ttft), ("tpot", ttft / 10), ("itl", ttft / 10)):
        doc.update({f"mean_{metric}_ms": median, f"median_{metric}_ms": median, f"std_{metric}_ms": 0.0,
                    f"p50_{metric}_ms": median, f"p99_{metric}_ms": 2 * median})
    if a.goodput:  # as vLLM counts it: a request is good when it meets every objective; here every request's TTFT
        # is the median and its TPOT a tenth of it
        slo = {k: float(v) for k, v in (x.split(":") for x in a.goodput)}
        good = ok if ttft <= slo.get("ttft", math.inf) and ttft / 10 <= slo.get("tpot", math.inf) else 0
        doc["request_goodput"] = good / duration
    Path(a.result_dir).mkdir(parents=True, exist_ok=True)
    (Path(a.result_dir) / a.result_filename).write_text(json.dumps(doc), encoding="utf-8")
    return 0


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "serve":
        sys.exit(serve(rest))
    if cmd == "bench":
        sys.exit(bench(rest[1:]))
    sys.exit(linger(rest[0]))
