"""What the Python files of suite tasks (``suites/<suite>/*.py``) share.

lm-eval loads a task's Python by file path (``!function module.fn`` resolves ``module.py`` next to the task YAML;
``lm_eval/tasks/_yaml_loader.py``), not as a package, so a task file cannot ``import utils`` from its own folder:
:func:`sibling` loads it the same way, by path (and :func:`suite_module` a file of another suite of the same suites
folder: a task that reuses that suite's generator and scorer lists it in ``metadata.evalgate.uses_suites``, which
puts that suite's files into its content hash). Task files import this module as ``evalgate.suites.taskcode``: evalgate
runs every suite in its own worker (``python -m evalgate.worker``), where evalgate is importable, whether the suite
comes from the repository, a project folder or the copy shipped inside the package (``evalgate/_builtin``).

Nothing here changes what a task generates or how it scores beyond what its folder (and the suites it declares it
uses) says: :func:`sibling` and :func:`suite_module` only load a file, and :func:`first_json_object` is the JSON
reading the docparse tasks share.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

__all__ = ["first_json_object", "load_module", "sibling", "suite_module"]


def sibling(file: str | Path, name: str) -> ModuleType:
    """The module ``<name>.py`` in the folder of ``file`` (pass ``__file__``), loaded by :func:`load_module`."""
    return load_module(Path(file).with_name(f"{name}.py"))


def suite_module(file: str | Path, suite: str, name: str) -> ModuleType:
    """The module ``<name>.py`` of suite ``suite`` beside the suite of ``file`` (pass ``__file__``): the file
    ``<folder of file>/../<suite>/<name>.py``, loaded by :func:`load_module`. The calling task's YAML must list
    ``suite`` in ``metadata.evalgate.uses_suites`` (so that suite's files key its stored results): a call with a
    literal suite name that no task of the suite lists is refused when the suite is loaded
    (``files.check_declared_uses``, exit 2). Raises FileNotFoundError when the file is missing."""
    return load_module(Path(file).resolve().parent.parent / suite / f"{name}.py")


def load_module(path: str | Path) -> ModuleType:
    """The task module at ``path`` (a ``.py`` file), executed afresh, as lm-eval loads it: by file path.

    Its module name is ``evalgate_<folder>_<stem>`` (e.g. ``evalgate_coding_utils``); it is not put in
    ``sys.modules``, so two suites' ``utils`` never collide. Raises FileNotFoundError when the file is missing and
    whatever the module raises while it runs.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such task module")
    spec = importlib.util.spec_from_file_location(f"evalgate_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def first_json_object(text: str) -> dict | None:
    """The first JSON object (``{...}`` that ``json`` decodes to a dict) in ``text``, reading from each ``{`` in
    turn; text after it is ignored. None when there is none. Model output is untrusted: this only parses it."""
    dec = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = dec.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    return None
