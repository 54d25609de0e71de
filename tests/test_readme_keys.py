"""The README's key tables for config files and ``thresholds.yaml`` agree with the models (the one source of keys,
defaults and meanings), and the models' defaults are what a minimal file gets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalgate.config import ConfigLayer, Sampling, config_key_rows, load_config
from evalgate.errors import ConfigError
from evalgate.schema import key_rows, markdown_table
from evalgate.thresholds import LevelOverride, ThresholdsFile, load_thresholds

README = Path(__file__).resolve().parent.parent / "README.md"


def _readme_table(marker: str) -> list[tuple[str, str, str]]:
    """The rows ``(key, default, meaning)`` of the table after ``<!-- keys: <marker> ...-->`` in the README."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"<!-- keys: {marker}")
    lines = text[start:].splitlines()[1:]
    assert lines[0].startswith("| key | default | meaning |"), lines[0]
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 3, line
        key, default, meaning = cells
        rows.append((key.strip("`"), default.strip("`"), meaning.replace("&#124;", "|")))
    return rows


@pytest.mark.parametrize(("marker", "rows"), [("thresholds", key_rows(ThresholdsFile)), ("config", config_key_rows())],
                         ids=["thresholds", "config"])
def test_readme_table_is_the_models_keys_defaults_and_meanings(marker: str, rows: list[tuple[str, str, str]]) -> None:
    documented = _readme_table(marker)
    want = {k: (d, m) for k, d, m in rows}
    got = {k: (d, m) for k, d, m in documented}
    assert sorted(set(got) - set(want)) == [], "the README documents keys the model does not have"
    assert sorted(set(want) - set(got)) == [], "keys of the model missing from the README"
    wrong = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    assert not wrong, (f"README rows differ from the model (README, model): {wrong}\n"
                       f"(evalgate.schema.readme_tables() prints the tables)\n{markdown_table(rows)}")
    assert [k for k, _, _ in documented] == [k for k, _, _ in rows], "rows out of the model's order"
    assert markdown_table(rows) in README.read_text(encoding="utf-8")  # as readme_tables() prints it


def test_every_key_of_every_model_has_a_meaning() -> None:
    for model in (ThresholdsFile, LevelOverride, ConfigLayer, Sampling):
        for name, info in model.model_fields.items():
            assert info.description and len(info.description) > 10, f"{model.__name__}.{name} has no docstring"


def test_key_rows_expands_nested_sections_and_entry_mappings() -> None:
    keys = [k for k, _, _ in key_rows(ThresholdsFile)]
    assert {"default.margin", "lossless.max_kl_mean", "traffic.concurrency", "suites.<suite>.margin",
            "configs.<config>.min_speedup", "configs.<config>.suites.<suite>"} <= set(keys)
    assert "configs.<config>.suites.<suite>.margin" not in keys  # one row pointing at suites.<suite>
    defaults = {k: d for k, d, _ in key_rows(ThresholdsFile)}
    assert (defaults["alpha"], defaults["default.margin"], defaults["power"], defaults["lossless.near_tie_logprob"],
            defaults["spec_decode.min_acceptance_rate"]) == ("required", "required", "0.8", "0.01", "-")


def test_a_minimal_file_gets_the_documented_defaults(tmp_path: Path) -> None:
    """The defaults the tables show are the ones loading applies (read back from the README, not from the model)."""
    documented = {k: d for k, d, _ in _readme_table("thresholds")}
    path = tmp_path / "t.yaml"
    path.write_text("alpha: 0.05\ndefault: {margin: 2.0}\n", encoding="utf-8")
    t = load_thresholds(path)
    assert t.power == float(documented["power"]) == 0.8
    assert t.on_inconclusive == documented["on_inconclusive"] == "block"
    assert t.bootstrap_resamples == int(documented["bootstrap_resamples"]) == 10_000
    assert t.seed == int(documented["seed"]) == 0
    assert t.min_identical_share == float(documented["lossless.min_identical_share"]) == 0.95
    assert t.near_tie_logprob == float(documented["lossless.near_tie_logprob"]) == 0.01
    assert t.max_kl_mean == float(documented["lossless.max_kl_mean"]) == 0.001
    assert not t.spec_decode.any and t.traffic is None and t.speed.min_speedup is None
    cfg_doc = {k: d for k, d, _ in _readme_table("config")}
    (tmp_path / "c.yaml").write_text("model: m\n", encoding="utf-8")
    c = load_config("c", tmp_path, check_engine_args=False)
    assert (c.sampling.temperature, c.sampling.top_p, c.sampling.max_tokens, c.sampling.seed) == (
        float(cfg_doc["sampling.temperature"]), float(cfg_doc["sampling.top_p"]), int(cfg_doc["sampling.max_tokens"]),
        int(cfg_doc["sampling.seed"])) == (0.0, 1.0, 256, 0)
    assert c.expect == cfg_doc["expect"] == "lossy" and c.description == "" and c.baseline is None


@pytest.mark.parametrize(("text", "field", "fragment"), [
    ("version: 2\nalpha: 0.05\ndefault: {margin: 2.0}\n", "version", "must be 1 (the only thresholds schema version)"),
    ("version: 1\nalpha: 0.05\ndefault: {margin: 2.0}\n", None, None),
])
def test_thresholds_schema_version(tmp_path: Path, text: str, field: str | None, fragment: str | None) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(text, encoding="utf-8")
    if fragment is None:
        assert load_thresholds(path).alpha == 0.05
        return
    with pytest.raises(ConfigError) as err:
        load_thresholds(path)
    assert err.value.field == field and fragment in str(err.value) and err.value.exit_code == 2
    assert re.fullmatch(rf"{re.escape(str(path))}: version: .*got 2", str(err.value))


def test_config_schema_version(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text("version: 1\nmodel: m\n", encoding="utf-8")
    assert load_config("ok", tmp_path, check_engine_args=False).model == "m"
    (tmp_path / "new.yaml").write_text("version: 3\nmodel: m\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config("new", tmp_path, check_engine_args=False)
    assert err.value.field == "version" and "must be 1 (the only config schema version), got 3" in str(err.value)
