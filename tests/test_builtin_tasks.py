"""Suites that name lm-eval's built-in tasks, groups over them, local JSON tasks, and the offline check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalgate.errors import ConfigError, ExitCode
from evalgate.suites import (GROUP_FIELDS, check_datasets, datasets_cache_dir, hub_offline, load_suite,
                             task_manager)

ROOT = Path(__file__).resolve().parent.parent
ITEMS = [{"q": "1+1", "a": "2"}, {"q": "2+2", "a": "4"}, {"q": "3+3", "a": "6"}]
LOCAL_TASK = """task: tiny_local
dataset_path: json
dataset_kwargs:
  data_files: {test: data/items.json}
test_split: test
output_type: generate_until
doc_to_text: "Q: {{q}}\\nA:"
doc_to_target: "{{a}}"
generation_kwargs: {until: ["\\n"], max_gen_toks: 8, do_sample: false}
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""
GROUP = """group: math_mix
task:
  - task: gsm8k
    num_fewshot: 2
  - tiny_local
"""


def _suites(root: Path, group: str | None = GROUP, local: str = LOCAL_TASK) -> Path:
    d = root / "suites" / "math"
    (d / "data").mkdir(parents=True)
    (d / "tiny_local.yaml").write_text(local)
    (d / "data" / "items.json").write_text(json.dumps(ITEMS))
    if group is not None:
        (d / "mix.yaml").write_text(group)
    return root / "suites"


def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)


def test_group_fields_are_lm_evals() -> None:
    """The keys a group keeps for itself (the rest override its members) are lm-eval's GroupConfig fields."""
    import dataclasses

    from lm_eval.config.group import GroupConfig

    assert GROUP_FIELDS == {f.name for f in dataclasses.fields(GroupConfig)}


