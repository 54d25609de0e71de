"""``manifest.json`` of a run: the typed model (:class:`~evalgate.results.manifest.Manifest`, re-exported from
``evalgate.results.manifest``, where the stages that read it can import it) and :func:`side`, one side's entry built
from a ``runner.ConfigRun``."""

from __future__ import annotations

from typing import Any

from evalgate.inputs.chat import protocol
from evalgate.results.manifest import Manifest, Side, SuiteEntry

__all__ = ["Manifest", "Side", "SuiteEntry", "side"]


def side(run: Any) -> Side:
    """The manifest side of a ``runner.ConfigRun`` (its ``protocol``: the run's, else the config's own
    ``chat.protocol``)."""
    cfg = run.config
    return Side(name=cfg.name, path=str(cfg.path), expect=cfg.expect, requested=cfg.identity(), effective=run.effective,
                spec_decode=run.spec_decode, evidence_sources=run.evidence_sources, cached_suites=run.cached,
                generations=run.generations, device=run.device or None,
                protocol=getattr(run, "protocol", None) or protocol(cfg.chat))
