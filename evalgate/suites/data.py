"""Whether every task's data can be had before any engine starts: local files, and hub datasets in the local
Hugging Face cache when the hub is unreachable."""

from __future__ import annotations

import os
from pathlib import Path

from evalgate.errors import ConfigError
from evalgate.suites.files import LOCAL_BUILDERS, Suite, TaskSpec

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
    import json
    import subprocess
    import sys

    hub = _hub_datasets(suites)
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


def _hub_datasets(suites: list[Suite]) -> dict[str, tuple[TaskSpec, str, str | None]]:
    """The hub datasets the suites' tasks read (``"path\\0name"`` -> (a task, path, name)); local data files must
    exist (ConfigError naming the task YAML otherwise); generated data and local folders need nothing."""

    hub: dict[str, tuple[TaskSpec, str, str | None]] = {}
    for suite in suites:
        for spec in suite.specs:
            if spec.generated:
                continue
            path = spec.dataset_path or ""
            if path in LOCAL_BUILDERS or spec.data_files and not path:
                for f in spec.data_files:
                    problem = None if "://" in f else _data_file_problem(f)
                    if problem:
                        raise ConfigError(f"task {spec.name}: data file {f} {problem}", path=spec.source,
                                          field="dataset_kwargs.data_files")
                continue
            if not path or Path(path).expanduser().is_dir():
                continue
            hub[f"{path}\0{spec.dataset_name}"] = (spec, path, spec.dataset_name)
    return hub


def _data_file_problem(pattern: str) -> str | None:
    """Why local data file ``pattern`` (a path or a glob) cannot be read as data, None when it can: nothing matches,
    or a match is a directory (a plain path only: a glob may match folders, which ``datasets`` skips), empty, a
    symlink loop or unreadable. Found here, before any engine, instead of as a ``datasets`` traceback in the worker."""
    import glob

    matches = glob.glob(pattern)
    if not matches:
        return "does not exist (relative data_files resolve against the task YAML's folder)"
    for m in matches:
        what = "" if m == pattern else f" (matched {m})"
        try:
            st = os.stat(m)
        except OSError as exc:  # a dangling or self-referencing symlink, a path through a file
            return f"cannot be read{what}: {exc.strerror}"
        if os.path.isdir(m):
            if glob.has_magic(pattern):
                continue
            return "is a directory, not a data file"
        if st.st_size == 0:
            return f"is empty{what}: a task needs at least one item"
        if not os.access(m, os.R_OK):
            return f"cannot be read{what}: permission denied"
        if m.endswith(".jsonl"):
            bad = _jsonl_problem(m)
            if bad:
                return f"{bad}{what}"
    return None


def _jsonl_problem(path: str) -> str | None:
    """The first line of JSON-lines file ``path`` that is not one JSON object, as ``"line N: ..."``; None when every
    non-blank line is one. ``datasets`` reports such a line only as a byte position ("Trailing data at position 50")
    from inside the engine worker; this names the line. Reads the whole file once (~0.5 s per 100,000 lines)."""
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line.rstrip("\r\n"))  # so its column counts within the line
                except ValueError as exc:
                    return f"line {number}: not valid JSON ({exc})"
                if not isinstance(row, dict):
                    return f"line {number}: a JSON {type(row).__name__}, not an object (one item per line)"
    except UnicodeDecodeError as exc:
        return f"is not UTF-8 text ({exc.reason} at byte {exc.start})"
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    return None
