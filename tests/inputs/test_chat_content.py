"""How a chat config's text messages reach its template (``chat.content_form``), and the image switch per task.

Many VL templates (Idefics3's) read ``message['content']`` only as a list of parts: a plain string renders an empty
user turn, and every text item would be scored on a prompt without its question. Each config's template is probed
once: a plain-string message that keeps its text keeps today's prompts (and store keys); one that keeps only the
content-parts form sends every message as parts (recorded as ``content: parts`` in the protocol); one that keeps
neither is exit 2 on ``chat.template``. In an image suite, only image tasks' messages go as image content parts; a
text task keeps the config's text form. Expected prompts are spelled out by hand from the templates' text; the suites
run through lm-eval's chat path with a stand-in engine (no vLLM)."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lm_eval")

from evalgate.cli import main  # noqa: E402
from evalgate.errors import ConfigError  # noqa: E402
from evalgate.evaluate.modality import check_mixed_groups  # noqa: E402
from evalgate.inputs.chat import (  # noqa: E402
    PARTS,
    STRING,
    check_protocols,
    content_form,
    describe_difference,
    protocol,
    text_content,
)
from evalgate.inputs.config import Sampling, load_baseline, load_config  # noqa: E402
from evalgate.models.idefics3_tiny import CHAT_TEMPLATE as IDEFICS3  # noqa: E402
from evalgate.results.store import GenerationJournal  # noqa: E402
from evalgate.suites.discovery import load_suite  # noqa: E402
from evalgate.worker.lm_adapter import make_lm, request_key  # noqa: E402
from evalgate.worker.suite_eval import evaluate_suite  # noqa: E402
from evalgate.worker.vllm_engine import Generation  # noqa: E402
from tests.taskfixtures import HybridTokenizer, json_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HYBRID_CHAT = ROOT / "configs" / "chat" / "hybrid-chat.jinja"
# Says which form each message came in: "[s]" before a plain string, "[p]" before each text part, <image> per image
# part. A plain string keeps its text, so its config's text messages stay strings.
MARKED = ("{% for m in messages %}{{ m['role'] }}:{% if m['content'] is string %}[s]{{ m['content'] }}{% else %}"
          "{% for p in m['content'] %}{% if p['type'] == 'image' %}<image>{% else %}[p]{{ p['text'] }}{% endif %}"
          "{% endfor %}{% endif %}|{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
DROPS = "{% for m in messages %}[{{ m['role'] }}]\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
QUESTIONS = ["What is 2 + 3?", "Name the tag <image> of HTML."]  # the second holds lm-eval's image placeholder


# ------------------------------------------------------------------------------------------------ the probe

def test_the_probe_tells_a_parts_only_template_from_a_string_friendly_one_and_one_that_drops_both() -> None:
    assert content_form(IDEFICS3) == PARTS  # a string renders "User: <end_of_utterance>": an empty turn
    assert content_form(HYBRID_CHAT.read_text(), {"enable_thinking": False}) == STRING
    assert content_form(MARKED) == STRING
    assert content_form(DROPS) is None
    # a template that raises on a string (transformers' raise_exception) but renders parts
    strict = ("{% for m in messages %}{% if m['content'] is string %}{{ raise_exception('parts only') }}{% endif %}"
              "{% for p in m['content'] %}{{ p['text'] }}{% endfor %}{% endfor %}")
    assert content_form(strict) == PARTS
    assert text_content([{"role": "user", "content": "a <image> b"}, {"role": "user", "content": ""}]) == [
        {"role": "user", "content": [{"type": "text", "text": "a <image> b"}]}, {"role": "user", "content": []}]



def _count_renders(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Record the kwargs of every template render ``content_form`` makes (its probe); returns the growing list."""
    import evalgate.inputs.chat as chat

    renders: list[dict[str, Any]] = []
    real = chat._render

    def counting(text: str, messages: list[dict[str, Any]], kwargs: dict[str, Any]) -> str:
        renders.append(dict(kwargs))
        return real(text, messages, kwargs)

    monkeypatch.setattr(chat, "_render", counting)
    return renders


