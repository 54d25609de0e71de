"""evalgate.results.store: atomic writes, checksums, quarantine of corrupt entries, concurrent writers and readers."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

import evalgate.results.store as store_mod
from evalgate.errors import ExitCode, StoreError
from evalgate.results.records import ItemResult, TaskResult
from evalgate.results.store import (
    ResultStore,
    content_key,
    read_json,
    tasks_from_json,
    tasks_to_json,
    write_json_atomic,
)

KEY = content_key({"config": "a", "suite": "s"})
OTHER = content_key({"config": "b", "suite": "s"})


def payload(n: int = 0) -> dict:
    return {"suite": "s", "effective": {"dtype": "float32"}, "n": n, "score": float("nan") if n < 0 else n / 7,
            "tasks": {"t": {"suite": "s", "metric": "acc", "items": [{"text": "é ✓ \u0000", "i": i} for i in range(3)]}}}


def leftovers(root: Path) -> list[str]:
    """Files in the store other than entries and their lock files (temp files, quarantined entries)."""
    return sorted(p.name for p in root.iterdir() if not (p.name.endswith(".json") or p.name.endswith(".lock")))


# ------------------------------------------------------------------------------------------ basics


def test_put_get_round_trip_with_checksum(tmp_path: Path) -> None:
    s = ResultStore(tmp_path / "store")
    assert s.get(KEY) is None
    path = s.put(KEY, payload(1))
    assert path == s.path(KEY) and path.exists()
    assert s.get(KEY) == payload(1)
    entry = json.loads(path.read_text(encoding="utf-8"))
    assert entry["schema"] == store_mod.SCHEMA_VERSION and entry["key"] == KEY and len(entry["checksum"]) == 64
    assert leftovers(s.root) == []


def test_nan_payload_round_trips(tmp_path: Path) -> None:
    s = ResultStore(tmp_path)
    s.put(KEY, payload(-1))
    got = s.get(KEY)
    assert got is not None and got["score"] != got["score"]  # NaN survives and still verifies


def test_content_key_is_order_independent_and_sensitive() -> None:
    assert content_key({"a": 1, "b": [1, 2]}) == content_key({"b": [1, 2], "a": 1})
    assert content_key({"a": 1}) != content_key({"a": 1.5})
    assert content_key({"a": "x"}) != content_key({"a": "y"})


# ------------------------------------------------------------------------------------------ atomic writes


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt()],
                         ids=["disk-full", "interrupt"])
def test_crash_mid_write_keeps_the_old_entry_and_no_temp_file(tmp_path: Path, monkeypatch, exc) -> None:
    s = ResultStore(tmp_path)
    s.put(KEY, payload(1))
    before = s.path(KEY).read_bytes()

    def dump_half_then_die(obj, fh, **kw):
        fh.write(json.dumps(obj)[:40])  # a partial entry reaches the temp file...
        raise exc  # ...then the process "crashes"

    monkeypatch.setattr(store_mod.json, "dump", dump_half_then_die)
    with pytest.raises(type(exc)):
        s.put(KEY, payload(2))
    monkeypatch.undo()
    assert s.path(KEY).read_bytes() == before
    assert s.get(KEY) == payload(1)
    assert leftovers(tmp_path) == [], "the temp file must be removed"


def test_crash_on_first_write_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    s = ResultStore(tmp_path)
    monkeypatch.setattr(store_mod.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(5, "I/O error")))
    with pytest.raises(OSError):
        s.put(KEY, payload(1))
    monkeypatch.undo()
    assert not s.path(KEY).exists()
    assert s.get(KEY) is None
    assert leftovers(tmp_path) == []


def test_write_json_atomic_replaces_whole_file(tmp_path: Path) -> None:
    p = tmp_path / "deep" / "x.json"
    write_json_atomic(p, {"a": "x" * 10_000})
    write_json_atomic(p, {"a": 1})
    assert json.loads(p.read_text()) == {"a": 1}
    assert [q.name for q in p.parent.iterdir()] == ["x.json"]


@pytest.fixture
def umask():
    """Set the process umask for one test (restored after)."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield os.umask
    os.umask(saved)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077, 0o027])
