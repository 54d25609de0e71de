"""Discovery and identity of evaluation suites.

A suite is a folder ``<suites_dir>/<name>/`` holding lm-eval YAML files (``*.yaml`` / ``*.yml`` at its
top level) and the Python they reference (``utils.py``). Each YAML defines one lm-eval task, or one lm-eval
``group`` whose ``task:`` list names tasks of the suite and lm-eval's own built-in tasks, groups and tags
(``gsm8k``, ``mmlu_pro``, ...), with per-member overrides as lm-eval spells them (``num_fewshot``,
``metadata``, ...). evalgate adds one key of its own, ``limit`` at the top of a suite YAML: at most that many
items of each of its tasks (``--limit`` still caps it). Relative ``dataset_kwargs.data_files`` resolve against
the folder of the task's YAML (lm-eval would resolve them against the working directory). Results are keyed by
:attr:`Suite.content_hash`, so editing any file of a suite (or of a suite it declares in
``metadata.evalgate.uses_suites``) starts a fresh baseline. A task that sets lm-eval's ``doc_to_image`` is an image
task (``metadata.evalgate.modality: image`` may say so, and must agree), and a suite with one is an image suite
(:attr:`Suite.modality`): it runs only when named and only on a model that reads images.

This module resolves a suite's tasks (groups, built-in members) and loads suites; the rest lives by concept and is
re-exported here: the folder, its YAML and the resolved types in :mod:`evalgate.suites.files`, lm-eval's built-in
index and task manager in :mod:`evalgate.suites.taskindex`, data availability in :mod:`evalgate.suites.data`, a task's own
notes and item count in :mod:`evalgate.suites.tasknotes`. YAML is read by the one strict reader (:mod:`evalgate.inputs.yamlio`,
tolerating lm-eval's ``!function`` tag); lm-eval is imported only to read the index of built-in tasks (about 8 s,
and only for a suite that names one) and in :func:`task_manager`.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError
from evalgate.suites.data import HUB_HOST, check_datasets, datasets_cache_dir, hub_offline
from evalgate.suites.files import (
    EVALGATE_KEYS,
    GROUP_FIELDS,
    LOCAL_BUILDERS,
    MIXED,
    SUITES_DIR,
    SUITES_ENV,
    Suite,
    TaskSpec,
    check_declared_uses,
    check_dir,
    check_metrics,
    content_hash,
    default_suites_dir,
    flat_files,
    id_field,
    read_suite_yaml,
    resolve_files,
    resolve_local_paths,
    suite_limit,
    suite_names,
    suite_yamls,
    task_modality,
    uses_suites,
)
from evalgate.suites.taskindex import builtin_index, task_manager, with_metric_defaults
from evalgate.suites.tasknotes import TaskNotes, count_items, task_notes

__all__ = ["EVALGATE_KEYS", "GROUP_FIELDS", "HUB_HOST", "LOCAL_BUILDERS", "SUITES_DIR", "SUITES_ENV", "Suite",
           "TaskNotes", "TaskSpec", "builtin_index", "check_datasets", "content_hash", "count_items",
           "datasets_cache_dir", "default_suites_dir", "hub_offline", "list_suites", "load_suite",
           "resolve_local_paths", "task_manager", "task_notes"]


class _Resolver:
    """Turns a suite's YAML files into its leaf tasks (``TaskSpec``), reading lm-eval's built-in index lazily."""

    def __init__(self, local: dict[str, tuple[dict[str, Any], Path]], groups: dict[str, tuple[dict[str, Any], Path]],
                 root: Path, suite: str):
        self.local, self.groups = local, groups
        self.root, self.suite = root, suite  # the suites folder and this suite's name (for ``uses_suites``)
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
        metric = check_metrics(with_metric_defaults(cfg) if builtin else cfg, path, what)
        kwargs = cfg.get("dataset_kwargs") if isinstance(cfg.get("dataset_kwargs"), dict) else {}
        files = flat_files(resolve_files(kwargs.get("data_files"), folder or path.parent)) if not builtin else \
            flat_files(kwargs.get("data_files"))
        dp = cfg.get("dataset_path")
        return TaskSpec(name=name, source=path, builtin=builtin, metric=metric,
                        output_type=str(cfg.get("output_type") or "generate_until"),
                        dataset_path=None if dp is None else str(dp), dataset_name=cfg.get("dataset_name"),
                        data_files=files, generated=bool(cfg.get("custom_dataset")), limit=limit,
                        id_field=id_field(cfg, path), modality=task_modality(cfg, path, what),
                        uses_suites=uses_suites(cfg, path, self.root, self.suite), config=dict(cfg))

    @staticmethod
    def _builtin(name: str) -> Any:
        return builtin_index().get(name)

    @staticmethod
    def _unknown(name: str) -> str:
        close = difflib.get_close_matches(name, list(builtin_index()), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"task {name!r} is neither a task of this suite nor one of lm-eval's built-in tasks or groups{hint}"



def load_suite(name: str, suites_dir: Path | str | None = None) -> Suite:
    """Load suite ``name`` from ``suites_dir`` (default :func:`default_suites_dir`).

    A group naming a task that is not the suite's own reads lm-eval's built-in index (:func:`builtin_index`).

    Raises:
        ConfigError: the name is not a plain folder name; the suite folder does not exist (the
            message suggests close names); it holds no task YAML; a task's ``metadata.evalgate.modality`` or
            ``uses_suites`` is malformed (``files.task_modality``, ``files.uses_suites``), or the suite's Python loads
            another suite's module that no task lists in ``uses_suites`` (``files.check_declared_uses``); a YAML cannot be
            parsed, is neither a task (``task: name``) nor a group (``group: name`` with a ``task:`` list), repeats a key, has a bad
            ``limit``, or a task (its own or built-in) has no non-empty ``metric_list`` or its primary metric has
            ``higher_is_better`` other than true or an ``aggregation`` other than ``mean``; a group names a task
            that neither the suite nor lm-eval has; two YAML files define, or two groups list, the same task.
    """
    root = check_dir(suites_dir)
    path = _suite_folder(name, root)
    local, groups = _read_definitions(path)
    resolver = _Resolver(local, groups, root, name)
    specs: list[TaskSpec] = []
    entries: list[tuple[str, int | None]] = []
    modalities: list[tuple[str, str]] = []
    mixed: list[tuple[str, Path, str, str]] = []
    for gname, (cfg, y) in groups.items():
        members = resolver._group(gname, None, {}, y, "task", suite_limit(cfg, y), 0)
        specs += members
        entries.append((gname, suite_limit(cfg, y)))
        kinds = {m.modality for m in members}
        modalities.append((gname, kinds.pop() if len(kinds) == 1 else MIXED))
        if modalities[-1][1] == MIXED:  # refused under a chat template (evaluate.modality.check_mixed_groups)
            mixed.append((gname, y, next(m.name for m in members if m.modality == "image"),
                          next(m.name for m in members if m.modality != "image")))
    in_groups = {s.name for s in specs}
    for task, (cfg, y) in local.items():
        if task not in in_groups:
            spec = resolver._spec(task, cfg, y, False, suite_limit(cfg, y))
            specs.append(spec)
            entries.append((task, suite_limit(cfg, y)))
            modalities.append((task, spec.modality))
    seen: dict[str, Path] = {}
    for s in specs:
        if s.name in seen:
            raise ConfigError(f"task {s.name!r} is listed twice in the suite (also by {seen[s.name].name})",
                              path=s.source, field="task")
        seen[s.name] = s.source
    specs.sort(key=lambda s: s.name)
    check_declared_uses(path, specs)  # a suite_module call for a suite not in uses_suites would key results stale
    uses = tuple(sorted({u for s in specs for u in s.uses_suites}))
    return Suite(name=name, path=path, tasks=tuple(s.name for s in specs),
                 primary_metric={s.name: s.metric for s in specs},
                 content_hash=content_hash(path, [root / u for u in uses]),
                 specs=tuple(specs), entries=tuple(entries), builtins=resolver.builtin_used, uses=uses,
                 entry_modality=tuple(modalities), mixed_groups=tuple(mixed))


def _suite_folder(name: str, root: Path) -> Path:
    """The folder of suite ``name`` under ``root``; ConfigError for a name that is not a plain folder name, a file,
    or a missing folder (suggesting the closest suite name)."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith((".", "_")):
        raise ConfigError(f"invalid suite name {name!r}", path=root)
    path = root / name
    if path.exists() and not path.is_dir():
        raise ConfigError("is a file, not a folder: a suite is a folder of task YAML files", path=path)
    if not path.is_dir():
        known = suite_names(root)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known suites: {', '.join(known) or 'none'}"
        raise ConfigError(f"no suite named {name!r}{hint}", path=root)
    return path