def test_the_probe_renders_each_template_and_kwargs_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``content_form`` is memoized on the template text and its kwargs: a protocol asked again renders nothing; other
    kwargs are probed on their own (here they change the answer); a kwarg JSON cannot spell is probed every time."""
    import datetime
    import uuid

    renders = _count_renders(monkeypatch)
    # a template no other test renders (its comment), which reads the text as parts only when told to
    text = (f"{{# {uuid.uuid4()} #}}{{% for m in messages %}}{{% if as_parts %}}{{% for p in m['content'] %}}"
            "{{ p['text'] }}{% endfor %}{% else %}{{ m['content'] }}{% endif %}{% endfor %}")
    assert content_form(text, {"as_parts": False}) == STRING and len(renders) == 1  # the string form keeps it
    assert content_form(text, {"as_parts": False}) == STRING and len(renders) == 1
    assert content_form(text, {"as_parts": True}) == PARTS and len(renders) == 3  # string form lost, parts kept
    assert content_form(text, {"as_parts": True}) == PARTS and len(renders) == 3
    tpl = tmp_path / "t.jinja"
    tpl.write_text(text)
    (tmp_path / "c.yaml").write_text("model: embedded:nemotron-h-tiny\nchat: {template: t.jinja, "
                                     "template_kwargs: {as_parts: true}}\n")
    spec = load_config(tmp_path / "c.yaml", check_engine_args=False).chat
    assert protocol(spec)["content"] == PARTS and spec.worker_spec()["content"] == PARTS and len(renders) == 3
    day = {"as_parts": False, "day": datetime.date(2026, 1, 1)}  # YAML reads 2026-01-01 as a date
    assert content_form(text, day) == STRING and content_form(text, day) == STRING and len(renders) == 5
    assert renders[-1] == day


def test_kwargs_json_would_change_are_probed_as_given_uncached(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only kwargs that JSON gives back equal are memoized: a tuple (JSON: a list) or a non-string dict key (JSON: a
    string) would otherwise be probed as the JSON values, not the kwargs the prompts get; they are probed every time,
    with the kwargs as given."""
    import uuid

    renders = _count_renders(monkeypatch)
    # parts only when the kwarg is a tuple / a dict with the int key 1 (the JSON spellings would read as a string)
    text = (f"{{# {uuid.uuid4()} #}}{{% for m in messages %}}{{% if (pair is defined and pair is not string and "
            "pair[0] == 'a') or (keyed is defined and keyed[1] is defined) %}}{% for p in m['content'] %}"
            "{{ p['text'] }}{% endfor %}{% else %}{{ m['content'] }}{% endif %}{% endfor %}")
    for kwargs in ({"pair": ("a", "b")}, {"keyed": {1: "x"}}):
        before = len(renders)
        assert content_form(text, kwargs) == PARTS and content_form(text, kwargs) == PARTS
        assert len(renders) - before == 4 and all(r == kwargs for r in renders[before:])  # probed twice, as given
    assert content_form(text, {"pair": ["z"]}) == STRING  # a JSON-exact kwarg: memoized as before
    n = len(renders)
    assert content_form(text, {"pair": ["z"]}) == STRING and len(renders) == n

# ------------------------------------------------------------------------------------------------ suites

def _suite(root: Path, *, image_task: bool = False, group: bool = False) -> Path:
    """A suite folder ``mix`` under ``root``: the text task ``mix_text`` (QUESTIONS, "Question: ...\\nAnswer:"), and
    with ``image_task`` the image task ``mix_pages`` ("<image>P<n>", one 8x8 page each); with ``group`` both listed
    by one group ``mix_all``."""
    d = root / "mix"
    d.mkdir(parents=True)
    (d / "text.jsonl").write_text("".join(json.dumps({"q": q, "a": "5"}) + "\n" for q in QUESTIONS))
    body = ('doc_to_text: "Question: {{q}}\\nAnswer:"\ndoc_to_target: "{{a}}"\n'
            'generation_kwargs: {until: ["\\n"], max_gen_toks: 8}\n')
    (d / "mix_text.yaml").write_text(json_task("mix_text", "text.jsonl", "generate_until", body, ("exact_match",)))
    if image_task:
        (d / "mix_pages.yaml").write_text(
            'task: mix_pages\ndataset_path: ""\ncustom_dataset: !function utils.load_data\noutput_type: generate_until\n'
            'test_split: test\ndoc_to_text: "<image>P{{n}}"\ndoc_to_target: "{{a}}"\ndoc_to_image: [image]\n'
            'generation_kwargs: {until: ["\\n"], max_gen_toks: 8}\nmetric_list:\n  - metric: exact_match\n'
            '    aggregation: mean\n    higher_is_better: true\n')
        (d / "utils.py").write_text(
            "import datasets\nfrom PIL import Image\n\n\ndef load_data(**_):\n"
            "    rows = [{'n': n, 'a': str(n), 'image': Image.new('RGB', (8, 8), (60 * n, 0, 0))} for n in range(2)]\n"
            "    return {'test': datasets.Dataset.from_list(rows)}\n")
    if group:
        (d / "mix_all.yaml").write_text("group: mix_all\ntask: [mix_text, mix_pages]\n")
    return root


_Tok = HybridTokenizer  # the embedded hybrid's tokenizer, no template of its own


