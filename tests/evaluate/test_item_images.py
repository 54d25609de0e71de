"""Every item's images of an image suite, checked before any engine starts (``preflight.check_item_images``, then
``modality.check_image_counts``): an item whose ``doc_to_image`` gives something other than PIL images, gives none,
or gives more than the config's model takes in one prompt is exit 2, one line naming the task's YAML,
``doc_to_image``, the task and the item (and, for a count, the config file and the field that limits it). vLLM
would otherwise refuse the request after the engine had started (exit 3), or run the item without its image.

The check worker's answer (``worker.main.image_input``) is stood in for: a model that reads images, up to 2 a prompt
by ``engine_args.limit_mm_per_prompt``. The pre-flight is real (lm-eval builds the task in a subprocess)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import evalgate.evaluate.runner as runner
from evalgate import cli
from evalgate.errors import ExitCode
from evalgate.inputs.config import CONFIGS_DIR, installed_vllm_version

READS_2 = {"reads_images": True, "architecture": "Idefics3ForConditionalGeneration", "field": "model",
           "why": "Idefics3ForConditionalGeneration takes images in vLLM (up to 2 per prompt)", "limit": 2,
           "limit_field": "engine_args.limit_mm_per_prompt"}
TASK = """task: pages_task
dataset_path: ""
custom_dataset: !function utils.load_data
output_type: generate_until
test_split: test
doc_to_text: "<image>{{q}}"
doc_to_target: "{{a}}"
doc_to_image: !function utils.images
generation_kwargs: {until: ["\\n"], max_gen_toks: 8}
metric_list:
  - metric: exact_match
