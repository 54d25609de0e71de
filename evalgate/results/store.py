"""Stored results: a content-addressed cache of per-suite results, and the run directory.

Cache entries live in ``$EVALGATE_HOME/store/<key>.json``. The key is the SHA-256 of the canonical JSON
of everything that defines a result — model and its files' fingerprint, requested engine args, env,
sampling, suite content hash, tasks, item limit, lm-eval/vLLM/evalgate versions and :data:`RESULTS_VERSION`
(evalgate's own version of how results are computed, bumped by hand) — so a PR pays for its
candidate only, and two configs never share outputs (lm-eval's own ``use_cache`` key ignores the
model arguments). Writes go to a temp file and ``os.replace`` under a file lock; every entry carries a
checksum of its payload, and a corrupt or partial entry is reported and ignored (recomputed), never used.

A run directory (``--out``) holds what one gate invocation produced::

    manifest.json   configs (requested + effective), suite hashes, versions, timings
    baseline.json   candidate.json   per-item results of each side (all suites)
    verdict.json    the decision, per task
    report.html     the diff report
    logs/           engine logs of the worker processes
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
from pathlib import Path
from typing import Any

from filelock import FileLock

from evalgate.errors import StoreError
from evalgate.results.records import ItemResult, TaskResult

SCHEMA_VERSION = 1  # the layout of a store entry file (schema, key, checksum, payload)
# The version of how evalgate computes a result, part of every store key and generation-journal key
# (evalgate.evaluate.runner._plan). It MUST be bumped by any change to evalgate that can change a stored result or
# generation for the same model, config and suite files: the engine adapter (prompts, requests, sampling it
# sends, read-back), the worker, built-in scoring or task code. Changes inside a suite's own files are covered
# by the suite content hash, and the model by its fingerprint; the package version (``__version__``) is not
# bumped per change, and evalgate's source is deliberately not hashed (a docstring edit must not empty the store).
# 1: the keys before this constant (versions only). 2: after model_fingerprint began hashing file contents,
# with the retrained embedded model and the changed coding suite. 3: the MTP drafter is built in the engine dtype
# on CPU too (engine.evalgate_extras), which changes every speculative-decoding generation there. 4: items carry
# the dataset's own id (``ItemResult.source_id``), which an entry written before it lacks.
RESULTS_VERSION = 4
log = logging.getLogger(__name__)


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces). Raises TypeError on values JSON cannot hold."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def content_key(factors: dict[str, Any]) -> str:
    """SHA-256 hex digest of the canonical JSON of ``factors`` (vLLM's ``compute_hash`` idea)."""
    return hashlib.sha256(canonical_json(factors).encode()).hexdigest()


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (temp file in the same directory, fsync, ``os.replace``).

    The file gets the permissions of any newly created file (``0o666`` less the process umask, so
    ``0o644`` under the usual umask 022): run directories are meant to be shared, and a JSON file
    should not be private while the HTML report beside it is not.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=1, ensure_ascii=False, allow_nan=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _create_temp(path: Path) -> tuple[int, str]:
    """A new, exclusively created temp file next to ``path``: ``(fd, name)``.

    ``tempfile.mkstemp`` always creates mode 0600; opening with ``O_CREAT | O_EXCL`` and mode 0666
    lets the kernel apply the umask (and any default ACL) exactly as for a normal file, without
    reading or changing the process-wide umask (which would race with other threads).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: no free temporary file name for {path.name}")


def read_json(path: Path, what: str) -> Any:
    """Read a JSON file written by evalgate. Raises StoreError naming the file when missing, malformed or nested
    too deeply to decode."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise StoreError(f"{path}: {what} not found") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreError(f"{path}: {what} is unreadable or truncated ({exc})") from exc
    except RecursionError:  # "[[[[...": nested deeper than the decoder's recursion; evalgate writes a few levels
        raise StoreError(f"{path}: {what} is not a file evalgate writes: JSON nested too deeply") from None


class ResultStore:
    """Content-addressed cache of suite results.

    Args:
        root: the store directory (created on demand).
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry stored under ``key``, or None when absent or corrupt (a corrupt one is logged and quarantined)."""
        path = self.path(key)
        if not path.exists():
            return None
        with FileLock(str(path) + ".lock"):
            try:
                raw = path.read_bytes()
            except FileNotFoundError:  # quarantined by another reader while we waited for the lock
                return None
            except OSError as exc:  # a directory, no permission, an I/O error: neither usable nor recomputable
                raise StoreError(f"{path}: store entry cannot be read ({exc.strerror or exc})") from exc
            try:
                entry = json.loads(raw.decode("utf-8"))
                ok = (isinstance(entry, dict) and entry.get("schema") == SCHEMA_VERSION
                      and entry.get("key") == key and entry.get("checksum") == _checksum(entry["payload"]))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
                ok = False
            if not ok:
                log.warning("%s: corrupt or partial store entry; it will be recomputed", path)
                os.replace(path, path.with_suffix(".corrupt"))
                return None
        return entry["payload"]

    def put(self, key: str, payload: dict[str, Any]) -> Path:
        """Store ``payload`` (JSON-able) under ``key`` atomically, with a checksum. Returns the file."""
        path = self.path(key)
        entry = {"schema": SCHEMA_VERSION, "key": key, "checksum": _checksum(payload), "payload": payload}
        with FileLock(str(path) + ".lock"):
            write_json_atomic(path, entry)
        return path


class GenerationJournal:
    """Append-only log of finished generations of one config, so a killed run resumes without recomputing.

    One JSON line per generation: ``{"k": request key, "g": {text, n_tokens, finish_reason}, "c": checksum}``,
    flushed and fsynced after each batch. A line cut short by a kill, or whose checksum does not match, is
    skipped (that generation is simply redone).

    Args:
        path: the journal file (``<store>/journal/<config key>.jsonl``).
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, dict[str, Any]]:
        """Every intact record by request key (later lines win)."""
        out: dict[str, dict[str, Any]] = {}
        if not self.path.exists():
            return out
        with FileLock(str(self.path) + ".lock"), self.path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                    if rec["c"] == _checksum([rec["k"], rec["g"]]):
                        out[rec["k"]] = rec["g"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue
        return out

    def append(self, records: dict[str, dict[str, Any]]) -> None:
        """Append ``{request key: generation}`` records durably (one write, flush, fsync)."""
        if not records:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lines = "".join(canonical_json({"k": k, "g": g, "c": _checksum([k, g])}) + "\n" for k, g in records.items())
        with FileLock(str(self.path) + ".lock"), self.path.open("a+b") as fh:
            # A kill can leave a half-written last line; start on a fresh line so only that record is lost.
            if fh.tell() > 0:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    lines = "\n" + lines
            fh.write(lines.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())


def _checksum(payload: Any) -> str:
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def tasks_to_json(tasks: dict[str, TaskResult]) -> dict[str, Any]:
    """Serialise task results: ``{task: {"suite", "metric", "items": [ItemResult dicts]}}``."""
    return {name: {"suite": t.suite, "metric": t.metric, "items": [i.to_dict() for i in t.items]}
            for name, t in tasks.items()}


# The fields of a stored item the comparison reads, and what each must be (``_item_problem``).
_ITEM_TEXT = ("item_hash", "prompt", "target", "output")


def _item_problem(item: Any) -> tuple[str, str] | None:
    """``(field, reason)`` for the first field of a stored item record the comparison cannot use, else None."""
    import math

    if not isinstance(item, dict):
        return "", f"must be a mapping, got {type(item).__name__}"
    for key in _ITEM_TEXT:
        if key in item and not isinstance(item[key], str):
            return key, f"must be a string, got {type(item[key]).__name__}"
    if "item_id" in item and (isinstance(item["item_id"], bool) or not isinstance(item["item_id"], int)):
        return "item_id", f"must be an integer, got {item['item_id']!r}"
    score = item.get("score")
    if "score" in item and (isinstance(score, bool) or not isinstance(score, (int, float))
                            or not math.isfinite(score) or not 0 <= score <= 1):
        return "score", f"must be a number in [0, 1], got {score!r}"
    if "metrics" in item and not isinstance(item["metrics"], dict):
        return "metrics", f"must be a mapping, got {type(item['metrics']).__name__}"
    return None


def tasks_from_json(data: dict[str, Any], source: Path | str) -> dict[str, TaskResult]:
    """Inverse of :func:`tasks_to_json`. Raises StoreError naming ``source`` and the dotted field on a malformed
    record (an item whose hash, texts, score in [0, 1] or metrics have the wrong type)."""
    if not isinstance(data, dict):
        raise StoreError(f"{source}: malformed task results: tasks: must be a mapping, got {type(data).__name__}")
    for name, t in data.items():
        items = t.get("items") if isinstance(t, dict) else None
        if not isinstance(t, dict) or not isinstance(t.get("suite"), str) or not isinstance(t.get("metric"), str) \
                or not isinstance(items, list):
            raise StoreError(f"{source}: malformed task results: tasks.{name}: must be a mapping with suite and "
                             f"metric (strings) and items (a list)")
        for i, item in enumerate(items):
            bad = _item_problem(item)
            if bad is not None:
                where = f"tasks.{name}.items[{i}]" + (f".{bad[0]}" if bad[0] else "")
                raise StoreError(f"{source}: malformed task results: {where}: {bad[1]}")
    try:
        return {name: TaskResult(task=name, suite=t["suite"], metric=t["metric"],
                                 items=tuple(ItemResult.from_dict(i) for i in t["items"]))
                for name, t in data.items()}
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise StoreError(f"{source}: malformed task results ({exc!r})") from exc