class _Engine:
    """Answers "5" to every request, recording the prompts it was given."""

    def __init__(self) -> None:
        self.sampling = Sampling(temperature=0.0, max_tokens=64, seed=0)
        self.prompts: list[Any] = []
        self.tok = _Tok()

    def tokenizer(self) -> Any:
        return self.tok

    def generate_stream(self, prompts: list[Any], *, max_tokens: int, stop: list[str], logprobs: int = 0) -> Any:
        self.prompts += prompts
        yield [(i, Generation("5", 1, "stop", [1], [5])) for i, _ in enumerate(prompts)]


def _config(tmp_path: Path, template: str, name: str = "c.yaml") -> Any:
    (tmp_path / "t.jinja").write_text(template)
    (tmp_path / name).write_text("model: embedded:nemotron-h-tiny\nchat: {template: t.jinja}\n")
    return load_config(tmp_path / name, check_engine_args=False)


def _run(tmp_path: Path, chat: dict[str, Any], suites_root: Path) -> tuple[dict[str, Any], dict, _Engine, Any]:
    s = load_suite("mix", suites_root)
    spec = {"name": s.name, "dir": str(s.path.parent), "tasks": list(s.tasks), "metrics": s.primary_metric,
            "builtins": s.builtins, "entries": [list(e) for e in s.entries],
            **({"modality": "image", "image_entries": list(s.image_entries)} if s.modality == "image" else {})}
    engine = _Engine()
    lm = make_lm(engine, GenerationJournal(tmp_path / "j.jsonl"), chat=chat)
    tasks, keys = evaluate_suite(lm, spec, None, engine.sampling, chat)
    return tasks, keys, engine, lm


def test_a_text_suite_under_a_parts_only_template_sends_parts_and_keeps_the_question(tmp_path: Path) -> None:
    cfg = _config(tmp_path, IDEFICS3)
    chat = cfg.chat.worker_spec()
    assert chat["content"] == PARTS
    # the protocol (store keys, manifest) records it
    sha = hashlib.sha256(IDEFICS3.encode()).hexdigest()
    assert protocol(cfg.chat) == {"mode": "chat", "template": "file", "template_sha256": sha, "template_kwargs": {},
                                  "system_sha256": None, "fewshot_as_multiturn": False, "think_end": None,
                                  "content": "parts"}
    tasks, keys, engine, lm = _run(tmp_path, chat, _suite(tmp_path / "suites"))
    expected = [f"<|begin_of_text|>User: Question: {q}\nAnswer:<end_of_utterance>\nAssistant:" for q in QUESTIONS]
    items = tasks["mix_text"].items
    assert [i.prompt for i in items] == expected == sorted(engine.prompts, key=expected.index)
    # the placeholder of a text task is text: no image part, so Idefics3 writes it as the question's own characters
    assert items[1].prompt.count("<image>") == 1
    assert keys[("mix_text", 0)] == request_key(expected[0], ["\n"], 8)
    assert lm.tokenizer_name.endswith("-parts")
    # without the parent's decision (older spec), the adapter probes the template itself: the same prompts
    tasks2, _, engine2, _ = _run(tmp_path / "again", {**chat, "content": None}, tmp_path / "suites")
    assert [i.prompt for i in tasks2["mix_text"].items] == expected


def test_a_string_friendly_template_keeps_the_string_prompt_protocol_and_key(tmp_path: Path) -> None:
    cand = load_config("chat/fp16-state", check_engine_args=False)
    base = load_baseline(cand, check_engine_args=False)
    chat = cand.chat.worker_spec()
    assert chat["content"] == STRING
    # the protocol has no content key (absent reads as string): the same dict, so the same store keys, as before
    protos = check_protocols(base, cand)
    assert "content" not in protos["candidate"] and protos["candidate"] == protos["baseline"] == protocol(cand.chat)
    assert describe_difference(protos["candidate"], {**protos["candidate"], "content": "parts"}) == (
        'content: null vs "parts"')  # a parts run is never compared as the same protocol
    tasks, keys, engine, lm = _run(tmp_path, chat, _suite(tmp_path / "suites"))
    expected = [f"User: Question: {q}\nAnswer:\nAssistant: <think></think>" for q in QUESTIONS]
    assert [i.prompt for i in tasks["mix_text"].items] == expected
    assert keys[("mix_text", 1)] == request_key(expected[1], [], 8)  # think_end: no stop to the engine
    sha = hashlib.sha256(HYBRID_CHAT.read_text().encode()).hexdigest()[:16]
    assert lm.tokenizer_name == f"evalgate-chat-{sha}"


