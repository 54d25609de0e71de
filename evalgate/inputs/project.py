"""Where a gate's configs, suites and thresholds come from: the user's project, else the ones shipped with evalgate.

A *gate project* is a directory holding ``evalgate.toml``, or a ``pyproject.toml`` with a ``[tool.evalgate]``
table, or a ``thresholds.yaml``; evalgate looks for the nearest one from the working directory upward, as pytest
and pre-commit find their roots. In it, ``configs/``, ``suites/`` and ``thresholds.yaml`` are used where they exist;
what the project lacks falls back to the built-in copy shipped inside the package (``evalgate/_builtin/`` in a
wheel, built from the repository's top-level folders by ``setup.py``; the repository itself in a source checkout).
The table may point elsewhere, paths relative to the project root::

    # evalgate.toml (or [tool.evalgate] in pyproject.toml)
    configs = "gate/configs"
    suites = "gate/suites"
    thresholds = "gate/thresholds.yaml"

Precedence per item: the command-line option (``--configs-dir``, ``--suites-dir``, ``--thresholds``), then
``$EVALGATE_SUITES`` (suites only), then the project, then the built-in copy. Nothing here imports lm-eval or vLLM.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # evalgate/, above this inputs/ package
SUITES_ENV = "EVALGATE_SUITES"
MARKERS = ("evalgate.toml", "pyproject.toml [tool.evalgate]", "thresholds.yaml")
_KEYS = {"configs": "configs", "suites": "suites", "thresholds": "thresholds.yaml"}


def builtin_dir() -> Path:
    """The folder holding the shipped ``configs/``, ``suites/`` and ``thresholds.yaml``: ``evalgate/_builtin`` in an
    installed wheel, else the source checkout's root (the package's parent, in an editable install)."""
    packaged = PACKAGE_DIR / "_builtin"
    return packaged if packaged.is_dir() else PACKAGE_DIR.parent


@dataclass(frozen=True)
class Layout:
    """What one command uses.

    Attributes:
        root: the project root, or None when no project was found from the working directory upward.
        marker: what made ``root`` a project (one of :data:`MARKERS`), or None.
        configs, suites, thresholds: the paths used.
        sources: per item (``configs``, ``suites``, ``thresholds``), where its path came from: ``"project"``,
            ``"built-in"``, the command-line option (e.g. ``"--suites-dir"``) or ``"EVALGATE_SUITES"``.
    """

    root: Path | None
    marker: str | None
    configs: Path
    suites: Path
    thresholds: Path
    sources: dict[str, str]


def _tool_table(path: Path) -> dict[str, Any] | None:
    """The ``[tool.evalgate]`` table of a ``pyproject.toml`` (None if it has none); the whole of an
    ``evalgate.toml``. ConfigError naming the file when it is not valid TOML."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read TOML: {exc}", path=path) from None
    if path.name == "evalgate.toml":
        return data
    tool = data.get("tool", {})
    table = tool.get("evalgate") if isinstance(tool, dict) else None
    return table if isinstance(table, dict) else None


def find_project(start: Path | None = None) -> tuple[Path, str, dict[str, Any], Path | None] | None:
    """The nearest gate project at or above ``start`` (default: the working directory).

    Returns:
        ``(root, marker, table, table file)``: ``table`` is the project's settings (empty for a bare
        ``thresholds.yaml``), ``table file`` the TOML file they came from (None for ``thresholds.yaml``). None when
        no directory up to the filesystem root is a project.
    Raises:
        ConfigError: an ``evalgate.toml`` / ``pyproject.toml`` on the way is not valid TOML.
    """
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "evalgate.toml").is_file():
            return d, MARKERS[0], _tool_table(d / "evalgate.toml") or {}, d / "evalgate.toml"
        if (d / "pyproject.toml").is_file():
            table = _tool_table(d / "pyproject.toml")
            if table is not None:
                return d, MARKERS[1], table, d / "pyproject.toml"
        if (d / "thresholds.yaml").is_file():
            return d, MARKERS[2], {}, None
    return None


def _settings(table: dict[str, Any], source: Path | None) -> dict[str, str]:
    prefix = "tool.evalgate." if source is not None and source.name == "pyproject.toml" else ""
    for key, value in table.items():
        if key not in _KEYS:
            close = difflib.get_close_matches(str(key), list(_KEYS), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f" (valid: {', '.join(_KEYS)})"
            raise ConfigError(f"unknown key{hint}", path=source, field=f"{prefix}{key}")
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"must be a path (string), got {value!r}", path=source, field=f"{prefix}{key}")
    return dict(table)


def layout(configs_dir: str | Path | None = None, suites_dir: str | Path | None = None,
           thresholds: str | Path | None = None, start: Path | None = None) -> Layout:
    """Resolve the configs, suites and thresholds a command uses (see the module docstring for the order).

    Args:
        configs_dir, suites_dir, thresholds: the command-line values (None when not given).
        start: where the project search starts (default: the working directory).
    Raises:
        ConfigError: a project's TOML is invalid, or its table has an unknown key or a non-string value; a path the
            table names does not exist.
    """
    found = find_project(start)
    root, marker, table, table_file = found if found else (None, None, {}, None)
    settings = _settings(table, table_file)
    builtin = builtin_dir()
    given = {"configs": configs_dir, "suites": suites_dir, "thresholds": thresholds}
    flags = {"configs": "--configs-dir", "suites": "--suites-dir", "thresholds": "--thresholds"}
    paths: dict[str, Path] = {}
    sources: dict[str, str] = {}
    for key, default_name in _KEYS.items():
        env = os.environ.get(SUITES_ENV, "").strip() if key == "suites" else ""
        if given[key] is not None:
            paths[key], sources[key] = Path(given[key]).expanduser().resolve(), flags[key]
        elif env:
            paths[key], sources[key] = Path(env).expanduser().resolve(), SUITES_ENV
        elif root is not None and key in settings:
            p = (root / settings[key]).resolve()
            if not p.exists():
                field = ("tool.evalgate." if marker == MARKERS[1] else "") + key
                raise ConfigError(f"{p} does not exist", path=table_file, field=field)
            paths[key], sources[key] = p, "project"
        elif root is not None and (root / default_name).exists():
            paths[key], sources[key] = root / default_name, "project"
        else:
            paths[key], sources[key] = builtin / default_name, "built-in"
    return Layout(root=root, marker=marker, configs=paths["configs"], suites=paths["suites"],
                  thresholds=paths["thresholds"], sources=sources)


def describe(lay: Layout) -> list[str]:
    """Lines for ``evalgate list``: which project (if any) and where each of configs, suites, thresholds came from."""
    if lay.root is None:
        head = f"project: none found from {Path.cwd()} upward (no {', '.join(MARKERS)}); using evalgate's built-in ones"
    else:
        head = f"project: {lay.root} ({lay.marker})"
    return [head] + [f"  {key + ':':12} {getattr(lay, key)} ({lay.sources[key]})"
                     for key in ("configs", "suites", "thresholds")]