def test_local_json_task_resolves_data_files_against_its_folder(tmp_path: Path, monkeypatch) -> None:
    root = _suites(tmp_path, group=None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # lm-eval alone would look for elsewhere/data/items.json
    suite = load_suite("math", root)
    assert suite.tasks == ("tiny_local",) and not suite.builtins
    assert suite.spec("tiny_local").data_files == (str(root / "math" / "data" / "items.json"),)
    task = task_manager(root).load(["tiny_local"])["tasks"]["tiny_local"]
    docs = list(task.test_docs())
    assert [d["q"] for d in docs] == [i["q"] for i in ITEMS]
    assert task.doc_to_text(docs[1]) == "Q: 2+2\nA:"


def test_limit_is_evalgates_and_lm_eval_never_sees_it(tmp_path: Path) -> None:
    root = _suites(tmp_path, group=None, local=LOCAL_TASK + "limit: 2\n")
    suite = load_suite("math", root)
    assert suite.entries == (("tiny_local", 2),) and suite.spec("tiny_local").limit == 2
    task = task_manager(root).load(["tiny_local"])["tasks"]["tiny_local"]  # TaskConfig rejects unknown keys
    assert len(list(task.test_docs())) == 3  # the limit is applied by the runner, through lm-eval's --limit


@pytest.mark.parametrize(("text", "field", "words"), [
    (LOCAL_TASK + "limit: 0\n", "limit", "must be a whole number of items >= 1, got 0"),
    (LOCAL_TASK + "limit: many\n", "limit", "got 'many'"),
])
def test_bad_limit(tmp_path: Path, text: str, field: str, words: str) -> None:
    root = _suites(tmp_path, group=None, local=text)
    with pytest.raises(ConfigError, match=words) as e:
        load_suite("math", root)
    assert e.value.field == field and e.value.exit_code == ExitCode.USAGE


def test_group_over_a_builtin_and_a_local_task(tmp_path: Path) -> None:
    root = _suites(tmp_path)
    suite = load_suite("math", root)
    assert suite.tasks == ("gsm8k", "tiny_local")
    assert suite.primary_metric == {"gsm8k": "exact_match", "tiny_local": "exact_match"}
    assert suite.entries == (("math_mix", None),)  # tiny_local runs through the group only
    gsm = suite.spec("gsm8k")
    assert (gsm.builtin, gsm.dataset_path, gsm.dataset_name, gsm.source) == (
        True, "openai/gsm8k", "main", root / "math" / "mix.yaml")
    assert suite.builtins and not suite.spec("tiny_local").builtin


def test_member_overrides_reach_lm_eval(tmp_path: Path) -> None:
    """num_fewshot and metadata as lm-eval spells them in a group member, on a local task (no hub needed)."""
    root = _suites(tmp_path, group="group: g\ntask:\n  - task: tiny_local\n    num_fewshot: 1\n"
                                   "    metadata: {version: 7}\n")
    tasks = task_manager(root).load(["g"])["tasks"]
    assert tasks["tiny_local"].config.num_fewshot == 1
    assert tasks["tiny_local"].config.metadata["version"] == 7


@pytest.mark.parametrize(("group", "words"), [
    ("group: g\ntask: [gsm8kk]\n", "task 'gsm8kk' is neither a task of this suite nor one of lm-eval's built-in "
                                   "tasks or groups; did you mean 'gsm8k'?"),
    ("group: g\ntask: [wikitext]\n", "task wikitext: must be true for the primary metric 'word_perplexity', got "
                                     "false"),
    ("group: g\ntask: [{task: gsm8k, limit: 3}]\n", "limit applies to a whole suite YAML"),
    ("group: g\ntask: []\n", "group g: its task list is missing or empty"),
])
def test_bad_group(tmp_path: Path, group: str, words: str) -> None:
    root = _suites(tmp_path, group=group)
    with pytest.raises(ConfigError) as e:
        load_suite("math", root)
    assert words in str(e.value) and str(root / "math" / "mix.yaml") in str(e.value)


def test_group_member_listed_twice(tmp_path: Path) -> None:
    root = _suites(tmp_path, group="group: g\ntask: [tiny_local, tiny_local]\n")
    with pytest.raises(ConfigError, match="task 'tiny_local' is listed twice"):
        load_suite("math", root)


def test_missing_local_data_file(tmp_path: Path) -> None:
    root = _suites(tmp_path, group=None)
    (root / "math" / "data" / "items.json").unlink()
    with pytest.raises(ConfigError) as e:
        check_datasets([load_suite("math", root)])
    assert e.value.field == "dataset_kwargs.data_files"
    assert f"data file {root / 'math' / 'data' / 'items.json'} does not exist" in str(e.value)


def test_local_data_needs_no_hub(tmp_path: Path, monkeypatch) -> None:
    _offline(monkeypatch, tmp_path)
    assert check_datasets([load_suite("math", _suites(tmp_path, group=None))]) == {}


def test_offline_builtin_not_cached(tmp_path: Path, monkeypatch) -> None:
    _offline(monkeypatch, tmp_path)
    assert hub_offline()
    assert datasets_cache_dir() == tmp_path / "hf" / "datasets"
    root = _suites(tmp_path)
    with pytest.raises(ConfigError) as e:
        check_datasets([load_suite("math", root)])
    assert str(e.value) == (
        f"{root / 'math' / 'mix.yaml'}: task gsm8k: dataset openai/gsm8k (main) is not in the local Hugging Face "
        f"cache ({tmp_path / 'hf' / 'datasets'}) and the hub is unreachable; run once with network, or set HF_HOME "
        "to a cache that has it")


def test_hub_offline_reads_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_offline()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens, refused at once
    assert hub_offline()


def _cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalgate", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=300)


def test_run_with_an_uncached_builtin_fails_before_any_engine(tmp_path: Path) -> None:
    root = _suites(tmp_path)
    out = tmp_path / "run"
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_OFFLINE": "1", "EVALGATE_HOME": str(tmp_path / "home")}
    proc = _cli(["run", "--config", "fp16-state", "--configs-dir", str(ROOT / "configs"), "--suites-dir", str(root),
                 "--thresholds", str(ROOT / "thresholds.yaml"), "--out", str(out)], tmp_path, env)
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"evalgate: error: {root / 'math' / 'mix.yaml'}: task gsm8k: dataset openai/gsm8k (main) is not "
                     f"in the local Hugging Face cache ({tmp_path / 'hf' / 'datasets'}) and the hub is unreachable; "
                     "run once with network, or set HF_HOME to a cache that has it"]
    assert not (out / "logs").exists(), "no engine (not even the candidate's value check) may have started"
    assert "task gsm8k: dataset openai/gsm8k" in (out / "summary.md").read_text()


def test_list_shows_builtin_and_local_tasks(tmp_path: Path) -> None:
    root = _suites(tmp_path)
    proc = _cli(["list", "--configs-dir", str(ROOT / "configs"), "--suites-dir", str(root)], tmp_path, {})
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith("math "))
    assert line.split(None, 1)[1] == "gsm8k (exact_match, lm-eval built-in), tiny_local (exact_match)"


def test_first_filter_and_limits() -> None:
    from evalgate.runner import _first_filter, _min_limit

    rows = [{"doc_id": 0, "filter": "strict-match"}, {"doc_id": 1, "filter": "strict-match"},
            {"doc_id": 0, "filter": "flexible-extract"}, {"doc_id": 1, "filter": "flexible-extract"}]
    assert _first_filter(rows) == rows[:2] and _first_filter([]) == []
    assert (_min_limit(None, None), _min_limit(5, None), _min_limit(None, 3), _min_limit(5, 3)) == (None, 5, 3, 3)
