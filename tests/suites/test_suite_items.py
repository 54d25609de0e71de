"""Every task's generated items and prompts, pinned: sha256 over each split's items and its doc_to_text prompts.

The task code is loaded the way lm-eval loads it (the ``!function module.fn`` a task YAML names, by path from the
YAML's folder) and called with the YAML's ``dataset_kwargs``. A change here changes what every baseline was measured
on; refactoring task code must leave these digests alone (they were taken before the task modules shared
``evalgate.suites.taskcode``). A page image is pinned as its place in the item only (``<image>``): its pixels depend
on the Pillow and FreeType release too, and tests/suites/test_docpages.py checks what each page holds."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from PIL import Image

from evalgate.suites.discovery import SUITES_DIR
from evalgate.suites.taskcode import load_module

DIGESTS = {
    "coding/coding_humaneval.yaml": (164, "3a5e8c72690bc460d51425f85cbc94de3be150c9f5fbecd971122d705727c891"),
    "coding/coding_mbpp.yaml": (263, "4ff2929d89fafe1db407a0363678240b96a3415bba04fa99e146b25647107d0a"),
    "coding/coding_small.yaml": (240, "2a068bd7a6727edfef1c5ea15bc9ccb16366c520428807497173b73e211a6015"),
    "docparse/docparse_fields.yaml": (200, "4907ff15a7fe0313cfe737fcd287f506396a7f5c901ee9352f5ab9de30361adb"),
    "docparse/docparse_hard.yaml": (400, "484de44756bb9f63c26a215aa52df8c2ed67025e9820dffdc87db701dd87f32a"),
    "docpages/docpages_fields.yaml": (200, "b300a6d7ce3870cb76a7b8e06c134152e283837b5441031578756cb4cdafe2df"),
    "finance/finance_finqa.yaml": (158, "ffd50090d8f673295b39bcf84ef53ae2124d0a59ebf3536f5a007ae62e6fed14"),
    "finance/finance_hard.yaml": (400, "6605e7fc2c945482ff44de8dbad06c3cd19d065863a040d3576058727aa9ff9d"),
    "finance/finance_tableqa.yaml": (200, "dff9f6e1be9d169d76b2c3b320ed273a76ea4b95b16dd06f7aa20cf4e24fd0fd"),
    "finance/finance_tatqa.yaml": (303, "7d71d80b2571da47c16cc36996e76e1c307a71d6f939f4cb7159b4d6f2843d55"),
    "longgen/longgen_shipments.yaml": (100, "76a0b784ae1831d95eb1e89eeb6a322694c03db13e5f610da237496656804ee0"),
}


class _Loader(yaml.SafeLoader):
    """A task YAML with ``!function module.fn`` kept as ``("!function", "module.fn")``."""


_Loader.add_constructor("!function", lambda loader, node: ("!function", loader.construct_scalar(node)))


def _function(folder: Path, ref: tuple[str, str], modules: dict[Path, object]):
    module, name = ref[1].rsplit(".", 1)
    path = folder / f"{module}.py"
    if path not in modules:
        modules[path] = load_module(path)
    return getattr(modules[path], name)


def test_every_generated_task_is_pinned() -> None:
    generated = sorted(p.relative_to(SUITES_DIR).as_posix() for p in SUITES_DIR.glob("*/*.yaml")
                       if "custom_dataset" in p.read_text())
    assert generated == sorted(DIGESTS)


@pytest.mark.parametrize("task_yaml", sorted(DIGESTS))
def test_generated_items_and_prompts_are_unchanged(task_yaml: str) -> None:
    path = SUITES_DIR / task_yaml
    cfg = yaml.load(path.read_text(), Loader=_Loader)
    modules: dict[Path, object] = {}
    splits = _function(path.parent, cfg["custom_dataset"], modules)(**(cfg.get("dataset_kwargs") or {}))
    to_text = cfg.get("doc_to_text")
    h, count = hashlib.sha256(), 0
    for split in sorted(splits):
        rows = [{k: "<image>" if isinstance(v, Image.Image) else v for k, v in r.items()} for r in splits[split]]
        count += len(rows)
        h.update(json.dumps([split, rows], sort_keys=True).encode())
        if isinstance(to_text, tuple):  # a template string is lm-eval's, not the task code's
            fn = _function(path.parent, to_text, modules)
            h.update(json.dumps([fn(r) for r in rows]).encode())
    assert (count, h.hexdigest()) == DIGESTS[task_yaml]
