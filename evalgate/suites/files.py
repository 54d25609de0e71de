"""A suite's files: the folder layout, the content hash, one suite YAML as evalgate reads it, and the resolved types.

A suite is a folder ``<suites_dir>/<name>/`` holding lm-eval YAML files (``*.yaml`` / ``*.yml`` at its top level)
and the Python they reference (``utils.py``); see :mod:`evalgate.suites.discovery` for what a YAML may say. YAML is read by
the one strict reader (:mod:`evalgate.inputs.yamlio`: duplicate keys refused, lm-eval's ``!function`` kept as its string).
Nothing here imports lm-eval.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError
from evalgate.inputs.project import builtin_dir, layout
from evalgate.inputs.schema import suggest
from evalgate.inputs.yamlio import Wording, read_mapping

SUITES_ENV = "EVALGATE_SUITES"
SUITES_DIR = builtin_dir() / "suites"  # the shipped suites; a project's own come from project.layout()
_IGNORED_DIRS = {"__pycache__"}
_YAML_SUFFIXES = (".yaml", ".yml")
WORDING = Wording("suite YAML", syntax="cannot parse YAML{at}: {problem}",
                  empty="is empty: a suite YAML defines one lm-eval task (task, metric_list, ...) or a group")
# lm-eval's GroupConfig fields (lm_eval/config/group.py): the rest of a group's keys override its members' config.
GROUP_FIELDS = frozenset({"group", "group_alias", "task", "aggregate_metric_list", "metadata"})
# datasets' packaged builders: ``dataset_path: json`` + ``data_files`` reads local files, no hub involved.
LOCAL_BUILDERS = frozenset({"json", "csv", "parquet", "text", "arrow", "pandas", "xml", "webdataset"})
EVALGATE_KEYS = ("limit",)  # keys evalgate reads from a suite YAML and strips before lm-eval sees it
MODALITIES = ("text", "image")  # what a task's items carry: text only, or images too (lm-eval's doc_to_image)
MIXED = "mixed"  # a group entry with both image and text tasks (Suite.entry_modality)
# Fields of a task's docs that hold the dataset's own item id, in the order they are tried (``source_id``).
SOURCE_ID_FIELDS = ("id", "doc_id", "uid", "qid", "task_id")


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
        id_field: the doc field holding the dataset's own item id, as the task names it (``metadata.evalgate.id_field``);
            None: the first of ``id``, ``doc_id``, ``uid``, ``qid``, ``task_id`` the doc holds.
        modality: ``"image"`` when its items carry images (it sets lm-eval's ``doc_to_image``; its YAML may say so
            in ``metadata.evalgate.modality``), else ``"text"`` (:func:`task_modality`).
        uses_suites: other suites of the same folder whose files its code reads (``metadata.evalgate.uses_suites``).
        config: the task's config as evalgate read it (a group's overrides merged; ``!function`` kept as its
            string), for the pre-flight (:mod:`evalgate.evaluate.preflight`) to name the field a failure comes from.
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
    id_field: str | None = None
    modality: str = "text"
    uses_suites: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


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
            folder, ``__pycache__`` folders and ``*.pyc`` excluded, then those of the suites it uses
            (:func:`content_hash`).
        specs: per task, what evalgate resolved (``TaskSpec``), in ``tasks`` order.
        entries: what lm-eval is asked to evaluate: ``(task or group name, limit)`` per suite YAML (a task that a
            group of the suite lists runs through the group only).
        builtins: some task comes from lm-eval's built-in library (its index must be loaded).
        uses: the other suites (folder names beside this one) whose files its tasks' code reads, sorted; their files
            are part of ``content_hash``.
        entry_modality: per entry of ``entries``, ``(name, "image" | "text" | "mixed")``: its tasks' modality
            (``"mixed"``: a group with both image and text tasks, which lm-eval builds in one pass, so a chat
            config cannot send its image tasks' messages one way and its text tasks' another:
            ``evaluate.modality.check_chat_images`` refuses it).
        mixed_groups: per such group, ``(group, its YAML, an image task of it, a text task of it)``.
    """

    name: str
    path: Path
    tasks: tuple[str, ...]
    primary_metric: dict[str, str]
    content_hash: str
    specs: tuple[TaskSpec, ...] = ()
    entries: tuple[tuple[str, int | None], ...] = ()
    builtins: bool = False
    uses: tuple[str, ...] = ()
    entry_modality: tuple[tuple[str, str], ...] = ()
    mixed_groups: tuple[tuple[str, Path, str, str], ...] = ()

    @property
    def image_entries(self) -> tuple[str, ...]:
        """The entries (tasks or groups) lm-eval runs with images: those whose tasks carry images, a mixed group
        included (``entry_modality``); an entry not listed there counts as image when the suite is."""
        known = dict(self.entry_modality)
        return tuple(e for e, _ in self.entries
                     if known.get(e, self.modality) in ("image", MIXED))

    @property
    def modality(self) -> str:
        """``"image"`` when some task's items carry images (an image suite: it needs a model that reads images and
        runs only when named, by ``--suites`` or a config's ``suites``), else ``"text"``."""
        return "image" if any(s.modality == "image" for s in self.specs) else "text"

    def spec(self, task: str) -> TaskSpec:
        """The ``TaskSpec`` of ``task``; KeyError if the suite has no such task."""
        for s in self.specs:
            if s.name == task:
                return s
        raise KeyError(task)



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


