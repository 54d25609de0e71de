"""``--speed-only`` and random-weight configs (evalgate/inputs/speed_only.py, engine.argnames): what is refused
before any engine starts, with the file and the field; and the gate's speed-only decision (never PASS)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from evalgate.engine.argnames import missing_synthetic_acceptance
from evalgate.errors import ConfigError
from evalgate.inputs.options import RunOptions
from evalgate.inputs.speed_only import check_speed_only, random_weights


def _cfg(name: str = "scale/fp16-state", **engine_args: object) -> SimpleNamespace:
    return SimpleNamespace(name=name, path=Path(f"/configs/{name}.yaml"), engine_args=engine_args)


def test_random_weights_is_load_format_dummy() -> None:
    assert random_weights(_cfg(load_format="dummy")) and random_weights(_cfg(load_format="DUMMY"))
    assert not random_weights(_cfg(load_format="auto")) and not random_weights(_cfg())


def test_a_dummy_config_needs_speed_only() -> None:
    real, dummy = _cfg("fp16-state"), _cfg(load_format="dummy")
    check_speed_only([real], speed_only=False, suite_names=None)  # real weights: quality as usual
    check_speed_only([real, dummy], speed_only=True, suite_names=None)
    for command, hint in (("run", "use --speed-only"), ("score", "use evalgate run --speed-only")):
        with pytest.raises(ConfigError) as info:
            check_speed_only([real, dummy], speed_only=False, suite_names=["docparse"], command=command)
        assert (info.value.path, info.value.field) == (dummy.path, "engine_args.load_format")
        assert hint in str(info.value) and "random weights" in str(info.value)


def test_speed_only_runs_no_suites() -> None:
    with pytest.raises(ConfigError) as info:
        check_speed_only([_cfg("fp16-state")], speed_only=True, suite_names=["coding"])
    assert info.value.field == "--suites" and info.value.path is None


def test_speed_only_contradicts_no_speed() -> None:
    RunOptions(speed_only=True).check()
    with pytest.raises(ConfigError) as info:
        RunOptions(speed_only=True, no_speed=True).check()
    assert info.value.field == "--speed-only"


SPEC = '''
@dataclass
class SpeculativeConfig:
    num_speculative_tokens: int = None
{extra}
'''
SYNTHETIC = '''    rejection_sample_method: RejectionSampleMethod = "standard"
    synthetic_acceptance_rates: list[float] | None = None
    synthetic_acceptance_length: float | None = None
RejectionSampleMethod = Literal["standard", "synthetic", "block"]'''


def test_synthetic_acceptance_is_detected_in_vllms_source() -> None:
    def reader(text: str | None):
        return lambda rel: text if rel == "config/speculative.py" else None

    assert missing_synthetic_acceptance(reader(SPEC.format(extra=SYNTHETIC))) == []
    assert missing_synthetic_acceptance(reader(None)) == ["vllm.config.speculative.SpeculativeConfig"]
    assert missing_synthetic_acceptance(reader(SPEC.format(extra=""))) == [
        "SpeculativeConfig.rejection_sample_method", "SpeculativeConfig.synthetic_acceptance_length",
        "SpeculativeConfig.synthetic_acceptance_rates"]
    no_value = SPEC.format(extra=SYNTHETIC.replace('"synthetic", ', ""))
    assert missing_synthetic_acceptance(reader(no_value)) == ["SpeculativeConfig.rejection_sample_method 'synthetic'"]


def test_speculative_decoding_on_random_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    import evalgate.engine.argnames as argnames

    mtp = {"method": "mtp", "num_speculative_tokens": 1}
    monkeypatch.setattr(argnames, "missing_synthetic_acceptance", lambda read=None: ["SpeculativeConfig.x"])
    with pytest.raises(ConfigError) as info:
        check_speed_only([_cfg(load_format="dummy", speculative_config=mtp)], speed_only=True, suite_names=None)
    assert info.value.field == "engine_args.speculative_config" and "lacks (SpeculativeConfig.x)" in str(info.value)
    monkeypatch.setattr(argnames, "missing_synthetic_acceptance", lambda read=None: [])
    with pytest.raises(ConfigError) as info:  # a vLLM with it: the config must ask for it
        check_speed_only([_cfg(load_format="dummy", speculative_config=mtp)], speed_only=True, suite_names=None)
    assert "rejection_sample_method: synthetic" in str(info.value)
    synthetic = {**mtp, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 1.8}
    check_speed_only([_cfg(load_format="dummy", speculative_config=synthetic)], speed_only=True, suite_names=None)
    # Real weights: speculative decoding is measured as it is.
    check_speed_only([_cfg(speculative_config=mtp)], speed_only=True, suite_names=None)
