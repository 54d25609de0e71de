"""Tests of evalgate.inputs.thresholds: precedence and every way a thresholds file can be wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalgate.errors import ConfigError, ExitCode
from evalgate.inputs.thresholds import TaskThreshold, Thresholds, load_thresholds

GOOD = """\
# thresholds.yaml (margins in points)
alpha: 0.05
bootstrap_resamples: 20000
seed: 7
default:
  margin: 2.0
suites:
  docparse: {margin: 3.0}
  coding: {margin: 5.0, alpha: 0.025}
tasks:
  finance_tableqa: {margin: 1.5}
  docparse_fields: {alpha: 0.01}
  humaneval: {margin: 4}
"""


def _write(tmp_path: Path, text: str | bytes, name: str = "thresholds.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def good(tmp_path: Path) -> Thresholds:
    return load_thresholds(_write(tmp_path, GOOD))


def test_top_level_values(good: Thresholds, tmp_path: Path) -> None:
    assert good.alpha == 0.05
    assert good.default_margin == 2.0
    assert good.bootstrap_resamples == 20000
    assert good.seed == 7
    assert good.path == tmp_path / "thresholds.yaml"


def test_default_applies_to_unlisted_task(good: Thresholds) -> None:
    assert good.for_task("math", "gsm8k") == TaskThreshold(margin=2.0, alpha=0.05, source="default")


def test_suite_overrides_default(good: Thresholds) -> None:
    got = good.for_task("docparse", "docparse_tables")
    assert got == TaskThreshold(3.0, 0.05, "suites.docparse")
    assert good.for_task("coding", "mbpp") == TaskThreshold(5.0, 0.025, "suites.coding")


def test_task_overrides_suite(good: Thresholds) -> None:
    got = good.for_task("finance", "finance_tableqa")
    assert got == TaskThreshold(1.5, 0.05, "tasks.finance_tableqa")
    # task margin beats suite margin; suite alpha still inherited; int margin becomes float
    got = good.for_task("coding", "humaneval")
    assert got == TaskThreshold(4.0, 0.025, "tasks.humaneval")
    assert isinstance(got.margin, float)


def test_task_alpha_only_keeps_suite_margin_source(good: Thresholds) -> None:
    got = good.for_task("docparse", "docparse_fields")
    assert got == TaskThreshold(3.0, 0.01, "suites.docparse")


def test_optional_keys_default(tmp_path: Path) -> None:
    t = load_thresholds(_write(tmp_path, "alpha: 0.1\ndefault: {margin: 0}\nsuites:\ntasks: {}\n"))
    assert (t.bootstrap_resamples, t.seed, t.default_margin) == (10_000, 0, 0.0)
    assert dict(t.suites) == {} and dict(t.tasks) == {}
    assert t.for_task("s", "t") == TaskThreshold(0.0, 0.1, "default")


def test_check_names(good: Thresholds) -> None:
    good.check_names(["docparse", "coding"], ["finance_tableqa", "docparse_fields", "humaneval"])
    with pytest.raises(ConfigError) as info:
        good.check_names(
            ["docparse", "coding"], ["finance_tableqa_v2", "docparse_fields", "humaneval"]
        )
    assert info.value.field == "tasks.finance_tableqa"
    assert "did you mean 'finance_tableqa_v2'?" in str(info.value)


def test_thresholds_are_frozen(good: Thresholds) -> None:
    with pytest.raises(AttributeError):
        good.alpha = 0.2  # type: ignore[misc]
    with pytest.raises(TypeError):
        good.suites["new"] = None  # type: ignore[index]


# ------------------------------------------------------------------- bad values (by field)

BASE = "alpha: 0.05\ndefault: {margin: 2.0}\n"

BAD_FIELDS = [
    # (yaml text, field, fragment of the message)
    ("alpha: 0.05\ndefault: {margin: -1}\n", "default.margin",
     "margin must be a finite number >= 0 (points), got -1"),
    ("alpha: 0.05\ndefault: {margin: .nan}\n", "default.margin", "got nan"),
    ("alpha: 0.05\ndefault: {margin: .inf}\n", "default.margin", "got inf"),
    ("alpha: 0.05\ndefault: {margin: 150}\n", "default.margin", "must be <= 100 points, got 150"),
    ("alpha: 0.05\ndefault: {margin: true}\n", "default.margin", "got true (a boolean)"),
    (BASE + "suites:\n  docparse: {margin: '3.0'}\n", "suites.docparse.margin",
     "got '3.0' (a string)"),
    (BASE + "suites:\n  coding: {margin: -1}\n", "suites.coding.margin", "got -1"),
    (BASE + "suites:\n  coding: {margin: 5.0, alpha: 0.7}\n", "suites.coding.alpha",
     "0 < alpha < 0.5, got 0.7"),
    (BASE + "tasks:\n  finance_tableqa: {margin: null}\n", "tasks.finance_tableqa.margin",
     "got null"),
    ("alpha: 0.5\ndefault: {margin: 2.0}\n", "alpha", "got 0.5"),
    ("alpha: 0\ndefault: {margin: 2.0}\n", "alpha", "got 0"),
    ("alpha: yes\ndefault: {margin: 2.0}\n", "alpha", "got true (a boolean)"),
    ("alpha: .nan\ndefault: {margin: 2.0}\n", "alpha", "got nan"),
    ("alpah: 0.05\ndefault: {margin: 2.0}\n", "alpah",
     "unknown key 'alpah'; did you mean 'alpha'?"),
    (BASE + "suites:\n  coding: {margn: 5.0}\n", "suites.coding.margn", "did you mean 'margin'?"),
    ("alpha: 0.05\ndefault: {margins: 2.0}\n", "default.margins", "did you mean 'margin'?"),
    (BASE + "task:\n  x: {margin: 1}\n", "task", "did you mean 'tasks'?"),
    (BASE + "bootstrap_resamples: 500\n", "bootstrap_resamples", "1000 <= bootstrap_resamples <= 1_000_000, got 500"),
    (BASE + "bootstrap_resamples: 10000000000000\n", "bootstrap_resamples", "<= 1_000_000, got 10000000000000"),
    (BASE + "bootstrap_resamples: 1e4\n", "bootstrap_resamples", "got '1e4' (a string)"),
    (BASE + "bootstrap_resamples: 10000.0\n", "bootstrap_resamples", "got 10000.0"),
    (BASE + "seed: -1\n", "seed", "integer >= 0, got -1"),
    (BASE + "seed: false\n", "seed", "got false (a boolean)"),
    ("default: {margin: 2.0}\n", "alpha", "alpha is required"),
    ("alpha: 0.05\n", "default", "default is required"),
    ("alpha: 0.05\ndefault: {}\n", "default.margin", "default.margin is required"),
    ("alpha: 0.05\ndefault: 2.0\n", "default", "must be a mapping, got 2.0"),
    (BASE + "suites: [docparse, coding]\n", "suites", "must be a mapping, got a list"),
    (BASE + "suites:\n  docparse: 3.0\n", "suites.docparse", "must be a mapping, got 3.0"),
    (BASE + "tasks:\n  humaneval: {}\n", "tasks.humaneval", "empty entry"),
    (BASE + "tasks:\n  1: {margin: 1}\n", "tasks", "keys must be non-empty strings, got 1"),
]


@pytest.mark.parametrize(
    ("text", "field", "fragment"), BAD_FIELDS, ids=[f"{i}-{c[1]}" for i, c in enumerate(BAD_FIELDS)]
)
def test_bad_value_names_the_field(tmp_path: Path, text: str, field: str, fragment: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_thresholds(path)
    err = info.value
    assert err.field == field
    assert err.path == path
    assert str(err).startswith(f"{path}: {field}: ")
    assert fragment in str(err)
    assert "\n" not in str(err)
    assert err.exit_code == ExitCode.USAGE


# ------------------------------------------------------------- bad files (no single field)


def _fails(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_thresholds(path)
    assert info.value.path == path
    assert "\n" not in str(info.value)
    return info.value


def test_yaml_syntax_error_reports_line(tmp_path: Path) -> None:
    err = _fails(_write(tmp_path, "alpha: 0.05\ndefault:\n  margin: [2.0\nsuites: {}\n"))
    assert err.field is None
    assert "invalid YAML at line 4" in str(err)


def test_yaml_bad_indentation_reports_line(tmp_path: Path) -> None:
    err = _fails(_write(tmp_path, "alpha: 0.05\ndefault:\n  margin: 2.0\n margin: 3.0\n"))
    assert "invalid YAML at line 4, column 2" in str(err)


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    err = _fails(_write(tmp_path, "alpha: 0.05\ndefault:\n  margin: 2.0\n  margin: 9.0\n"))
    assert "invalid YAML at line 4, column 3: duplicate key 'margin'" in str(err)


@pytest.mark.parametrize(
    ("text", "kind"),
    [("- 1\n- 2\n", "a list"), ("just text\n", "'just text' (a string)"), ("3\n", "3")],
)
def test_top_level_must_be_mapping(tmp_path: Path, text: str, kind: str) -> None:
    err = _fails(_write(tmp_path, text))
    assert err.field is None
    assert str(err).endswith(f"top level must be a mapping, got {kind}")


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    err = _fails(_write(tmp_path, text))
    assert "file is empty" in str(err)


def test_missing_file(tmp_path: Path) -> None:
    err = _fails(tmp_path / "nope.yaml")
    assert str(err) == f"{tmp_path / 'nope.yaml'}: file not found"


def test_directory_instead_of_file(tmp_path: Path) -> None:
    err = _fails(tmp_path)
    assert str(err) == f"{tmp_path}: is a directory, not a thresholds file"


def test_non_utf8_bytes(tmp_path: Path) -> None:
    err = _fails(_write(tmp_path, b"alpha: 0.05\ndefault: {margin: 2.0}\n# caf\xe9\n"))
    assert "not valid UTF-8: byte 0xe9 at line 3" in str(err)


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    t = load_thresholds(_write(tmp_path, "\ufeff" + BASE))
    assert (t.alpha, t.default_margin) == (0.05, 2.0)


def test_python_tags_are_refused(tmp_path: Path) -> None:
    text = "alpha: !!python/object/apply:os.getcwd []\ndefault: {margin: 2}\n"
    err = _fails(_write(tmp_path, text))
    assert "invalid YAML at line 1" in str(err)


# ------------------------------------------------- power, on_inconclusive, lossless, configs (schema v2)

FULL = """\
alpha: 0.05
power: 0.9
on_inconclusive: warn
lossless: {min_identical_share: 0.99, near_tie_logprob: 0.002, max_kl_mean: 0.0}
default: {margin: 2.0}
suites:
  coding: {margin: 5.0}
