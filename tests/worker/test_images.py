"""Images through the worker without vLLM: lm-eval's multimodal task path (``doc_to_image``) into the adapter, each
request sent as vLLM's ``TextPrompt`` with ``multi_modal_data``, and the image's content hash in the journal key and
the item hash. The engine here is a stand-in that answers from the image it receives; the suite is the shipped
page-image tier (suites/docpages, its first 8 items), which the real engine runs in tests/system/test_vl_gate.py."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance  # noqa: E402
from PIL import Image  # noqa: E402

from evalgate.inputs.config import Sampling  # noqa: E402
from evalgate.results.store import GenerationJournal  # noqa: E402
from evalgate.suites.discovery import SUITES_DIR, load_suite  # noqa: E402
from evalgate.suites.taskcode import load_module  # noqa: E402
from evalgate.worker.lm_adapter import engine_prompt, image_hash, make_lm, request_key  # noqa: E402
from evalgate.worker.suite_eval import evaluate_suite  # noqa: E402
from evalgate.worker.vllm_engine import Generation  # noqa: E402

N = 8  # items of the page tier run here


def _png_sha(im: Image.Image) -> str:
    import io

    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return hashlib.sha256(buf.getvalue()).hexdigest()


class ImageEngine:
    """Answers each request with the first 8 hex digits of its image's PNG sha256 (``none`` without one), recording
    every prompt it was given."""

    def __init__(self) -> None:
        self.sampling = Sampling(temperature=0.0, max_tokens=64, seed=0)
        self.prompts: list[Any] = []

    def generate_stream(self, prompts: list[Any], *, max_tokens: int, stop: list[str], logprobs: int = 0) -> Any:
        self.prompts += prompts
        out = []
        for i, p in enumerate(prompts):
            im = p["multi_modal_data"]["image"] if isinstance(p, dict) else None
            out.append((i, Generation(_png_sha(im)[:8] if im is not None else "none", 1, "stop", [1], [5])))
        yield out


def _req(context: str, image: Image.Image | None) -> Instance:
    args: tuple[Any, ...] = (context, {"until": ["\n"], "max_gen_toks": 8})
    if image is not None:
        args += ({"visual": [image]},)
    return Instance(request_type="generate_until", doc={}, arguments=args, idx=0, metadata=("t", 0, 1))


def test_request_key_covers_the_images_and_keeps_text_keys() -> None:
    red, blue = Image.new("RGB", (8, 8), (255, 0, 0)), Image.new("RGB", (8, 8), (0, 0, 255))
    text_key = request_key("<image>Q", ["\n"], 8)
    assert text_key == request_key("<image>Q", ["\n"], 8, ())  # text-only: the key it had before images
    keys = {request_key("<image>Q", ["\n"], 8, (image_hash(im),)) for im in (red, blue)}
    assert len(keys) == 2 and text_key not in keys
    assert image_hash(red) == _png_sha(red) == image_hash(Image.new("RGB", (8, 8), (255, 0, 0)))  # lm-eval's hash
    assert image_hash(red) != image_hash(Image.new("RGB", (8, 9), (255, 0, 0)))
    assert engine_prompt("Q", []) == "Q"
    assert engine_prompt("<image>Q", [red]) == {"prompt": "<image>Q", "multi_modal_data": {"image": red}}
    assert engine_prompt("<image><image>Q", [red, blue])["multi_modal_data"] == {"image": [red, blue]}


def test_requests_that_differ_only_in_the_image_never_share_an_answer(tmp_path: Path) -> None:
    red, blue = Image.new("RGB", (8, 8), (255, 0, 0)), Image.new("RGB", (8, 8), (0, 0, 255))
    journal = GenerationJournal(tmp_path / "j.jsonl")
    engine = ImageEngine()
    lm = make_lm(engine, journal)
    assert lm.MULTIMODAL is True  # lm-eval runs doc_to_image tasks only on a model that says so
    texts = lm.generate_until([_req("<image>Q", red), _req("<image>Q", blue), _req("<image>Q", None)])
    assert texts == [_png_sha(red)[:8], _png_sha(blue)[:8], "none"]
    assert engine.prompts[0] == {"prompt": "<image>Q", "multi_modal_data": {"image": red}}
    assert engine.prompts[2] == "<image>Q"
    recs = journal.load()
    assert sorted(r.get("images", []) for r in recs.values()) == sorted([[], [_png_sha(red)], [_png_sha(blue)]])
    # a new adapter over the journal, with the same pixels in new objects: answered from the journal, not the engine
    again = ImageEngine()
    lm2 = make_lm(again, journal)
    assert lm2.generate_until([_req("<image>Q", Image.new("RGB", (8, 8), (0, 0, 255)))]) == [_png_sha(blue)[:8]]
    assert (lm2.reused, lm2.generated, again.prompts) == (1, 0, [])


def test_a_loglikelihood_request_with_an_image_is_refused() -> None:
    lm = make_lm(ImageEngine())
    req = Instance("loglikelihood", {}, ("<image>Q", " A", {"visual": [Image.new("RGB", (8, 8))]}), 0)
    with pytest.raises(ValueError, match="loglikelihood request with images"):
        lm.loglikelihood([req])


def _run_suite(journal: Path) -> tuple[Any, dict, ImageEngine]:
    s = load_suite("docpages", SUITES_DIR)
    spec = {"name": s.name, "dir": str(s.path.parent), "tasks": list(s.tasks), "metrics": s.primary_metric,
            "builtins": s.builtins, "entries": [list(e) for e in s.entries]}
    engine = ImageEngine()
    lm = make_lm(engine, GenerationJournal(journal))
    tasks, keys = evaluate_suite(lm, spec, N, engine.sampling)
    return tasks["docpages_fields"], keys, engine


def test_an_image_suite_runs_through_lm_eval_with_image_keys_and_hashes(tmp_path: Path) -> None:
    docpages = load_module(SUITES_DIR / "docpages" / "utils.py")  # the suite's own generator: the pages sent
    pages = [_png_sha(d["image"]) for d in docpages.load_data(n_test=N)["test"]]
    task, keys, engine = _run_suite(tmp_path / "j.jsonl")
    items = task.items
    assert len(items) == len(pages) == N and len(engine.prompts) == N
    # every request reached the engine as a TextPrompt with its own page, in lm-eval's doc order or not
    sent = sorted(_png_sha(p["multi_modal_data"]["image"]) for p in engine.prompts)
    assert sent == sorted(pages) and len(set(pages)) == N
    for item in items:
        assert item.prompt.startswith("<image>") and item.output == pages[item.item_id][:8]
        (im,) = item.images  # the page's hash and the report's thumbnail
        assert im["sha256"] == pages[item.item_id] and im["thumbnail"].startswith("data:image/png;base64,")
        stop = ["\n\n", "\nDocument:", "\nFields:", "\nJSON:"]  # the YAML's until; its max_gen_toks 96 under 64
        assert keys[("docpages_fields", item.item_id)] == request_key(item.prompt, stop, 64, (pages[item.item_id],))
    # the kinds rotate invoice/receipt/form/table: items 0 and 4 have the same prompt and differ only in the page
    assert items[0].prompt == items[4].prompt and items[0].output != items[4].output
    assert len({i.item_hash for i in items}) == N and len(set(keys.values())) == N
    # a second run (new PIL objects, new memory addresses) gives the same item hashes and reuses every answer
    task2, keys2, engine2 = _run_suite(tmp_path / "j.jsonl")
    assert [i.item_hash for i in task2.items] == [i.item_hash for i in items] and keys2 == keys
    assert engine2.prompts == [] and [i.output for i in task2.items] == [i.output for i in items]


def test_an_image_tasks_item_without_an_image_is_keyed_by_content_not_a_memory_address(tmp_path: Path) -> None:
    """An image task's item whose ``doc_to_image`` yields nothing while its document holds a page: lm-eval's own
    ``doc_hash`` serialises the page as ``<PIL.Image... at 0x7f...>`` (a memory address), so the item's hash, which
    pairs baseline and candidate, changed from run to run. It is lm-eval's formula over the logged document (the
    page replaced by its content hash) instead, as for the items that carry their image. (The pre-flight refuses
    such an item before any engine: tests/evaluate/test_item_images.py; this keeps the key sound regardless.)"""
    import json

    d = tmp_path / "suites" / "pages"
    d.mkdir(parents=True)
    (d / "t.yaml").write_text(
        'task: pages_task\ndataset_path: ""\ncustom_dataset: !function utils.load_data\noutput_type: generate_until\n'
        'test_split: test\ndoc_to_text: "<image>{{q}}"\ndoc_to_target: "{{a}}"\ndoc_to_image: !function utils.images\n'
        'generation_kwargs: {until: ["\\n"], max_gen_toks: 8}\nmetric_list:\n  - metric: exact_match\n')
    (d / "utils.py").write_text(
        "import datasets\nfrom PIL import Image\n\n\ndef load_data(**_):\n"
        "    rows = [{'n': n, 'q': f'Q{n}', 'a': str(n), 'image': Image.new('RGB', (8, 8), (60 * n, 0, 0))}\n"
        "            for n in range(2)]\n    return {'test': datasets.Dataset.from_list(rows)}\n\n\n"
        "def images(doc):\n    return [] if doc['n'] == 1 else [doc['image']]\n")
    spec = {"name": "pages", "dir": str(d.parent), "tasks": ["pages_task"], "metrics": {"pages_task": "exact_match"},
            "entries": [["pages_task", None]]}
    engine = ImageEngine()
    task, _ = evaluate_suite(make_lm(engine, GenerationJournal(tmp_path / "j.jsonl")), spec, None, engine.sampling)
    item = {i.item_id: i for i in task["pages_task"].items}[1]
    assert item.images is None and item.output == "none"  # it reached the engine as text, without its page
    page = _png_sha(Image.new("RGB", (8, 8), (60, 0, 0)))
    doc = {"n": 1, "q": "Q1", "a": "1", "image": page}  # lm-eval's logged document: the page as its content hash
    assert item.item_hash == hashlib.sha256(json.dumps(doc, indent=2, ensure_ascii=False).encode()).hexdigest()
    again = ImageEngine()
    task2, _ = evaluate_suite(make_lm(again, GenerationJournal(tmp_path / "j.jsonl")), spec, None, again.sampling)
    assert [i.item_hash for i in task2["pages_task"].items] == [i.item_hash for i in task["pages_task"].items]
