"""Tests of evalgate.inputs.options: ``--concurrency`` is checked by ``traffic.concurrency``'s validator."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalgate.errors import ConfigError, ExitCode
from evalgate.inputs.options import RunOptions
from evalgate.inputs.thresholds import load_thresholds


@pytest.mark.parametrize(("levels", "fragment"), [
    ([0], "must be distinct integers >= 1, got 0"),
    ([4, 4], "must be distinct integers >= 1: repeats a level: [4, 4]"),
    (list(range(1, 18)), "a list of 1 to 16 distinct ones"),
])
def test_command_line_and_thresholds_file_refuse_the_same_levels_alike(levels: list[int], fragment: str,
                                                                       tmp_path: Path) -> None:
    """One validator: ``--concurrency`` and ``traffic.concurrency`` refuse the same sweeps with the same words (the
    file may also say ``from-log``, which the command line cannot)."""
    with pytest.raises(ConfigError) as cli:
        RunOptions(concurrency=levels).check()
    assert cli.value.exit_code == ExitCode.USAGE and cli.value.field == "--concurrency"
    assert fragment in str(cli.value) and "from-log" not in str(cli.value)
    path = tmp_path / "thresholds.yaml"
    path.write_text(f"alpha: 0.05\ndefault: {{margin: 2.0}}\ntraffic: {{concurrency: {levels}}}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as yaml:
        load_thresholds(path)
    assert yaml.value.field == "traffic.concurrency" and fragment.split(", got")[0] in str(yaml.value)


def test_sixteen_distinct_levels_pass_both(tmp_path: Path) -> None:
    levels = list(range(1, 17))
    RunOptions(concurrency=levels).check()  # raises on a refused sweep
    path = tmp_path / "thresholds.yaml"
    path.write_text(f"alpha: 0.05\ndefault: {{margin: 2.0}}\ntraffic: {{concurrency: {levels}}}\n", encoding="utf-8")
    assert load_thresholds(path).policy(None).traffic["concurrency"] == tuple(levels)