def content_hash(folder: Path, uses: Sequence[Path] = ()) -> str:
    """Hex sha256 of a folder's files: for each, in sorted order, its relative POSIX path, NUL,
    its size as 8 bytes big-endian, then its bytes (``__pycache__`` and ``*.pyc`` skipped); then the same for the
    files of each folder of ``uses`` (other suites whose files the suite's code reads, in the order given), each
    named ``../<folder>/<path>``. Without ``uses`` the hash is the folder's alone (as before ``uses`` existed); not
    transitive (a used suite's own ``uses`` are not followed). ConfigError naming the file when one cannot be read."""
    h = hashlib.sha256()
    for root, prefix in ((folder, ""), *((Path(u), f"../{Path(u).name}/") for u in uses)):
        for f in _files(root):
            try:
                data = f.read_bytes()
            except OSError as exc:  # a looping or dangling symlink, a FIFO's error, no permission: the file, one line
                raise ConfigError(f"cannot read this suite file: {exc.strerror or exc}", path=f) from None
            h.update((prefix + f.relative_to(root).as_posix()).encode("utf-8") + b"\0")
            h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()



def read_suite_yaml(path: Path, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """One suite YAML as a mapping (``!function`` kept as its string, ``include`` merged under the file's keys,
    relative to the file); ConfigError naming the file for bad UTF-8, bad YAML, a duplicate key, not a mapping, an
    ``include`` that is not a file name (or a list of them), is missing, or includes itself (a cycle)."""
    chain = (*_chain, path.resolve())
    functions: list[tuple[str, str]] = []
    cfg = read_mapping(path, WORDING, functions)
    for where, ref in functions:
        check_function_ref(ref, path, where)
    includes = cfg.pop("include", None)
    listed = [includes] if isinstance(includes, str) else includes if isinstance(includes, list) else None
    if includes is not None and (listed is None or not all(isinstance(i, str) and i for i in listed)):
        raise ConfigError(f"must be a YAML file name or a list of them, got {includes!r}", path=path, field="include")
    for inc in listed or []:
        inc_path = Path(inc) if Path(inc).is_absolute() else path.parent / inc
        if not inc_path.is_file():
            raise ConfigError(f"included file not found: {inc_path}", path=path, field="include")
        if inc_path.resolve() in chain:
            cycle = " -> ".join(p.name for p in (*chain, inc_path.resolve()))
            raise ConfigError(f"include cycle: {cycle}", path=path, field="include")
        cfg = {**read_suite_yaml(inc_path, chain), **cfg}
    return cfg


def check_function_ref(ref: str, path: Path, where: str) -> None:
    """ConfigError (exit 2, before any engine) when lm-eval could not import ``!function ref`` of suite YAML
    ``path``: it loads ``<module>.py`` beside the YAML (``lm_eval.utils.import_function``: everything before the
    last dot is the module's file name) and takes ``<name>`` from it. The module is parsed, not run: a missing
    file, a syntax error, or no top-level ``def``/``class``/assignment/import of the name is refused (a module
    with ``import *`` or a module ``__getattr__`` is given the benefit of the doubt)."""
    import ast

    *module_parts, name = ref.split(".")
    module = ".".join(module_parts)
    file = path.parent / f"{module}.py"
    if not module or not name:
        raise ConfigError(f"!function {ref!r}: must be module.function (lm-eval loads <module>.py beside the YAML)",
                          path=path, field=where or None)
    if not file.is_file():
        raise ConfigError(f"!function {ref}: no {file.name} beside the YAML (lm-eval loads <module>.py from the "
                          f"YAML's folder)", path=path, field=where or None)
    try:
        tree = ast.parse(file.read_bytes(), filename=str(file))
    except (SyntaxError, ValueError) as exc:
        line = f" at line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        raise ConfigError(f"!function {ref}: {file.name} does not parse{line}: {getattr(exc, 'msg', exc)}",
                          path=path, field=where or None) from None
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif not isinstance(node, (ast.Expr, ast.Pass)):
            return  # an if/try/with/for at module level may define it: do not guess
    if "__getattr__" in defined or name in defined:
        return

    hint = suggest(name, sorted(n for n in defined if not n.startswith("_")), list_all=False)
    raise ConfigError(f"!function {ref}: {file.name} defines no {name!r}{hint}", path=path, field=where or None)