def test_a_template_that_drops_the_text_either_way_is_refused_naming_the_file_and_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(tmp_path, DROPS)
    with pytest.raises(ConfigError) as e:
        check_protocols(cfg, cfg)
    assert str(e.value) == (
        f"{tmp_path / 'c.yaml'}: chat.template: template {tmp_path / 't.jinja'} loses a message's text: a user "
        "message's text is in the rendered prompt neither when its content is a plain string nor when it is content "
        "parts ([{\"type\": \"text\", \"text\": ...}]), so every item would be scored without its question; use a "
        "template that writes message['content'] (the string, or its text parts)")
    # evalgate run refuses it before any engine starts (exit 2; no worker log)
    (tmp_path / "cand.yaml").write_text("extends: c.yaml\nbaseline: c.yaml\nengine_args: {dtype: bfloat16}\n")
    out = tmp_path / "run"
    code = main(["run", "--config", str(tmp_path / "cand.yaml"), "--suites", "finance", "--limit", "1",
                 "--out", str(out)])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalgate:")]
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"evalgate: error: {tmp_path / 'c.yaml'}: chat.template: template "), err
    assert not (out / "logs").exists() or not list((out / "logs").glob("*.log"))


def test_in_an_image_suite_only_the_image_task_gets_image_parts(tmp_path: Path) -> None:
    root = _suite(tmp_path / "suites", image_task=True)
    suite = load_suite("mix", root)
    assert suite.modality == "image" and suite.image_entries == ("mix_pages",)
    chat = {"chat": True, "template": MARKED, "system": None, "template_kwargs": {}, "fewshot_as_multiturn": False,
            "think_end": None, "content": STRING}
    tasks, _, engine, lm = _run(tmp_path, chat, root)
    # the text task: plain strings as before, its "<image>" text as it is (no image part, no image expected)
    assert [i.prompt for i in tasks["mix_text"].items] == [f"user:[s]Question: {q}\nAnswer:|assistant:"
                                                            for q in QUESTIONS]
    assert all(i.images is None for i in tasks["mix_text"].items)
    # the image task: content parts, its placeholder an image part
    assert [i.prompt for i in tasks["mix_pages"].items] == [f"user:<image>[p]P{n}|assistant:" for n in range(2)]
    # each item carries its own page (utils.load_data: item n is an 8x8 page of red 60 * n), not another's
    from PIL import Image

    def png_sha(n: int) -> str:
        buf = io.BytesIO()
        Image.new("RGB", (8, 8), (60 * n, 0, 0)).save(buf, format="PNG")
        return hashlib.sha256(buf.getvalue()).hexdigest()

    pages = tasks["mix_pages"].items
    assert [i.item_id for i in pages] == [0, 1] and png_sha(0) != png_sha(1)
    assert [[im["sha256"] for im in i.images] for i in pages] == [[png_sha(i.item_id)] for i in pages]
    assert [i.prompt for i in pages] == [f"user:<image>[p]P{i.item_id}|assistant:" for i in pages]
    assert sum(isinstance(p, dict) for p in engine.prompts) == 2 and lm.image_prompts is False


def test_a_group_mixing_image_and_text_tasks_is_refused_under_a_chat_template_only(tmp_path: Path) -> None:
    root = _suite(tmp_path / "suites", image_task=True, group=True)
    suite = load_suite("mix", root)
    assert suite.entry_modality == (("mix_all", "mixed"),) and suite.image_entries == ("mix_all",)
    check_mixed_groups(load_config("fp16-state", check_engine_args=False), [suite])  # completion: no messages
    cfg = _config(tmp_path, MARKED)
    with pytest.raises(ConfigError) as e:
        check_mixed_groups(cfg, [suite])
    assert str(e.value).startswith(f"{root / 'mix' / 'mix_all.yaml'}: task: group mix_all of suite mix holds both "
                                   "image tasks (mix_pages) and text tasks (mix_text)")


def test_a_mixed_image_suites_chat_results_are_keyed_by_its_image_entries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Results of a mixed image suite stored before the switch was per task had its text task's messages as image
    parts: under a chat template its key now names the entries that ran with images. A text suite, an image suite
    of image tasks only, and any suite under completion prompts keep their keys."""
    from evalgate.evaluate import runner
    from evalgate.results.store import ResultStore

    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    seen: list[dict[str, Any]] = []
    real = runner.content_key
    monkeypatch.setattr(runner, "content_key", lambda d: seen.append(d) or real(d))
    mixed = load_suite("mix", _suite(tmp_path / "a", image_task=True))
    text = load_suite("mix", _suite(tmp_path / "b"))
    store = ResultStore(tmp_path / "store")
    for cfg in (_config(tmp_path, MARKED), load_config("fp16-state", check_engine_args=False)):
        seen.clear()
        runner._plan(cfg, [mixed, text], limit=2, store=store, reference=None, logprob_items=0)
        suite_keys = [d for d in seen if "suite" in d]
        assert [d.get("image_entries") for d in suite_keys] == (
            [["mix_pages"], None] if cfg.chat.is_chat else [None, None])
