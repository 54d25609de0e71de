"""Which engine-config keys differ between baseline and candidate (the NO-OP rule's input; pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MISSING", "effective_diff"]


class _Missing:
    """Marks a key present on only one side of ``effective_diff``."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<absent>"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()


def _walk(a: Any, b: Any, prefix: str, out: dict[str, tuple[Any, Any]]) -> None:
    """Record in ``out`` every dotted key under which ``a`` and ``b`` differ; descend only where both are mappings,
    so a switch going from ``None`` to a mapping is one row (``None`` -> the mapping), not one per sub-key."""
    if isinstance(a, Mapping) and isinstance(b, Mapping) and (a or not prefix) and (b or not prefix):
        for key in sorted(set(a) | set(b), key=str):
            _walk(a.get(key, MISSING), b.get(key, MISSING), f"{prefix}{key}" if not prefix else f"{prefix}.{key}", out)
    elif a is MISSING or b is MISSING or a != b:
        out[prefix] = (a, b)


def effective_diff(
    baseline_effective: Mapping, candidate_effective: Mapping
) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ: ``{dotted_key: (baseline_value, candidate_value)}``.

    Nested mappings present on both sides are descended into (dotted keys such as
    ``"compilation_config.level"``); a key present on one side only has ``MISSING`` (repr ``<absent>``) on the
    other; a mapping on one side against a non-mapping (e.g. ``None``) on the other is one entry holding both.
    Keys are sorted. Empty when the configurations are equal.
    """
    diff: dict[str, tuple[Any, Any]] = {}
    _walk(baseline_effective, candidate_effective, "", diff)
    return dict(sorted(diff.items()))