tasks:
  finance_tableqa: {margin: 2.5}
configs:
  fp16-state:
    margin: 3.0
    alpha: 0.025
    min_identical_share: 0.5
    suites: {docparse: {margin: 4.0}}
    tasks: {finance_tableqa: {margin: 6.0}}
  ngram: {min_identical_share: 1.0}
"""


def test_schema_v2_values_and_defaults(tmp_path: Path) -> None:
    t = load_thresholds(_write(tmp_path, FULL))
    assert (t.power, t.on_inconclusive, t.min_identical_share) == (0.9, "warn", 0.99)
    assert (t.near_tie_logprob, t.max_kl_mean) == (0.002, 0.0)
    d = load_thresholds(_write(tmp_path, BASE, "plain.yaml"))
    assert (d.power, d.on_inconclusive, d.min_identical_share, dict(d.configs)) == (0.8, "block", 0.95, {})
    assert (d.near_tie_logprob, d.max_kl_mean) == (0.01, 0.001)


def test_config_precedence_chain(tmp_path: Path) -> None:
    t = load_thresholds(_write(tmp_path, FULL))
    # default < configs.<c> < suites.<s> < tasks.<t> < configs.<c>.suites.<s> < configs.<c>.tasks.<t>
    assert t.for_task("math", "gsm8k", "fp16-state") == TaskThreshold(3.0, 0.025, "configs.fp16-state")
    assert t.for_task("coding", "humaneval", "fp16-state") == TaskThreshold(5.0, 0.025, "suites.coding")
    assert t.for_task("docparse", "docparse_fields", "fp16-state") == TaskThreshold(
        4.0, 0.025, "configs.fp16-state.suites.docparse")
    assert t.for_task("finance", "finance_tableqa", "fp16-state") == TaskThreshold(
        6.0, 0.025, "configs.fp16-state.tasks.finance_tableqa")
    assert t.for_task("finance", "finance_tableqa", "bf16") == TaskThreshold(2.5, 0.05, "tasks.finance_tableqa")
    assert t.for_task("finance", "finance_tableqa") == TaskThreshold(2.5, 0.05, "tasks.finance_tableqa")
    assert (t.identical_share_for("fp16-state"), t.identical_share_for("ngram"), t.identical_share_for(None),
            t.identical_share_for("other")) == (0.5, 1.0, 0.99, 0.99)


def test_check_names_covers_configs_and_nested_entries(tmp_path: Path) -> None:
    t = load_thresholds(_write(tmp_path, FULL))
    suites, tasks = ["docparse", "coding", "finance"], ["finance_tableqa", "docparse_fields"]
    t.check_names(suites, tasks, ["fp16-state", "ngram", "baseline"])
    t.check_names(suites, tasks)  # configs not checked when no list is given
    with pytest.raises(ConfigError) as info:
        t.check_names(suites, tasks, ["fp16_state", "ngram"])
    assert info.value.field == "configs.fp16-state" and "did you mean 'fp16_state'?" in str(info.value)
    with pytest.raises(ConfigError) as info:
        t.check_names(["coding", "finance"], tasks, ["fp16-state", "ngram"])
    assert info.value.field == "configs.fp16-state.suites.docparse"


BAD_V2 = [
    (BASE + "power: 0.3\n", "power", "0.5 <= power < 1, got 0.3"),
    (BASE + "power: 1\n", "power", "got 1"),
    (BASE + "power: '0.8'\n", "power", "got '0.8' (a string)"),
    (BASE + "on_inconclusive: pass\n", "on_inconclusive", "must be one of warn, block, got 'pass' (a string)"),
    (BASE + "on_inconclusive: true\n", "on_inconclusive", "got true (a boolean)"),
    (BASE + "lossless: {min_identical_share: 1.5}\n", "lossless.min_identical_share", "0 <= share <= 1, got 1.5"),
    (BASE + "lossless: {min_identical: 0.9}\n", "lossless.min_identical", "did you mean 'min_identical_share'?"),
    (BASE + "lossless: {near_tie_logprob: .nan}\n", "lossless.near_tie_logprob", "got nan"),
    (BASE + "lossless: {max_kl_mean: .inf}\n", "lossless.max_kl_mean", "got inf"),
    (BASE + "lossless: {max_kl_mean: true}\n", "lossless.max_kl_mean", "got true"),
    (BASE + "lossless: 0.9\n", "lossless", "must be a mapping, got 0.9"),
    (BASE + "configs:\n  fp16-state: {margn: 3}\n", "configs.fp16-state.margn", "did you mean 'margin'?"),
    (BASE + "configs:\n  fp16-state: {}\n", "configs.fp16-state", "empty entry"),
    (BASE + "configs:\n  fp16-state: {margin: -3}\n", "configs.fp16-state.margin", "got -3"),
    (BASE + "configs:\n  x: {min_identical_share: -0.1}\n", "configs.x.min_identical_share", "got -0.1"),
    (BASE + "configs:\n  x: {suites: {coding: {margin: true}}}\n", "configs.x.suites.coding.margin",
     "got true (a boolean)"),
    (BASE + "configs:\n  x: {tasks: {t: {min_identical_share: 0.5}}}\n", "configs.x.tasks.t.min_identical_share",
     "unknown key"),
    (BASE + "suites:\n  coding: {min_identical_share: 0.5}\n", "suites.coding.min_identical_share", "unknown key"),
]


@pytest.mark.parametrize(("text", "field", "fragment"), BAD_V2, ids=[c[1] for c in BAD_V2])
def test_bad_v2_value_names_the_field(tmp_path: Path, text: str, field: str, fragment: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_thresholds(path)
    assert info.value.field == field and info.value.path == path
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_repository_thresholds_file_is_valid() -> None:
    from evalgate.cli import THRESHOLDS_FILE
    from evalgate.inputs.config import list_configs
    from evalgate.suites.discovery import list_suites

    t = load_thresholds(THRESHOLDS_FILE)
    suites = list_suites()
    t.check_names([s.name for s in suites], [x for s in suites for x in s.tasks], list_configs())
    assert t.on_inconclusive == "warn" and t.power == 0.8
    assert t.for_task("docparse", "docparse_fields", "fp16-state").margin > t.for_task("docparse", "docparse_fields").margin


def test_spec_decode_floors_and_precedence(tmp_path: Path) -> None:
    text = BASE + ("spec_decode: {min_acceptance_rate: 0.5, min_mean_acceptance_length: 1.5}\n"
                   "configs:\n  mtp3: {min_mean_acceptance_length: 2.0}\n  other: {margin: 1.0}\n")
    t = load_thresholds(_write(tmp_path, text))
    f = t.spec_floors_for("mtp3")
    assert (f.min_acceptance_rate, f.min_mean_acceptance_length) == (0.5, 2.0)  # the config's own floor wins
    assert t.spec_floors_for("other") == t.spec_floors_for(None) == t.spec_decode
    assert (t.spec_decode.min_acceptance_rate, t.spec_decode.min_mean_acceptance_length) == (0.5, 1.5)
    plain = load_thresholds(_write(tmp_path, BASE, "plain.yaml"))
    assert not plain.spec_floors_for("mtp3").any


@pytest.mark.parametrize("text,field,message", [
    (BASE + "spec_decode: {min_acceptance_rate: 1.2}\n", "spec_decode.min_acceptance_rate", "got 1.2"),
    (BASE + "spec_decode: {min_mean_acceptance_length: 0.9}\n", "spec_decode.min_mean_acceptance_length",
     ">= 1 (tokens per target step), got 0.9"),
    (BASE + "spec_decode: {min_acceptance: 0.5}\n", "spec_decode.min_acceptance", "did you mean 'min_acceptance_rate'"),
    (BASE + "configs:\n  x: {min_mean_acceptance_length: .inf}\n", "configs.x.min_mean_acceptance_length", "got inf"),
    (BASE + "suites:\n  s: {min_acceptance_rate: 0.5}\n", "suites.s.min_acceptance_rate", "unknown key"),
])
def test_spec_decode_floor_errors(tmp_path: Path, text: str, field: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_thresholds(_write(tmp_path, text))
    assert err.value.field == field and message in str(err.value)


POLICY = """\
alpha: 0.05
power: 0.9
default: {margin: 2.0}
lossless: {min_identical_share: 0.97}
spec_decode: {min_acceptance_rate: 0.3, min_mean_acceptance_length: 1.5}
speed: {min_speedup: 1.05, max_ttft_p99_ms: 800}
traffic: {input_len: 128, repeats: 4}
economics: {gpu_hour_usd: 2.5, api_usd_per_mtok: 1.5}
replay: {from: requests.jsonl, json_margin: 3.0}
tasks: {gsm8k: {margin: 1.0}}
configs:
  cand:
    margin: 4.0
    min_identical_share: 0.5
    min_mean_acceptance_length: 2.0
    max_slowdown: 0.1
    max_ttft_p99_ms: 300
    traffic: {repeats: 6, mode: serve}
    economics: {gpus: 2}
    tasks: {gsm8k: {alpha: 0.01}}
