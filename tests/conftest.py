"""Shared pytest hooks: ``gpu``-marked tests run only where a CUDA GPU is visible (CI has none)."""

from __future__ import annotations

import pytest


def _cuda_available() -> bool:
    """True when torch sees a CUDA device (torch imported only here; False if it cannot be imported)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="needs CUDA (CI has none)")
        for item in gpu_items:
            item.add_marker(skip)