Definitions = dict[str, tuple[dict[str, Any], Path]]  # name -> (its YAML as read, the file)


def _read_definitions(path: Path) -> tuple[Definitions, Definitions]:
    """The suite folder's own tasks and groups, each YAML read and checked (a name, defined once; a task's
    primary metric)."""
    yamls = suite_yamls(path)
    if not yamls:
        raise ConfigError("suite folder has no task YAML (*.yaml)", path=path)
    local: Definitions = {}
    groups: Definitions = {}
    for y in yamls:
        cfg = read_suite_yaml(y)
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
        check_metrics(cfg, y)
        local[task] = (cfg, y)
    return local, groups


def list_suites(suites_dir: Path | str | None = None) -> list[Suite]:
    """Every suite under ``suites_dir`` (folders holding at least one ``*.yaml``), by name.

    Folders named ``__pycache__`` or starting with ``.``/``_`` and folders without YAML are
    skipped. Raises ConfigError as :func:`load_suite` does, for a missing ``suites_dir``, and
    when two suites define the same task name (lm-eval would silently keep only one).
    """
    root = check_dir(suites_dir)
    suites = [load_suite(n, root) for n in suite_names(root) if suite_yamls(root / n)]
    owner: dict[str, str] = {}
    for s in suites:
        for t in s.tasks:
            if t in owner:
                raise ConfigError(f"task {t!r} is defined by suites {owner[t]!r} and {s.name!r}",
                                  path=root, field="task")
            owner[t] = s.name
    return suites