"""


def test_policy_resolves_every_per_config_key_once(tmp_path: Path) -> None:
    """``Thresholds.policy(config)``: each key the config sets wins over the top level, key by key; the others are
    the top level's; ``None`` (or a config without an entry) gets the top level alone."""
    t = load_thresholds(_write(tmp_path, POLICY))
    p = t.policy("cand")
    assert (p.config, p.path, p.alpha, p.power) == ("cand", tmp_path / "thresholds.yaml", 0.05, 0.9)
    assert p.task("math", "gsm8k") == TaskThreshold(1.0, 0.01, "tasks.gsm8k")  # tasks.<t> margin, config's alpha
    assert p.task("math", "other") == TaskThreshold(4.0, 0.05, "configs.cand")
    assert (p.identical_share, p.replay_share, p.json_margin) == (0.5, 0.5, 3.0)
    assert (p.spec_floors.min_acceptance_rate, p.spec_floors.min_mean_acceptance_length) == (0.3, 2.0)
    assert (p.speed_floors.min_speedup, p.speed_floors.max_slowdown) == (1.05, 0.1)
    assert p.speed_floors.slos() == {"ttft_p99_ms": 300.0}
    assert dict(p.traffic) == {"input_len": 128, "repeats": 6, "mode": "serve"}
    assert dict(p.economics) == {"gpu_hour_usd": 2.5, "api_usd_per_mtok": 1.5, "gpus": 2}
    # where each key was set, for an error message
    assert (p.traffic_field("repeats"), p.traffic_field("input_len")) == ("configs.cand.traffic.repeats",
                                                                          "traffic.input_len")
    assert (p.speed_field("max_ttft_p99_ms"), p.speed_field("min_speedup")) == ("configs.cand.max_ttft_p99_ms",
                                                                                "speed.min_speedup")
    for top in (t.policy(None), t.policy("other")):
        assert top.task("math", "other") == TaskThreshold(2.0, 0.05, "default")
        assert (top.identical_share, top.speed_floors.max_slowdown, top.speed_floors.slos()) == (0.97, None,
                                                                                                  {"ttft_p99_ms": 800.0})
        assert dict(top.traffic) == {"input_len": 128, "repeats": 4}
        assert dict(top.economics) == {"gpu_hour_usd": 2.5, "api_usd_per_mtok": 1.5}
        assert top.traffic_field("repeats") == "traffic.repeats"
    plain = load_thresholds(_write(tmp_path, "alpha: 0.05\ndefault: {margin: 2.0}\n", "plain.yaml")).policy("cand")
    assert (plain.traffic, plain.economics, plain.replay, plain.json_margin) == (None, None, None, 5.0)