def check_metrics(cfg: dict[str, Any], path: Path, what: str = "") -> str:
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


def suite_limit(cfg: dict[str, Any], path: Path) -> int | None:
    value = cfg.get("limit")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"must be a whole number of items >= 1, got {value!r}", path=path, field="limit")
    return value


def id_field(cfg: dict[str, Any], path: Path) -> str | None:
    """A task's ``metadata.evalgate.id_field`` (the doc field holding the dataset's own item id), or None when absent.
    ConfigError naming the YAML and the field unless it is a non-empty string."""
    meta = cfg.get("metadata")
    block = meta.get("evalgate") if isinstance(meta, dict) else None
    value = block.get("id_field") if isinstance(block, dict) else None
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"must be the name of a field of the task's docs (a non-empty string), got {value!r}",
                          path=path, field="metadata.evalgate.id_field")
    return value


def _evalgate_block(cfg: dict[str, Any]) -> dict[str, Any]:
    meta = cfg.get("metadata")
    block = meta.get("evalgate") if isinstance(meta, dict) else None
    return block if isinstance(block, dict) else {}


def task_modality(cfg: dict[str, Any], path: Path, what: str = "") -> str:
    """What a task's items carry: ``"image"`` when its config sets lm-eval's ``doc_to_image`` (its requests then
    carry the images), else ``"text"``. Its YAML may say so in ``metadata.evalgate.modality`` (``text`` or
    ``image``), which must agree with ``doc_to_image``.

    Args:
        cfg: the task's config as evalgate read it. path: its YAML. what: ``"task NAME: "`` for a group member.
    Raises:
        ConfigError naming ``path`` and ``metadata.evalgate.modality``: a value other than ``text`` / ``image``;
            ``text`` on a task that sets ``doc_to_image``; ``image`` on one that does not (it would send no image).
        ConfigError naming ``path`` and ``output_type``: an image task whose ``output_type`` is not
            ``generate_until`` (evalgate sends images with generation requests only; a log-likelihood request with
            images would fail inside the engine, and a rolling one would drop them), refused at load, before any
            engine starts.
    """
    field = "metadata.evalgate.modality"
    declared = _evalgate_block(cfg).get("modality")
    sends = bool(cfg.get("doc_to_image"))
    if declared is not None and declared not in MODALITIES:
        raise ConfigError(f"{what}must be 'text' or 'image', got {declared!r}", path=path, field=field)
    if declared == "text" and sends:
        raise ConfigError(f"{what}is 'text', but the task sets doc_to_image (its items carry images): say 'image'",
                          path=path, field=field)
    if declared == "image" and not sends:
        raise ConfigError(f"{what}is 'image', but the task sets no doc_to_image (the doc fields holding each item's "
                          "images), so it would send none", path=path, field=field)
    out = cfg.get("output_type") or "generate_until"
    if sends and out != "generate_until":
        raise ConfigError(f"{what}is {out!r}, but the task sets doc_to_image (its items carry images): evalgate "
                          "sends images with generate_until tasks only (log-likelihood scoring of image items is not "
                          "supported)", path=path, field="output_type")
    return "image" if sends else "text"


def uses_suites(cfg: dict[str, Any], path: Path, root: Path, own: str) -> tuple[str, ...]:
    """A task's ``metadata.evalgate.uses_suites``: the other suites (folder names under ``root``, the suites folder)
    whose files its code reads (``taskcode.suite_module``), sorted; ``()`` when absent. ConfigError naming ``path``
    and the field unless it is a list of names of suite folders under ``root`` other than ``own``."""
    field = "metadata.evalgate.uses_suites"
    value = _evalgate_block(cfg).get("uses_suites")
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"must be a list of suite names (folders beside this suite's), got {value!r}", path=path,
                          field=field)
    for name in value:
        if name == own or "/" in name or "\\" in name or name.startswith((".", "_")) or not (root / name).is_dir():
            known = [n for n in suite_names(root) if n != own]
            raise ConfigError(f"{name!r} is not another suite of {root} (known: {', '.join(known) or 'none'})",
                              path=path, field=field)
    return tuple(sorted(set(value)))