"""
UTILS = '''import datasets
from PIL import Image


def load_data(**_):
    """Three items (ids a0, a1, a2), each with its own 8x8 page."""
    rows = [{"id": f"a{n}", "n": n, "q": f"Q{n}", "a": str(n), "image": Image.new("RGB", (8, 8), (40 * n, 0, 0))}
            for n in range(3)]
    return {"test": datasets.Dataset.from_list(rows)}


def images(doc):
    return %s
'''


class _Reached(BaseException):
    """An engine would have started."""


def _suite(root: Path, expr: str) -> Path:
    d = root / "suites" / "pages"
    d.mkdir(parents=True)
    (d / "t.yaml").write_text(TASK)
    (d / "utils.py").write_text(UTILS % expr)
    return d / "t.yaml"


@pytest.fixture
def score(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    """``score(expr)``: ``evalgate score`` of the VL fixture's config on suite ``pages`` whose ``doc_to_image`` returns
    ``expr``; returns (exit code or "engine", stderr line, the task YAML, the config file). Engines are tripwires."""
    monkeypatch.setattr(runner, "check_engine_values", lambda cfg, log, t, replay=None, *, images=False: {
        "max_num_seqs": 256, "max_model_len": 2048, **({"image_input": READS_2} if images else {})})

    def trip(*a: Any, **k: Any) -> Any:
        raise _Reached("an engine started")

    for name in ("start_config", "evaluate_config"):
        monkeypatch.setattr(runner, name, trip)
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    cfg = tmp_path / "configs" / "vl.yaml"
    cfg.parent.mkdir()
    cfg.write_text(f"extends: {CONFIGS_DIR / 'vl' / 'baseline.yaml'}\nbaseline: null\nsuites: [pages]\n"
                   "engine_args: {limit_mm_per_prompt: {image: 2}}\n")

    def go(expr: str) -> tuple[Any, str, Path, Path]:
        yaml = _suite(tmp_path, expr)
        try:
            code: Any = cli.main(["score", "--config", str(cfg), "--suites-dir", str(tmp_path / "suites"),
                                  "--suites", "pages", "--out", str(tmp_path / "out")])
        except _Reached:
            code = "engine"
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) <= 1, err
        return code, err[0] if err else "", yaml, cfg

    return go


def test_items_with_pil_images_within_the_limit_reach_the_engine(score) -> None:
    code, line, _, _ = score("[doc['image']] * (1 + doc['n'] % 2)")  # 1, 2, 1 images
    assert (code, line) == ("engine", "")


@pytest.mark.parametrize(("expr", "what"), [
    ("doc['image'] if doc['n'] != 1 else 'page-1.png'",
     "item 1 (id a1): its image is 'page-1.png' (type str), not a PIL image"),
    ("[doc['image'], 7] if doc['n'] == 1 else [doc['image']]",
     "item 1 (id a1): image 1 of 2 is 7 (type int), not a PIL image"),
    ("[doc['image'], None] if doc['n'] == 1 else [doc['image']]",
     "item 1 (id a1): image 1 of 2 is None, not a PIL image"),
], ids=["string", "number", "none-in-a-list"])
def test_an_item_whose_image_is_not_an_image_is_refused_before_any_engine(score, expr: str, what: str) -> None:
    code, line, yaml, _ = score(expr)
    assert code == ExitCode.USAGE == 2, line
    assert line.startswith(f"evalgate: error: {yaml}: doc_to_image: task pages_task: {what} (evalgate sends "
                           "PIL.Image.Image objects to vLLM"), line


@pytest.mark.parametrize(("expr", "what"), [
    ("None if doc['n'] == 2 else doc['image']", "item 2 (id a2) has no image (doc_to_image gave None)"),
    ("[] if doc['n'] == 0 else [doc['image']]", "item 0 (id a0) has no image (doc_to_image gave an empty list)"),
], ids=["none", "empty-list"])
def test_an_item_without_an_image_is_refused_before_any_engine(score, expr: str, what: str) -> None:
    """Decided: an image task's item must carry an image (its prompt is about it); such an item is refused, never
    run as text (its item hash would also have named a memory address: ``suite_eval.image_item_hash``)."""
    code, line, yaml, _ = score(expr)
    assert code == 2, line
    assert line.startswith(f"evalgate: error: {yaml}: doc_to_image: task pages_task: {what}: every item of an "
                           "image task needs one"), line


def test_an_item_with_more_images_than_the_config_allows_is_refused_naming_both_files(score) -> None:
    code, line, yaml, cfg = score("[doc['image']] * (1 + doc['n'])")  # 1, 2, 3 images; the config allows 2
    assert code == 2, line
    assert line == (f"evalgate: error: {yaml}: doc_to_image: task pages_task: item 2 (id a2) has 3 images, but "
                    f"{cfg}: engine_args.limit_mm_per_prompt: limit_mm_per_prompt allows 2 per prompt "
                    f"(embedded:idefics3-tiny, {installed_vllm_version()}); set engine_args.limit_mm_per_prompt to "
                    "{image: 3} or more, or give each item fewer images")


@pytest.mark.parametrize(("expr", "what"), [
    ("Image.new('RGB', (0, 0)) if doc['n'] == 1 else doc['image']",
     "item 1 (id a1): its image is empty (0x0 pixels, mode RGB): an image needs at least one pixel"),
    ("doc['image'].convert('F') if doc['n'] == 2 else doc['image']",
     "item 2 (id a2): its image is a PIL image in mode 'F', which cannot be saved as PNG"),
    ("[doc['image'], doc['image'].convert('CMYK')]",
     "item 0 (id a0): image 1 of 2 is a PIL image in mode 'CMYK', which cannot be saved as PNG"),
], ids=["empty", "float-mode", "cmyk-in-a-list"])
def test_a_pil_image_the_worker_cannot_hash_is_refused_before_any_engine(score, expr: str, what: str) -> None:
    """Break test: the worker keys each image by lm-eval's PNG content hash (``lm_adapter.image_hash``); a 0x0 page or
    a mode PNG cannot hold (F, CMYK) passed the PIL type check and crashed the engine worker on its first request
    ("cannot write mode F as PNG", exit 3 after the engine had started). Modes PNG holds (L, P, 1, I;16) still run."""
    code, line, yaml, _ = score(expr)
    assert code == ExitCode.USAGE == 2, line
    assert line.startswith(f"evalgate: error: {yaml}: doc_to_image: task pages_task: {what}"), line


def test_pil_modes_png_holds_reach_the_engine(score) -> None:
    code, line, _, _ = score("doc['image'].convert(['L', 'P', 'I;16'][doc['n']])")
    assert (code, line) == ("engine", "")