def test_write_json_atomic_honours_the_umask_like_a_plain_file(tmp_path: Path, umask, mask: int) -> None:
    umask(mask)
    plain = tmp_path / "plain.txt"
    plain.write_text("x")  # what open() gives any new file under this umask
    p = tmp_path / "x.json"
    write_json_atomic(p, {"a": 1})
    want = 0o666 & ~mask
    assert oct(p.stat().st_mode & 0o777) == oct(want) == oct(plain.stat().st_mode & 0o777)
    write_json_atomic(p, {"a": 2})  # a replaced file gets the same mode again
    assert oct(p.stat().st_mode & 0o777) == oct(want)
    assert sorted(q.name for q in tmp_path.iterdir()) == ["plain.txt", "x.json"]


def test_store_entries_follow_the_umask(tmp_path: Path, umask) -> None:
    umask(0o022)
    path = ResultStore(tmp_path / "store").put(KEY, payload(1))
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_write_json_atomic_never_overwrites_a_foreign_temp_file(tmp_path: Path, monkeypatch) -> None:
    """The temp name is created exclusively: an existing file of that name is skipped, not truncated."""
    names = iter(["aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(store_mod.secrets, "token_hex", lambda n: next(names))
    squatter = tmp_path / ".x.json.aaaaaaaaaaaa.tmp"
    squatter.write_text("someone else's")
    write_json_atomic(tmp_path / "x.json", {"a": 1})
    assert squatter.read_text() == "someone else's"
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1}
    assert sorted(q.name for q in tmp_path.iterdir()) == [".x.json.aaaaaaaaaaaa.tmp", "x.json"]


# ------------------------------------------------------------------------------------------ corruption


def corrupt(s: ResultStore, how: str) -> None:
    path = s.path(KEY)
    entry = json.loads(path.read_text(encoding="utf-8"))
    if how == "checksum-mismatch":  # a bit flip in the payload
        entry["payload"]["n"] = 999
    elif how == "wrong-checksum":
        entry["checksum"] = "0" * 64
    elif how == "wrong-schema":
        entry["schema"] = store_mod.SCHEMA_VERSION + 1
    elif how == "wrong-key":
        entry["key"] = OTHER
    elif how == "no-payload":
        del entry["payload"]
    elif how == "not-a-mapping":
        entry = [entry]
    if how == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "binary":
        path.write_bytes(os.urandom(256) + b"\xff")
    else:
        path.write_text(json.dumps(entry), encoding="utf-8")


CORRUPTIONS = ["checksum-mismatch", "wrong-checksum", "wrong-schema", "wrong-key", "no-payload", "not-a-mapping",
               "truncated", "empty", "binary"]


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_corrupt_entry_is_quarantined_and_recomputed(tmp_path: Path, how: str, caplog) -> None:
    s = ResultStore(tmp_path)
    s.put(KEY, payload(1))
    corrupt(s, how)
    bad = s.path(KEY).read_bytes()
    assert s.get(KEY) is None  # never used
    assert "corrupt or partial store entry" in caplog.text and str(s.path(KEY)) in caplog.text
    assert not s.path(KEY).exists()
    assert (tmp_path / f"{KEY}.corrupt").read_bytes() == bad  # kept for a post-mortem
    assert s.get(KEY) is None  # a plain miss now: the caller recomputes...
    s.put(KEY, payload(2))  # ...and stores afresh
    assert s.get(KEY) == payload(2)


def test_corruption_of_one_key_leaves_the_others(tmp_path: Path) -> None:
    s = ResultStore(tmp_path)
    s.put(KEY, payload(1))
    s.put(OTHER, payload(2))
    corrupt(s, "truncated")
    assert s.get(KEY) is None
    assert s.get(OTHER) == payload(2)


def test_entry_copied_under_another_key_is_not_used(tmp_path: Path) -> None:
    # A file renamed or copied to another key's name must not answer for that key.
    s = ResultStore(tmp_path)
    s.put(KEY, payload(1))
    s.path(OTHER).write_bytes(s.path(KEY).read_bytes())
    assert s.get(OTHER) is None
    assert s.get(KEY) == payload(1)


def test_unreadable_entry_is_a_store_error(tmp_path: Path) -> None:
    s = ResultStore(tmp_path)
    s.path(KEY).mkdir()  # a directory where the entry should be: cannot be used, nor overwritten
    with pytest.raises(StoreError, match="store entry cannot be read") as ei:
        s.get(KEY)
    assert ei.value.exit_code == ExitCode.RUNTIME and "\n" not in str(ei.value) and KEY in str(ei.value)


# ------------------------------------------------------------------------------------------ run files


def test_read_json_errors_are_one_line_store_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not found") as ei:
        read_json(tmp_path / "missing.json", "verdict")
    assert ei.value.exit_code == ExitCode.RUNTIME
    p = tmp_path / "cut.json"
    p.write_text('{"a": [1, 2')
    with pytest.raises(StoreError, match="unreadable or truncated") as ei:
        read_json(p, "results")
    assert "\n" not in str(ei.value) and str(p) in str(ei.value)


def test_tasks_round_trip_and_malformed(tmp_path: Path) -> None:
    item = ItemResult(task="t", item_id=0, item_hash="h", prompt="p", target="x", output="y", score=1.0,
                      metrics={"acc": 1.0})
    tasks = {"t": TaskResult(task="t", suite="s", metric="acc", items=(item,))}
    data = json.loads(json.dumps(tasks_to_json(tasks)))
    assert tasks_from_json(data, "x") == tasks
    del data["t"]["items"][0]["score"]
    with pytest.raises(StoreError, match="src.json: malformed task results"):
        tasks_from_json(data, "src.json")


# ------------------------------------------------------------------------------------------ concurrency

WRITERS, PUTS = 4, 50


def _writer(root: str, worker: int) -> None:
    s = ResultStore(Path(root))
    for i in range(PUTS):
        s.put(KEY, {"worker": worker, "i": i, "blob": "x" * (1000 * (i % 7))})  # all on one key
        s.put(content_key({"worker": worker, "i": i}), {"worker": worker, "i": i})  # each on its own
        if i % 10 == 0:
            got = s.get(KEY)
            assert got is not None and set(got) == {"worker", "i", "blob"}


def _reader(root: str, _: int) -> None:
    s = ResultStore(Path(root))
    for _ in range(20):
        s.get(KEY)  # the entry may be corrupt and quarantined by a concurrent reader: never raises


def _run_all(target, root: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=target, args=(str(root), w)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * WRITERS


def test_concurrent_writers_same_and_different_keys(tmp_path: Path) -> None:
    _run_all(_writer, tmp_path)
    s = ResultStore(tmp_path)
    last = s.get(KEY)
    assert last is not None and last["i"] in range(PUTS) and last["blob"] == "x" * (1000 * (last["i"] % 7))
    for w in range(WRITERS):
        for i in range(PUTS):
            assert s.get(content_key({"worker": w, "i": i})) == {"worker": w, "i": i}
    assert len(list(tmp_path.glob("*.json"))) == 1 + WRITERS * PUTS
    assert leftovers(tmp_path) == [], "no temp files and nothing quarantined"


def test_concurrent_readers_of_a_corrupt_entry(tmp_path: Path) -> None:
    s = ResultStore(tmp_path)
    s.put(KEY, payload(1))
    corrupt(s, "truncated")
    _run_all(_reader, tmp_path)
    assert s.get(KEY) is None
    assert leftovers(tmp_path) == [f"{KEY}.corrupt"]


def test_entry_quarantined_while_waiting_for_the_lock(tmp_path: Path, monkeypatch) -> None:
    # Reader A sees the file, then waits for the lock; reader B holds it and quarantines the corrupt entry.
    s = ResultStore(tmp_path)
    s.put(KEY, payload(1))
    corrupt(s, "truncated")
    real = store_mod.FileLock

    def lock_after_another_reader(path, *args, **kwargs):
        monkeypatch.setattr(store_mod, "FileLock", real)
        assert ResultStore(tmp_path).get(KEY) is None  # B
        return real(path, *args, **kwargs)

    monkeypatch.setattr(store_mod, "FileLock", lock_after_another_reader)
    assert s.get(KEY) is None  # A: a miss, not a crash
    assert leftovers(tmp_path) == [f"{KEY}.corrupt"]
