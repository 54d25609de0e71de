"""Speed-only runs (``--speed-only``) and random-weight configs (``engine_args.load_format: dummy``): what may be asked
of them, checked before any engine starts.

A config with ``load_format: dummy`` (every config-only model of ``evalgate.models.shapes``) runs random weights:
its outputs are noise, so quality suites on it would produce a verdict about nothing. Such a config is only ever
gated with ``--speed-only``: no suite runs, the speed phase does, and the verdict is INCONCLUSIVE ("quality was not
measured") or BLOCK from the speed thresholds, never PASS (``evalgate.gate.judgement.judge_run``). Speculative
decoding on random weights would reject every draft; it is measured only with vLLM's synthetic acceptance
(``speculative_config.rejection_sample_method: synthetic`` with ``synthetic_acceptance_length`` or
``synthetic_acceptance_rates``), where the installed vLLM has it (``engine.argnames.missing_synthetic_acceptance``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalgate.engine import argnames  # read at call time: tests stand in for the installed vLLM
from evalgate.errors import ConfigError

DUMMY = "dummy"


def random_weights(cfg: Any) -> bool:
    """Whether config ``cfg`` (an ``EngineConfig``) loads random weights: ``engine_args.load_format`` is ``dummy``."""
    return str((cfg.engine_args or {}).get("load_format", "")).lower() == DUMMY


def check_speed_only(configs: Sequence[Any], *, speed_only: bool, suite_names: list[str] | None,
                     command: str = "run") -> None:
    """Refuse, before any engine starts, what a speed-only run or a random-weight config cannot do (exit 2).

    Args:
        configs: the ``EngineConfig``s the command starts (baseline and candidate, or a recipe's variants).
        speed_only: ``--speed-only`` was given. suite_names: ``--suites`` (None: not given).
        command: the subcommand, for the message (``run``, ``ablate``, ``score``).
    Raises:
        ConfigError: ``--suites`` with ``--speed-only`` (field ``--suites``); a ``load_format: dummy`` config without
            ``--speed-only`` (the config's file, field ``engine_args.load_format``); speculative decoding on a
            ``load_format: dummy`` config without synthetic acceptance, or on a vLLM that has none (field
            ``engine_args.speculative_config``).
    """
    if speed_only and suite_names is not None:
        raise ConfigError("--speed-only runs no quality suites; leave out --suites (or drop --speed-only)",
                          field="--suites")
    for cfg in configs:
        if not random_weights(cfg):
            continue
        if not speed_only:
            how = "--speed-only" if command != "score" else "evalgate run --speed-only"
            raise ConfigError(f"is {DUMMY} (random weights): quality suites on random weights would be meaningless, "
                              f"so '{cfg.name}' is only gated for speed: use {how}", path=cfg.path,
                              field="engine_args.load_format")
        _check_spec_decode(cfg)


def _check_spec_decode(cfg: Any) -> None:
    """A ``load_format: dummy`` config's speculative decoding: only with vLLM's synthetic acceptance."""
    spec = (cfg.engine_args or {}).get("speculative_config")
    if not spec:
        return

    gone = argnames.missing_synthetic_acceptance()
    if gone:
        raise ConfigError(f"speculative decoding on random weights ({DUMMY}) rejects every draft, so its speed says "
                          f"nothing; measuring it needs vLLM's synthetic acceptance, which the installed "
                          f"{argnames.installed_vllm_version()} lacks ({', '.join(gone)})", path=cfg.path,
                          field="engine_args.speculative_config")
    if not isinstance(spec, dict) or spec.get("rejection_sample_method") != "synthetic" or not (
            spec.get("synthetic_acceptance_length") is not None or spec.get("synthetic_acceptance_rates") is not None):
        raise ConfigError(f"speculative decoding on random weights ({DUMMY}) rejects every draft: set "
                          "rejection_sample_method: synthetic and synthetic_acceptance_length (the mean acceptance "
                          "length measured on the real model) in it", path=cfg.path,
                          field="engine_args.speculative_config")
