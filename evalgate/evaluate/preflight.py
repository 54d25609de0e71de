"""The suite pre-flight: every selected task built by lm-eval and tried on real items, before any engine starts.

A suite error otherwise surfaces only inside the engine worker, after the engine started (a minute on the small
hybrid, more on a real model), as a flattened lm-eval traceback naming neither the YAML nor the task. Here, for each
task the run will evaluate:

1. its config, as evalgate read it (:attr:`TaskSpec.config`), against lm-eval's own registries: ``output_type`` one of
   lm-eval's (``lm_eval.api.task.ALL_OUTPUT_TYPES``), a prompt and a target (``doc_to_text``, ``doc_to_target``,
   ``doc_to_choice`` for ``multiple_choice``), each ``metric_list`` metric registered in lm-eval (unless the task
   scores with its own ``process_results`` or asks for ``hf_evaluate``), each named aggregation registered;
2. the task built by lm-eval's ``TaskManager`` (:func:`evalgate.suites.taskindex.task_manager`, the one the worker uses):
   its data read (``datasets``), its metrics resolved, its filters built, its templates rendered on item 0 (lm-eval
   renders Jinja with ``StrictUndefined``: ``{{frm}}`` is an error, not an empty string);
3. the requests of item 0 built by lm-eval (``Task.build_all_requests``: the prompt with its few-shot context, the
   target, the choices), and a template that is a bare word naming no field of the data refused (lm-eval would
   silently use the word itself as the prompt or target);
4. item 0 scored as the worker scores it (lm-eval's filters, then ``process_results``) with dummy outputs: an empty
   string and the target (loglikelihood tasks: flat and ramped log-probs). It must not raise, and the primary metric
   must come back as a number in [0, 1] (the gate's item score).

It runs in a subprocess (``python -m evalgate.evaluate.preflight``): the suites' Python and lm-eval's logging stay out of the
command's process, and a hang is bounded by the run's ``--timeout``. Nothing is cached by evalgate: ``datasets``
keeps its own cache of the data it read (the same one the worker reads). Cost: a Python start, the lm-eval import
(~2 s) and building the tasks (their data generated or read): every shipped suite took 3.2-3.7 CPU-seconds here
(README, "Failure handling").

A finding is a ``ConfigError`` (exit 2), one line naming the suite YAML, the field and the task; so is a task's code
that calls ``sys.exit()`` (:data:`TASK_CODE_ERRORS`). A pre-flight that could not finish (it crashed, was killed or
timed out) is a ``PreflightError`` (exit 3); a Ctrl-C while it runs stops it and stays an interrupt (exit 130).
Either way no engine has started.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any

from evalgate.errors import ConfigError, EvalgateError, ExitCode
from evalgate.evaluate.procs import _die_with_parent, kill_group
from evalgate.suites.discovery import load_suite, task_manager
from evalgate.suites.files import source_id

__all__ = ["TASK_CODE_ERRORS", "PreflightError", "check_item_images", "check_suites", "run_checks"]

log = logging.getLogger("evalgate")
# lm-eval's Task methods (lm_eval/api/task.py) -> the task config field whose value they apply.
_METHOD_FIELD = {"doc_to_text": "doc_to_text", "doc_to_target": "doc_to_target", "doc_to_choice": "doc_to_choice",
                 "doc_to_prefix": "gen_prefix", "doc_to_image": "doc_to_image", "doc_to_audio": "doc_to_audio",
                 "fewshot_docs": "fewshot_split", "fewshot_context": "fewshot_config", "apply_filters": "filter_list",
                 "process_results": "process_results", "test_docs": "test_split",
                 "validation_docs": "validation_split", "training_docs": "training_split"}
_SPLIT_FIELDS = ("test_split", "validation_split", "training_split")
# Items whose requests are built. lm-eval compiles a Jinja template on every render (1-3 ms each here), so building
# every item's requests of the shipped suites took 10-30 s on this 2-core machine; the worker builds them anyway.
ITEMS = 1
# What the suites' own code (loaders, templates, scorers, filters), run by lm-eval on real items, may raise and be
# blamed for (exit 2, naming the suite YAML, the field and the task): any exception, and ``SystemExit`` (its
# ``sys.exit()`` is bad input of that suite, not a crash of the pre-flight). ``KeyboardInterrupt`` is not among them:
# an interrupt stays an interrupt (the pre-flight runs in a session of its own, so a Ctrl-C at the terminal reaches
# the command, which kills it and exits 130; one raised in the pre-flight ends it, exit 3).
TASK_CODE_ERRORS = (Exception, SystemExit)


class PreflightError(EvalgateError):
    """The pre-flight itself could not finish (its process crashed or ran past the timeout): exit 3."""

    exit_code = ExitCode.RUNTIME


class _Finding(Exception):
    """One suite error found by the pre-flight: where (suite YAML, field) and what (naming the task)."""

    def __init__(self, path: Path | str, field: str | None, message: str) -> None:
        super().__init__(message)
        self.path, self.field, self.message = str(path), field, message


# ----------------------------------------------------------------------------------------------- parent side


def check_suites(suites: list[Any], *, limit: int | None, timeout: float = 3 * 3600.0) -> dict[str, Any]:
    """Run the pre-flight over ``suites`` (``Suite`` objects of one suites folder) in a subprocess.

    Args:
        suites: the suites the run evaluates (every task of each).
        limit: the run's ``--limit`` (None: every item); a suite YAML's own ``limit`` also applies.
        timeout: seconds before the pre-flight is killed (the run's ``--timeout``).
    Returns:
        ``{"seconds": s, "tasks": {task: items checked}}``, with ``"images": {task: {"most", "item", "source"}}``
        when a task carries images (:func:`check_item_images`: the most images an item of the run has, which item,
        the task's YAML), for ``modality.check_image_counts`` to hold against each config's per-prompt limit.
    Raises:
        ConfigError (exit 2): a task fails the pre-flight; one line naming the suite YAML, the field and the task.
        PreflightError (exit 3): the pre-flight crashed (its last stderr line is given) or timed out.
    """
    if not suites:
        return {"seconds": 0.0, "tasks": {}}
    t0 = time.monotonic()
    root = suites[0].path.parent
    with tempfile.TemporaryDirectory(prefix="evalgate-preflight-") as tmp:
        result_path = Path(tmp) / "result.json"
        spec = {"suites_dir": str(root), "suites": [s.name for s in suites], "limit": limit,
                "result": str(result_path)}
        proc = subprocess.Popen([sys.executable, "-m", "evalgate.evaluate.preflight", json.dumps(spec)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                errors="replace", start_new_session=True, preexec_fn=_die_with_parent)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise PreflightError(f"the suite pre-flight (building each task with lm-eval and scoring one item) did "
                                 f"not finish within --timeout {timeout:g} s; a task's data loader or scorer hangs?"
                                 ) from None
        except BaseException:  # Ctrl-C: no orphan
            kill_group(proc)
            raise
        log.debug("suite pre-flight log:\n%s", err)
        try:
            result = json.loads(result_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            rc = proc.returncode
            how = f"was killed by signal {-rc}" if rc < 0 else f"exit code {rc}"
            last = [ln.strip() for ln in err.splitlines() if ln.strip() and "it/s]" not in ln][-1:]
            raise PreflightError(f"the suite pre-flight crashed ({how}{'; last log line: ' if last else ''}"
                                 f"{_one_line(last[0], 200) if last else ''}); "
                                 "rerun as `evalgate --debug <command> ...` for its log") from None
    if "error" in result:
        e = result["error"]
        raise ConfigError(e["message"], path=e["path"], field=e.get("field"))
    result["seconds"] = time.monotonic() - t0
    return result


# ----------------------------------------------------------------------------------------------- child side


def run_checks(suites_dir: Path | str, names: list[str], limit: int | None) -> dict[str, Any]:
    """The pre-flight of suites ``names`` under ``suites_dir``, in this process (imports lm-eval and runs the
    suites' Python: :func:`check_suites` calls it in a subprocess).

    Returns:
        ``{"tasks": {task: number of items whose requests were built}}`` (at most :data:`ITEMS` each), and for the
        image tasks ``"images": {task: check_item_images(...)}`` (every item's images checked).
    Raises:
        ConfigError: the first task that fails, naming its suite YAML, the field and the task.
    """
    suites = [load_suite(n, suites_dir) for n in names]
    specs = {spec.name: spec for s in suites for spec in s.specs}
    for spec in specs.values():
        if not spec.builtin:  # lm-eval's own tasks are lm-eval's to keep consistent
            _check_config(spec)
    manager = task_manager(suites_dir, builtins=any(s.builtins for s in suites))
    checked: dict[str, int] = {}
    images: dict[str, dict[str, Any]] = {}
    try:
        for suite in suites:
            for entry, own in suite.entries:
                n = own if limit is None else limit if own is None else min(limit, own)
                try:
                    tasks = manager.load([entry])["tasks"]
                except TASK_CODE_ERRORS as exc:  # any failure of lm-eval building the task is the suite's
                    raise _blame(exc, specs, default=_spec_of(entry, suite), stage="building the task") from None
                for name, task in sorted(tasks.items()):
                    spec = specs.get(name) or _spec_of(entry, suite)
                    checked[name] = _check_task(task, spec, n)
                    if spec.modality == "image":
                        images[name] = check_item_images(task, spec, n)
    except _Finding as f:
        raise ConfigError(f.message, path=f.path, field=f.field) from None
    finally:
        from evalgate.suites import scoring

        scoring.shutdown()  # a scorer's sandbox pool, if one started
    return {"tasks": checked, **({"images": images} if images else {})}


def _spec_of(entry: str, suite: Any) -> Any:
    """The spec a failure of ``entry`` (a task or group of ``suite``) is blamed on when the task is not known."""
    return next((s for s in suite.specs if s.name == entry), None) or next(
        (s for s in suite.specs if any(e == entry for e, _ in suite.entries)), suite.specs[0])


def _check_config(spec: Any) -> None:
    """Step 1: the task's config against lm-eval's registries (before lm-eval builds it, which would fail with a
    KeyError or try the network for an unknown metric)."""
    import lm_eval.api.metrics  # noqa: F401 - registers the metrics
    from lm_eval.api.registry import aggregation_registry, metric_registry
    from lm_eval.api.task import ALL_OUTPUT_TYPES

    cfg, name, path = spec.config, spec.name, spec.source
    out = cfg.get("output_type", "generate_until")
    if out not in ALL_OUTPUT_TYPES:
        raise ConfigError(f"task {name}: {out!r} is not an lm-eval output type (one of {', '.join(ALL_OUTPUT_TYPES)})"
                          f"{_hint(out, ALL_OUTPUT_TYPES)}", path=path, field="output_type")
    if cfg.get("use_prompt") is None:
        needed = ["doc_to_text", "doc_to_target"] + (["doc_to_choice"] if out == "multiple_choice" else [])
        for key in needed:
            if cfg.get(key) is None:
                raise ConfigError(f"task {name}: missing: lm-eval needs it for {out} (a Jinja template such as "
                                  "'{{question}}', a field name of the data, or !function module.fn)", path=path,
                                  field=key)
    own_scorer = cfg.get("process_results") is not None
    for i, m in enumerate(cfg.get("metric_list") or []):
        if not isinstance(m, dict):
            continue
        metric = m.get("metric")
        if (not own_scorer and not m.get("hf_evaluate") and isinstance(metric, str) and metric not in metric_registry
                and not _is_function_ref(metric, path)):
            raise ConfigError(f"task {name}: {metric!r} is not a metric lm-eval knows"
                              f"{_hint(metric, list(metric_registry.keys()))} (or compute it in the task's own "
                              "process_results)", path=path, field=f"metric_list[{i}].metric")
        agg = m.get("aggregation")
        if isinstance(agg, str) and agg not in aggregation_registry and not _is_function_ref(agg, path):
            raise ConfigError(f"task {name}: {agg!r} is not an aggregation lm-eval knows"
                              f"{_hint(agg, list(aggregation_registry.keys()))}", path=path,
                              field=f"metric_list[{i}].aggregation")


def _is_function_ref(value: str, yaml_path: Path) -> bool:
    """Whether ``value`` is a ``!function module.fn`` of the YAML at ``yaml_path`` (``TaskSpec.config`` keeps the tag as
    its string): lm-eval calls such a metric or aggregation itself (``ConfigurableTask.__init__``: ``callable``), so
    it need not be in lm-eval's registries. ``suitefiles.check_function_ref`` has already checked that ``module.py``
    beside the YAML defines ``fn``; no registered metric or aggregation name has a dot."""
    module, _, fn = value.rpartition(".")
    return bool(module and fn) and (Path(yaml_path).parent / f"{module}.py").is_file()


def _check_task(task: Any, spec: Any, limit: int | None) -> int:
    """Steps 3 and 4 for one built task: the bare-word templates, the requests of the first :data:`ITEMS` items the
    run uses, item 0 scored with dummy outputs. Returns the number of items whose requests were built."""
    docs = task.eval_docs
    if len(docs) == 0:
        raise _Finding(spec.source, _data_field(spec.config), f"task {spec.name}: the data has no items")
    n = min(ITEMS, len(docs) if limit is None else min(limit, len(docs)))
    if not spec.builtin:
        _check_bare_words(task, spec, docs[0])
    try:
        task.build_all_requests(limit=n)
    except TASK_CODE_ERRORS as exc:  # a template, few-shot context or request that fails on a real item
        raise _blame(exc, {spec.name: spec}, default=spec, stage="building its requests") from None
    first = sorted((i for i in task.instances if i.doc_id == 0), key=lambda i: i.idx)
    if not first:
        raise _Finding(spec.source, _data_field(spec.config), f"task {spec.name}: lm-eval built no request for item 0")
    _score_dummies(task, spec, first)
    task._instances = None  # free the requests (the worker builds its own)
    return n


def check_item_images(task: Any, spec: Any, limit: int | None) -> dict[str, Any]:
    """Every item's images of an image task (one that sets ``doc_to_image``), as lm-eval will send them: for each of
    the items the run evaluates (the first ``limit``, lm-eval's ``doc_id`` order), ``task.doc_to_image(doc)`` is
    what lm-eval puts in the request (``{"visual": ...}``): one image or a list of them (lm-eval drops the ``None``
    of a list of field names). Each must be a ``PIL.Image.Image``, what evalgate's adapter hashes and vLLM gets as
    ``multi_modal_data`` (a path, a URL, bytes or an array is not loaded by anyone: vLLM would refuse it after the
    engine had started, exit 3). Every item needs at least one: an image task's prompt is about its image, so an
    item without one would be measured on a question it cannot answer (and its ``<image>`` placeholder sent as
    text). This is the refusal chosen over scoring such an item (see also ``suite_eval.image_item_hash``, which
    keys an image task's items by content either way). Cost: ``doc_to_image`` once per item (a datasets ``Image``
    column decodes each page: the shipped page tier's 200 items took about 1 s here).

    Args:
        task: the lm-eval task, built. spec: its ``TaskSpec``. limit: items the run evaluates (None: all).
    Returns:
        ``{"most": the most images one item has, "item": that item (``item N`` or ``item N (id X)``, the first with
        that many), "source": the task's YAML}``.
    Raises:
        _Finding (exit 2 as ConfigError): naming the task's YAML, ``doc_to_image``, the task and the item, for an
            item whose images are not all PIL images (the type found) or that has none; a ``doc_to_image`` that
            raises is blamed as any task code is.
    """
    from PIL import Image

    most, where = 0, ""
    png_modes: dict[str, bool] = {}
    docs = task.eval_docs
    count = len(docs) if limit is None else min(limit, len(docs))
    for i in range(count):
        doc = docs[i]
        sid = source_id(doc, spec.id_field)
        item = f"item {i}" + (f" (id {_one_line(sid, 80)})" if sid is not None else "")
        try:
            value = task.doc_to_image(doc)
        except TASK_CODE_ERRORS as exc:  # the task's own code on a real item: blame it
            raise _blame(exc, {spec.name: spec}, default=spec, stage=f"reading the images of {item}",
                         field="doc_to_image") from None
        images = list(value) if isinstance(value, (list, tuple)) else [] if value is None else [value]
        if not images:
            got = "None" if value is None else "an empty list"
            raise _Finding(spec.source, "doc_to_image", f"task {spec.name}: {item} has no image (doc_to_image gave "
                           f"{got}): every item of an image task needs one (its prompt is about its image); fill "
                           "in the item's image, or leave such items out of the task's data")
        for j, im in enumerate(images):
            which = f"image {j} of {len(images)}" if len(images) > 1 else "its image"
            if not isinstance(im, Image.Image):
                raise _Finding(spec.source, "doc_to_image", f"task {spec.name}: {item}: {which} is "
                               f"{_kind_of(im)}, not a PIL image (evalgate sends PIL.Image.Image objects to vLLM; "
                               "load a path, URL or bytes into one in the task's code, or read the column as a "
                               "datasets Image feature)")
            unusable = _unhashable_image(im, png_modes)
            if unusable:
                raise _Finding(spec.source, "doc_to_image", f"task {spec.name}: {item}: {which} {unusable}")
        if len(images) > most:
            most, where = len(images), item
    return {"most": most, "item": where, "source": str(spec.source)}


def _unhashable_image(image: Any, png_modes: dict[str, bool]) -> str | None:
    """Why the engine worker could not take PIL image ``image``, or None. The worker keys every image by its
    content hash, lm-eval's ``convert_pil_to_hash`` (``worker.lm_adapter.image_hash``: the image saved as PNG), so an
    image with no pixels (a side of 0) or in a mode PNG cannot hold (``F``, ``CMYK``, ``I;16B``, ...) would fail there,
    on the first such request, after the engine had started (exit 3). Whether a mode can be saved is tried once per
    mode on a 1x1 image (``png_modes`` caches it), not on every page.
    """
    import io

    from PIL import Image

    width, height = image.size
    if width <= 0 or height <= 0:
        return (f"is empty ({width}x{height} pixels, mode {image.mode}): an image needs at least one pixel (vLLM "
                "and the image's content hash both fail on it)")
    mode = image.mode
    if mode not in png_modes:
        try:
            Image.new(mode, (1, 1)).save(io.BytesIO(), format="PNG")
            png_modes[mode] = True
        except Exception:  # noqa: BLE001 - PIL raises OSError, KeyError or ValueError for a mode PNG cannot hold
            png_modes[mode] = False
    if not png_modes[mode]:
        return (f"is a PIL image in mode {mode!r}, which cannot be saved as PNG: evalgate keys each image by "
                "lm-eval's content hash of its PNG bytes, so the engine would fail on it; convert it in the task's "
                "code, e.g. image.convert('RGB')")
    return None


def _kind_of(value: Any) -> str:
    """What a value that should have been an image is, for a message: ``None``, or a short repr and its type
    (``'page-3.png' (type str)``, ``array(...) (type numpy.ndarray)``)."""
    if value is None:
        return "None"
    kind = type(value)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
    return f"{_one_line(repr(value), 60)} (type {name})"


def _check_bare_words(task: Any, spec: Any, doc: Any) -> None:
    """A template that is one bare word (``answer``) names a field in lm-eval; when the data has no such field,
    lm-eval renders the word itself, silently: refuse it, listing the fields."""
    features = list(getattr(task, "features", None) or (doc.keys() if isinstance(doc, dict) else []))
    for key in ("doc_to_text", "doc_to_target", "doc_to_choice"):
        value = spec.config.get(key)
        if isinstance(value, str) and value.isidentifier() and value not in features:
            raise _Finding(spec.source, key, f"task {spec.name}: {value!r} is no field of the data (its fields: "
                           f"{', '.join(map(str, features)) or 'none'}); a template needs {{{{ }}}}, e.g. "
                           f"'{{{{{value}}}}}'")


def _dummy_value(inst: Any, variant: int, target: str) -> Any:
    """What an engine would answer request ``inst``: variant 0 an empty or flat answer, variant 1 the target (or a
    ramp of log-probs whose first choice is greedy)."""
    kind = inst.request_type
    if kind == "generate_until":
        return "" if variant == 0 else target
    if kind == "loglikelihood":
        return (-1.0, False) if variant == 0 else (-1.0 - inst.idx, inst.idx == 0)
    if kind == "loglikelihood_rolling":
        return -1.0 if variant == 0 else -0.5
    return "" if variant == 0 else target


def _target_text(task: Any, doc: Any) -> str:
    """The item's target as text (a choice index resolved to its choice, the first of several targets)."""
    target = task.doc_to_target(doc)
    if isinstance(target, list) and target:
        target = target[0]
    if isinstance(target, int) and task.config.doc_to_choice is not None:
        choices = task.doc_to_choice(doc)
        if 0 <= target < len(choices):
            target = choices[target]
    return str(target)


def _score_dummies(task: Any, spec: Any, first: list[Any]) -> None:
    """Step 4: item 0 through lm-eval's filters and ``process_results`` (every filter, as the worker does) with the
    two dummy outputs; the primary metric of the first filter must be a number in [0, 1]."""
    doc = first[0].doc
    scorer = "process_results" if spec.config.get("process_results") is not None else "metric_list[0].metric"
    target = _target_text(task, doc)
    for variant, label in ((0, "an empty output"), (1, "the target as output")):
        for inst in first:
            inst.resps = [_dummy_value(inst, variant, target)] * max(1, int(inst.repeats or 1))
            inst.filtered_resps = {}
        task._instances = first
        try:
            task.apply_filters()
        except TASK_CODE_ERRORS as exc:
            raise _blame(exc, {spec.name: spec}, default=spec, stage=f"filtering {label} for item 0",
                         field="filter_list") from None
        for n, key in enumerate(first[0].filtered_resps):
            try:
                metrics = task.process_results(doc, [inst.filtered_resps[key] for inst in first])
            except TASK_CODE_ERRORS as exc:
                raise _blame(exc, {spec.name: spec}, default=spec, stage=f"scoring {label} for item 0",
                             field=scorer if scorer == "process_results" else "metric_list") from None
            if n == 0:
                _check_score(metrics, spec, scorer, label)


def _check_score(metrics: Any, spec: Any, scorer: str, label: str) -> None:
    """The scorer's result for item 0 must hold the primary metric as a number in [0, 1]."""
    if not isinstance(metrics, dict) or spec.metric not in metrics:
        got = ", ".join(map(str, metrics)) if isinstance(metrics, dict) else type(metrics).__name__
        raise _Finding(spec.source, scorer, f"task {spec.name}: scoring {label} on item 0 gave no "
                       f"{spec.metric!r}, the primary metric (got: {got or 'nothing'})")
    value = metrics[spec.metric]
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, (str, bytes)) or not (0.0 <= number <= 1.0):
        raise _Finding(spec.source, scorer, f"task {spec.name}: scoring {label} on item 0 gave {spec.metric} = "
                       f"{_one_line(repr(value), 80)}: the gate needs each item's primary metric as a number in [0, 1]")


# ----------------------------------------------------------------------------------------------- blame


def _frames(tb: TracebackType | None) -> list[tuple[Any, int]]:
    out = []
    while tb is not None:
        out.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return out


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost cause (``datasets`` wraps a JSON parse error in ``DatasetGenerationError``)."""
    seen = {id(exc)}
    while (nxt := exc.__cause__ or exc.__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        exc = nxt
    return exc


def _data_field(cfg: dict[str, Any]) -> str:
    """The field that says where a task's data comes from."""
    if cfg.get("custom_dataset") is not None:
        return "custom_dataset"
    kwargs = cfg.get("dataset_kwargs")
    if isinstance(kwargs, dict) and "data_files" in kwargs:
        return "dataset_kwargs.data_files"
    return "dataset_path"


def _blame(exc: BaseException, specs: dict[str, Any], *, default: Any, stage: str,
           field: str | None = None) -> _Finding:
    """The one-line finding for ``exc``, raised while lm-eval built or ran a task: which task (the innermost lm-eval
    Task frame's ``self.config.task``), which field (the Task method that was running: ``doc_to_text`` ->
    ``doc_to_text``, ``download`` -> the data's field, ...), on which item (its fields) and where in the suite's
    own code."""
    frames = _frames(exc.__traceback__)
    name, method, doc = None, None, None
    for frame, _ in frames:
        path = frame.f_code.co_filename.replace("\\", "/")
        if path.endswith("lm_eval/api/task.py"):
            method = frame.f_code.co_name
            cfg = getattr(frame.f_locals.get("self"), "_config", None)
            name = getattr(cfg, "task", None) or name
            for key in ("doc", "test_doc"):
                if isinstance(frame.f_locals.get(key), dict):
                    doc = frame.f_locals[key]
        elif path.endswith("lm_eval/tasks/_factory.py") and frame.f_code.co_name == "_build_task":
            cfg = frame.f_locals.get("cfg")
            name = (cfg.get("task") if isinstance(cfg, dict) else None) or name
    spec = (specs.get(name) if name else None) or default
    folder = spec.source.parent.resolve()
    user = None  # the innermost frame in the suite's own Python (its folder)
    for frame, lineno in frames:
        try:
            if Path(frame.f_code.co_filename).resolve().is_relative_to(folder):
                user = (Path(frame.f_code.co_filename).name, lineno)
        except (OSError, ValueError):
            continue
    cfg = spec.config
    cause = exc if isinstance(exc, SystemExit) else _root_cause(exc)  # not the error it was handling
    text = _one_line(f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__)
    if isinstance(cause, SystemExit):
        text = (f"SystemExit: sys.exit({_one_line(repr(cause.code), 80)}) was called; a task's code must raise an "
                "exception, never end the process")
    if field is None:
        field = _field_of(method, cause, cfg, user)
    where = f" ({user[0]} line {user[1]})" if user else ""
    item = ""
    if doc is not None:
        item = f"; item {_doc_id(frames)} has the fields {', '.join(map(str, doc)) or 'none'}"
    if type(cause).__name__ == "UndefinedError":  # jinja2's StrictUndefined, as lm-eval renders
        text = f"the template uses a variable the item lacks: {cause}"
    elif method == "download":
        stage, text = "reading its data", f"cannot read it: {text}"
    return _Finding(spec.source, field, f"task {spec.name}: {stage}: {text}{where}{item}")


def _doc_id(frames: list[tuple[Any, int]]) -> str:
    """The failing item's id from lm-eval's request loop (``doc_id``), else 0 (lm-eval tries item 0 first)."""
    for frame, _ in reversed(frames):
        if isinstance(frame.f_locals.get("doc_id"), int):
            return str(frame.f_locals["doc_id"])
    return "0"


def _field_of(method: str | None, cause: BaseException, cfg: dict[str, Any], user: tuple[str, int] | None) -> str | None:
    """The task config field a failure in lm-eval's Task method ``method`` comes from."""
    msg = str(cause)
    if method == "download":
        return _data_field(cfg)
    if method in ("test_docs", "validation_docs", "training_docs", "eval_docs", "has_test_docs"):
        if user and cfg.get("process_docs") is not None:
            return "process_docs"
        return next((k for k in _SPLIT_FIELDS if cfg.get(k) and f"'{cfg[k]}'" in msg), "test_split")
    if method in _METHOD_FIELD:
        return _METHOD_FIELD[method]
    if method == "__init__":
        if "output_type" in msg:
            return "output_type"
        if m := re.search(r"unexpected keyword argument '(\w+)'", msg):
            return m.group(1)
        if isinstance(cause, IndexError):  # lm-eval tries item 0 of the evaluation split
            return _data_field(cfg)
        if "metric" in msg:
            return "metric_list"
    return None


def _hint(value: Any, names: list[str]) -> str:
    close = difflib.get_close_matches(str(value), [str(n) for n in names], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    """``python -m evalgate.evaluate.preflight SPEC``: SPEC is JSON ``{"suites_dir", "suites", "limit", "result"}``; the
    outcome is written to ``result`` as JSON (``{"tasks": ...}`` or ``{"error": {"path", "field", "message"}}``).
    Exit 0 when the outcome was written, whatever it says; 1 (nothing written) when the pre-flight itself failed
    outside every task's checks (the parent reports it as ``PreflightError``)."""
    spec = json.loads((argv or sys.argv[1:])[0])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    try:
        result: dict[str, Any] = run_checks(spec["suites_dir"], spec["suites"], spec["limit"])
    except ConfigError as exc:
        result = {"error": {"path": None if exc.path is None else str(exc.path), "field": exc.field,
                            "message": exc.message}}
    except Exception as exc:  # noqa: BLE001 - outside any task's checks (lm-eval not importable, ...): exit 3
        traceback.print_exc()
        print(f"preflight: {type(exc).__name__}: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    tmp = spec["result"] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(tmp, spec["result"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
