"""``evalgate plan`` counts local json / csv / parquet suites (``tasknotes.count_items``): each format's row count is
checked against what ``datasets`` itself loads for that split (the library lm-eval reads the files with)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.errors import ConfigError
from evalgate.suites.discovery import count_items, load_suite

TASK = ("task: {name}\ndataset_path: {builder}\ndataset_kwargs:\n  data_files: {files}\n{extra}test_split: {split}\n"
        "doc_to_text: '{{{{q}}}}'\ndoc_to_target: '{{{{a}}}}'\nmetric_list: [{{metric: exact_match}}]\n")


def _write(root: Path) -> Path:
    """Suite ``local``: the same 5 rows as JSON Lines, a JSON array, a JSON object's field, CSV (a quoted newline in
    one answer, a blank line) and Parquet, plus a task of two JSON Lines files by glob and one over a "train" path."""
    d = root / "local"
    (d / "data").mkdir(parents=True)
    rows = [{"q": f"question {i}", "a": f"answer\n{i}" if i == 2 else f"answer {i}"} for i in range(5)]
    (d / "data" / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    (d / "data" / "items.json").write_text(json.dumps(rows))
    (d / "data" / "wrapped.json").write_text(json.dumps({"version": 1, "data": rows}))
    import csv

    with (d / "data" / "items.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["q", "a"])
        w.writeheader()
        w.writerows(rows[:3])
        fh.write("\r\n")
        w.writerows(rows[3:])
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), d / "data" / "items.parquet")
    (d / "data" / "part-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    (d / "data" / "part-2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[2:]))
    tasks = {
        "t_jsonl": ("json", "{test: data/items.jsonl}", "", "test"),
        "t_json_array": ("json", "{test: data/items.json}", "", "test"),
        "t_json_field": ("json", "{test: data/wrapped.json}", "  field: data\n", "test"),
        "t_csv": ("csv", "{validation: data/items.csv}", "", "validation"),
        "t_parquet": ("parquet", "{test: data/items.parquet}", "", "test"),
        "t_glob": ("json", "{test: 'data/part-*.jsonl'}", "", "test"),
        "t_train": ("json", "data/items.jsonl", "", "train"),
    }
    for name, (builder, files, extra, split) in tasks.items():
        (d / f"{name}.yaml").write_text(TASK.format(name=name, builder=builder, files=files, extra=extra, split=split))
    return root


def _datasets_rows(suite, name: str, tmp_path: Path) -> int:
    """What ``datasets.load_dataset`` loads for the task's split (its own cache in tmp_path)."""
    import datasets

    cfg = suite.spec(name).config
    kwargs = dict(cfg["dataset_kwargs"])
    files = kwargs.pop("data_files")
    base = str(suite.path)
    files = ({k: f"{base}/{v}" for k, v in files.items()} if isinstance(files, dict) else f"{base}/{files}")
    split = cfg.get("test_split") or cfg.get("validation_split")
    return len(datasets.load_dataset(cfg["dataset_path"], data_files=files, split=split, cache_dir=str(tmp_path / "hf"),
                                     **kwargs))


@pytest.mark.parametrize("name", ["t_jsonl", "t_json_array", "t_json_field", "t_csv", "t_parquet", "t_glob",
                                  "t_train"])
def test_local_suite_rows_are_counted_as_datasets_loads_them(name: str, tmp_path: Path) -> None:
    suite = load_suite("local", _write(tmp_path / "suites"))
    n = count_items(suite, name)
    assert n == 5
    assert n == _datasets_rows(suite, name, tmp_path)


def test_a_split_the_data_files_lack_or_a_hub_dataset_is_size_unknown(tmp_path: Path) -> None:
    root = _write(tmp_path / "suites")
    (root / "local" / "t_nosplit.yaml").write_text(
        TASK.format(name="t_nosplit", builder="json", files="{train: data/items.jsonl}", extra="", split="test"))
    (root / "local" / "t_bad.yaml").write_text(
        TASK.format(name="t_bad", builder="json", files="{test: data/items.csv}", extra="", split="test"))
    suite = load_suite("local", root)
    with pytest.raises(ConfigError, match=r"t_nosplit\.yaml: dataset_kwargs\.data_files: split 'test' is not among "
                                          r"the data files' splits \(train\)"):
        count_items(suite, "t_nosplit")
    with pytest.raises(ConfigError, match=r"t_bad\.yaml: dataset_kwargs\.data_files: cannot count the rows .*line 1"):
        count_items(suite, "t_bad")


def test_plan_prints_the_local_suite_size(tmp_path: Path, capsys, monkeypatch) -> None:
    """``plan --assume-discordance``: the JSON Lines task's row says 5 items, no "suite size unknown"."""
    from evalgate.cli import main

    root = _write(tmp_path / "suites")
    monkeypatch.setenv("EVALGATE_SUITES", str(root))
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "--config", "baseline", "--margin", "10", "--assume-discordance", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "size unknown" not in out and "custom_dataset" not in out
    table = {line.split()[0]: line.split()[1:] for line in out.split("\nat full size")[0].splitlines()
             if line.startswith("local/") and ":" not in line}
    # every task's row: alpha, items needed, and the suite's 5 items
    assert {t: row[-1] for t, row in table.items()} == {f"local/{t}": "5" for t in (
        "t_csv", "t_glob", "t_json_array", "t_json_field", "t_jsonl", "t_parquet", "t_train")}
    assert "local/t_jsonl: needs 31 items; suite has 5: cannot be powered at a 10-point margin" in out