def check_declared_uses(folder: Path, specs: Sequence[TaskSpec]) -> None:
    """Refuse a suite whose Python loads another suite's module (``taskcode.suite_module(__file__, "<suite>", ...)``)
    without declaring that suite in ``metadata.evalgate.uses_suites``: the other suite's files would not key its
    stored results, so a change there would be served stale. Each ``*.py`` of ``folder`` is parsed, not run; a call
    whose suite name is a string literal is checked (a computed name, or another way of reading the other suite's
    files, is not seen). A file that does not parse is left to the ``!function`` check.

    Args:
        folder: the suite's folder. specs: its tasks as resolved (their ``uses_suites``; their YAMLs, to name one).
    Raises:
        ConfigError naming the task YAML that references the calling module (else the suite's first YAML) and
            ``metadata.evalgate.uses_suites``.
    """
    import ast

    declared = {u for s in specs for u in s.uses_suites}
    for py in (f for f in _files(folder) if f.suffix == ".py"):
        try:
            tree = ast.parse(py.read_bytes(), filename=str(py))
        except (SyntaxError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if called != "suite_module":
                continue
            arg = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "suite"),
                                                                None)
            used = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
            if used is None or used == folder.name or used in declared:
                continue
            yaml = _referrer(folder, specs, py.stem)
            raise ConfigError(f"{py.relative_to(folder).as_posix()} line {node.lineno} loads a module of suite "
                              f"{used!r} (suite_module), but no task of the suite lists {used!r} here: list it so "
                              "that its files key this suite's stored results (else a change to it is served stale)",
                              path=yaml, field="metadata.evalgate.uses_suites")


def _referrer(folder: Path, specs: Sequence[TaskSpec], module: str) -> Path:
    """The YAML of the first task of ``specs`` (in the suite's ``folder``) whose config names ``module`` in a
    ``!function`` reference (a string ``module.name``); else the folder's first YAML."""
    def names(value: Any) -> bool:
        if isinstance(value, str):
            return value.startswith(f"{module}.")
        if isinstance(value, dict):
            return any(names(v) for v in value.values())
        return isinstance(value, list) and any(names(v) for v in value)

    own = sorted((s for s in specs if s.source.parent == folder), key=lambda s: s.source)
    return next((s.source for s in own if names(s.config)), None) or (own[0].source if own else suite_yamls(folder)[0])


def resolve_files(files: Any, folder: Path) -> Any:
    """``data_files`` (a path, a list, or split -> path/list) with each relative path made absolute under ``folder``."""
    if isinstance(files, str):
        return files if "://" in files or Path(files).expanduser().is_absolute() else str(folder / files)
    if isinstance(files, list):
        return [resolve_files(f, folder) for f in files]
    if isinstance(files, dict):
        return {k: resolve_files(v, folder) for k, v in files.items()}
    return files


def flat_files(files: Any) -> tuple[str, ...]:
    if isinstance(files, str):
        return (files,)
    if isinstance(files, list):
        return tuple(x for f in files for x in flat_files(f))
    if isinstance(files, dict):
        return tuple(x for f in files.values() for x in flat_files(f))
    return ()


def resolve_local_paths(cfg: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A copy of task config ``cfg`` whose relative ``dataset_kwargs.data_files`` (and a relative local
    ``dataset_path`` such as ``./data``) are absolute under ``folder``, the task YAML's own folder."""
    out = dict(cfg)
    kwargs = out.get("dataset_kwargs")
    if isinstance(kwargs, dict) and "data_files" in kwargs:
        out["dataset_kwargs"] = {**kwargs, "data_files": resolve_files(kwargs["data_files"], folder)}
    dp = out.get("dataset_path")
    if isinstance(dp, str) and dp.startswith(("./", "../")):
        out["dataset_path"] = str((folder / dp).resolve())
    return out


def check_dir(suites_dir: Path | str | None) -> Path:
    root = Path(suites_dir).expanduser().resolve() if suites_dir is not None else default_suites_dir()
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise ConfigError(f"suites directory {what}", path=root)
    return root


def suite_names(root: Path) -> list[str]:
    return sorted(
        p.name for p in root.iterdir()
        if p.is_dir() and p.name not in _IGNORED_DIRS and not p.name.startswith((".", "_"))
    )


def suite_yamls(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _YAML_SUFFIXES)


def source_id(doc: Any, field: str | None = None) -> str | None:
    """The dataset's own id of an item: ``field`` (the task's ``metadata.evalgate.id_field``) if its ``doc``
    (lm-eval's document, as built or as logged) holds it, else the first of ``SOURCE_ID_FIELDS`` it holds, as a
    string or integer, as text (at most 200 characters); None when it holds none (or ``doc`` is not a mapping)."""
    if not isinstance(doc, dict):
        return None
    for name in ((field,) if field else ()) + SOURCE_ID_FIELDS:
        value = doc.get(name)
        if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
            continue
        return str(value)[:200]
    return None
