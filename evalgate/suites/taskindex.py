"""lm-eval's side of the suites: the index of its built-in tasks, its metric defaults, and a ``TaskManager`` that
knows the suites' tasks as evalgate reads them. lm-eval is imported lazily (about 8 s for the built-in index)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError
from evalgate.suites.files import (
    EVALGATE_KEYS,
    check_dir,
    read_suite_yaml,
    resolve_local_paths,
    suite_names,
    suite_yamls,
)


def with_metric_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
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



def _needs_entry(path: Path) -> bool:
    """Whether lm-eval would read suite YAML ``path`` differently from evalgate: it carries evalgate's own keys, or
    local paths (``data_files``, a relative ``dataset_path``) that lm-eval would resolve against the working
    directory. A YAML evalgate cannot parse is left to lm-eval (``load_suite`` reports it)."""
    try:
        cfg = read_suite_yaml(path)
    except ConfigError:
        return False
    return any(k in cfg for k in EVALGATE_KEYS) or _has_local_paths(cfg)


def _has_local_paths(cfg: dict[str, Any]) -> bool:
    """Whether task config ``cfg``, or an inline task of a group's ``task`` list, names local data by a path that
    lm-eval would resolve against the working directory."""
    kwargs = cfg.get("dataset_kwargs")
    dp = cfg.get("dataset_path")
    members = cfg.get("task") if isinstance(cfg.get("group"), str) else None
    return (isinstance(kwargs, dict) and "data_files" in kwargs or isinstance(dp, str) and dp.startswith(("./", "../"))
            or isinstance(members, list) and any(isinstance(m, dict) and _has_local_paths(m) for m in members))


def _resolve_inline(cfg: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A group config whose inline tasks (and inline subgroups' tasks) have their local paths made absolute under
    ``folder`` (:func:`resolve_local_paths`), as evalgate reads them (``suites._Resolver``)."""
    members = cfg.get("task")
    if not isinstance(members, list):
        return cfg
    out = []
    for m in members:
        if isinstance(m, dict) and isinstance(m.get("group"), str):
            m = _resolve_inline(m, folder)
        elif isinstance(m, dict):
            m = resolve_local_paths(m, folder)
        out.append(m)
    return {**cfg, "task": out}


def task_manager(suites_dir: Path | str | None = None, builtins: bool = False) -> Any:
    """An ``lm_eval.tasks.TaskManager`` that knows the suites' tasks (and lm-eval's built-ins if ``builtins``).

    Every suite YAML's index entry is replaced by its config as evalgate reads it: relative ``data_files`` made
    absolute under the YAML's folder (:func:`resolve_local_paths`), evalgate's own keys (``limit``) removed, so
    lm-eval resolves nothing against the working directory and never sees a key its ``TaskConfig`` rejects.
    Imports lm-eval lazily (it is slow to import). Raises ConfigError for a missing directory.
    """
    root = check_dir(suites_dir)
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._index import Entry, Kind
    from lm_eval.tasks._yaml_loader import load_yaml

    manager = TaskManager(include_path=str(root), include_defaults=builtins)
    index = manager.task_index
    for name in suite_names(root):
        for path in suite_yamls(root / name):
            if not _needs_entry(path):
                continue  # lm-eval's own entry reads it as evalgate does
            cfg = load_yaml(path, resolve_func=True, recursive=True)
            for key in EVALGATE_KEYS:
                cfg.pop(key, None)
            if isinstance(cfg.get("group"), str):
                cfg = _resolve_inline(cfg, path.parent)  # inline tasks' data beside the group's YAML, not the cwd
                index[cfg["group"]] = Entry(name=cfg["group"], kind=Kind.GROUP, yaml_path=None, cfg=cfg)
            elif isinstance(cfg.get("task"), str) and "class" not in cfg:
                cfg = resolve_local_paths(cfg, path.parent)
                old = index.get(cfg["task"])
                index[cfg["task"]] = Entry(name=cfg["task"], kind=Kind.TASK, yaml_path=None, cfg=cfg,
                                           tags=old.tags if old is not None else set())
    return manager


