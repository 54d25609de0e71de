"""Training data for the embedded hybrid model, generated offline and deterministically.

Five sources, mixed batch by batch:

* **docparse / finance**: the suites' own generators (``suites/<suite>/utils.py``, imported by file path),
  run with training seeds (``DOCPARSE_SEED_BASE + k``, ``FINANCE_SEED_BASE + k``) far from every seed the
  suites evaluate on, and formatted with the suites' own ``doc_to_text`` (same instruction, same few-shot
  examples) followed by the answer. Any generated document or statement whose content hash equals one of
  an evaluation item's (test items and few-shot examples) is dropped, so no evaluation item is trained on.
  The loss covers the answer only. Finance answers are the bare number (``" 1,234"``): the suite scores a
  generation by its first number, so the worked computation the few-shot examples show would score wrong.
* **code**: Python source from the local interpreter's standard library (``build_code_corpus``), as plain
  language-model text (the coding suite's HumanEval problems are not used).
* **coding_small / longgen**: the generated coding tier (``suites/coding/coding_small.py``) and the long
  transcription task (``suites/longgen/shipments.py``), built by their own ``make_items`` / ``doc_to_text`` from
  training seeds, loss on the answer only. So that both stay informative (neither at the ceiling), the coding
  items are of ``Mix.coding_kinds_every``-th function kind only (the others are left for the model to copy from
  the same-kind solved example in the prompt), and the logs have ``Mix.longgen_rows`` rows (2-12; the task
  evaluates 12: a recipe trained on 2-8 rows wrote outputs that stop after ~8 rows). Long samples go in their own
  padded group of ``Mix.long_len`` tokens, so the short ones keep their 512-token shape.
* **chat** (``ChatMix``, off in the shipped recipe): docparse / finance items from their own training blocks
  (``CHAT_BLOCK_BASE + ..``), their suite prompt rendered as one user turn through ``configs/chat/hybrid-chat.jinja``
  (``chat_prompt``: what lm-eval's chat path gives the engine for these tasks), half with thinking off (the template
  writes an empty ``<think></think>``), half with thinking on (``<think>\n`` opened by the template; the answer
  starts with a short reasoning segment derived from the generator's ground truth, ``thought``, closed by
  ``</think>``). The answer after the thought is the completion answer, then ``</s>``: the chat configs set
  ``think_end``, so no stop string reaches the engine and the model must end its turn itself. Loss on reasoning
  and answer.

Everything is a pure function of the batch index and the seeds: ``batch(k)`` is the same on every machine
given the same code corpus (its SHA-256 is logged with the checkpoint).
"""

from __future__ import annotations

import hashlib
import importlib.util
import random
import sys
import sysconfig
import types
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from evalgate.suites.discovery import SUITES_DIR

DOCPARSE_SEED_BASE = 310_000_000
FINANCE_SEED_BASE = 320_000_000
CODE_SEED_BASE = 330_000_000
CODING_SEED_BASE = 340_000_000
LONGGEN_SEED_BASE = 350_000_000
LONG_SOURCES = frozenset({"longgen"})  # samples padded in the long group (train.encode_groups)
DOCPARSE_BLOCK = 8  # documents per generator call (kinds rotate within a call)
FINANCE_BLOCK = 4  # statements per generator call (4 questions each)
LOOKUP_BLOCK_BASE = 50_000_000  # finance blocks from here on feed the extra lookup items
CHAT_BLOCK_BASE = 60_000_000  # docparse / finance blocks from here on feed the chat samples
CHAT_TEMPLATE = Path(__file__).resolve().parents[2] / "configs" / "chat" / "hybrid-chat.jinja"
THINK_END = "</think>"  # configs/chat/baseline.yaml's chat.think_end

# Standard-library modules/packages used as code text (sorted, tests and GUI toolkits excluded).
_CODE_SKIP_DIRS = {"test", "tests", "idlelib", "tkinter", "turtledemo", "lib2to3", "site-packages",
                   "ensurepip", "venv", "pydoc_data", "config-3.11-x86_64-linux-gnu", "__pycache__"}
CODE_CORPUS_CHARS = 6_000_000


@dataclass(frozen=True)
class Sample:
    """One training sequence: ``prompt`` (no loss) then ``answer`` (loss); code has an empty prompt."""

    source: str  # "docparse" | "finance" | "code" | "coding" | "longgen" | "chat-docparse" | "chat-finance"
    prompt: str
    answer: str
    eos: bool = False  # the answer ends with </s> (chat turns: the engine gets no stop string)


def _yaml_kwargs(path: Path) -> dict[str, Any]:
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    return dict(yaml.load(path.read_text(), Loader=_Loader).get("dataset_kwargs") or {})


@lru_cache(maxsize=None)
def suite_module(suite: str, suites_dir: Path = SUITES_DIR, module: str = "utils") -> types.ModuleType:
    """``suites/<suite>/<module>.py`` imported by file path. Where ``datasets`` is not installed (a bare
    training machine), a stub stands in for it: only the suites' ``load_data`` uses it."""
    try:
        import datasets  # noqa: F401
    except ImportError:
        stub = types.ModuleType("datasets")
        stub.Dataset = None  # type: ignore[attr-defined]
        sys.modules["datasets"] = stub
    path = suites_dir / suite / f"{module}.py"
    spec = importlib.util.spec_from_file_location(f"evalgate_hybrid_{suite}_{module}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def content_key(suite: str, item: dict) -> str:
    """What makes an item an item: the docparse document, the finance statement (shared by 4 questions)."""
    return _sha(item["document"] if suite == "docparse" else item["statement"])


def eval_items(suite: str, suites_dir: Path = SUITES_DIR) -> list[dict]:
    """Every item the suite evaluates on (its test items, from the task YAML's seed and size) plus its
    few-shot examples."""
    mod = suite_module(suite, suites_dir)
    kw = _yaml_kwargs(suites_dir / suite / ("docparse_fields.yaml" if suite == "docparse" else "finance_tableqa.yaml"))
    if suite == "docparse":
        test = mod.make_items(int(kw.get("seed", 20240611)), int(kw.get("n_test", 200)), "docparse")
        return test + list(mod.FEWSHOT)
    test = mod.make_items(int(kw.get("seed", 20240612)), int(kw.get("n_statements", 50)),
                          int(kw.get("per_statement", 4)), "finance")
    return test + list(mod._POOL)


@lru_cache(maxsize=None)
def eval_keys(suites_dir: Path = SUITES_DIR) -> frozenset[str]:
    return frozenset(content_key(s, it) for s in ("docparse", "finance") for it in eval_items(s, suites_dir))


def docparse_items(block: int) -> list[dict]:
    """Training items of block ``block`` (held-out items dropped)."""
    mod = suite_module("docparse")
    items = mod.make_items(DOCPARSE_SEED_BASE + block, DOCPARSE_BLOCK, f"train-dp-{block}")
    keys = eval_keys()
    return [it for it in items if content_key("docparse", it) not in keys]


def finance_items(block: int) -> list[dict]:
    mod = suite_module("finance")
    items = mod.make_items(FINANCE_SEED_BASE + block, FINANCE_BLOCK, 4, f"train-fin-{block}")
    keys = eval_keys()
    return [it for it in items if content_key("finance", it) not in keys]


def docparse_sample(item: dict) -> Sample:
    return Sample("docparse", suite_module("docparse").doc_to_text(item), " " + item["target"] + "\n\n")


def finance_sample(item: dict) -> Sample:
    gold = item["target"]
    shown = f"{int(gold):,}" if gold.lstrip("-").isdigit() else gold
    return Sample("finance", suite_module("finance").doc_to_text(item), f" {shown}\n\n")


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def build_code_corpus(root: Path | None = None, max_chars: int = CODE_CORPUS_CHARS) -> str:
    """Python standard-library source (sorted relative paths, tests/GUI excluded), files joined with a
    ``# file: <path>`` header, cut at ``max_chars``."""
    root = root or stdlib_dir()
    parts, total = [], 0
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root)
        if any(part in _CODE_SKIP_DIRS for part in rel.parts[:-1]) or rel.name.startswith("test_"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not text.isascii():
            continue
        chunk = f"# file: {rel.as_posix()}\n{text}\n"
        parts.append(chunk)
        total += len(chunk)
        if total >= max_chars:
            break
    return "".join(parts)[:max_chars]


def corpus_sha(corpus: str) -> str:
    return _sha(corpus)


def code_sample(corpus: str, rng: random.Random, n_chars: int) -> Sample:
    """A window of ``n_chars`` characters starting at a line start chosen by ``rng``."""
    start = rng.randrange(0, max(1, len(corpus) - n_chars))
    nl = corpus.find("\n", start)
    start = nl + 1 if 0 <= nl < len(corpus) - n_chars else start
    return Sample("code", "", corpus[start:start + n_chars])


# ---------------------------------------------------------------- coding_small and longgen
@lru_cache(maxsize=None)
def coding_eval_keys(suites_dir: Path = SUITES_DIR) -> frozenset[str]:
    """Hashes of every coding_small evaluation prompt (items as ``coding_small.yaml``'s ``dataset_kwargs`` make them)."""
    mod = suite_module("coding", module="coding_small")
    kw = _yaml_kwargs(suites_dir / "coding" / "coding_small.yaml")
    items = mod.make_items(int(kw["seed"]), int(kw["n_test"]), "eval", bool(kw.get("same_kind_shot", True)),
                           bool(kw.get("hint", False)))
    return frozenset(_sha(it["prompt"]) for it in items)


def trained_kinds(every: int) -> tuple[str, ...]:
    """The coding_small function kinds the model is trained on: every ``every``-th of the sorted kinds."""
    return tuple(sorted(suite_module("coding", module="coding_small").KINDS)[::every])


def coding_items(block: int, every: int) -> list[dict]:
    """coding_small items of one block (24 items, one per kind, from seed ``CODING_SEED_BASE + block``), kept
    when their kind is trained and their prompt is no evaluation item's."""
    mod = suite_module("coding", module="coding_small")
    kinds, keys = set(trained_kinds(every)), coding_eval_keys()
    items = mod.make_items(CODING_SEED_BASE + block, len(mod.KINDS), f"train-code-{block}")
    return [it for it in items if it["kind"] in kinds and _sha(it["prompt"]) not in keys]


def coding_sample(item: dict) -> Sample:
    return Sample("coding", item["prompt"], item["canonical_solution"] + "\n\n")


@lru_cache(maxsize=None)
def longgen_eval_keys(suites_dir: Path = SUITES_DIR) -> frozenset[str]:
    """Hashes of every longgen evaluation log and of the prompt's worked example (``longgen_shipments.yaml``)."""
    mod = suite_module("longgen", module="shipments")
    kw = _yaml_kwargs(suites_dir / "longgen" / "longgen_shipments.yaml")
    items = mod.make_items(int(kw["seed"]), int(kw["n_test"]), int(kw["n_rows"]), "eval")
    return frozenset(_sha(it["document"]) for it in items + [mod.SHOT])


def longgen_item(index: int, rows: tuple[int, int]) -> dict | None:
    """Training log ``index`` (seed ``LONGGEN_SEED_BASE + index``, ``rows[0]..rows[1]`` rows, drawn from the
    same seed); None where it equals an evaluation log.

    Known flaw of the shipped recipe (kept so that it reproduces): the row count and the log's date style
    (``make_items``'s first draw from the same seed) come from the same first random number, so logs of 10-12
    rows all use the "5 Mar 2021" style, while two thirds of the evaluation logs (12 rows) use ISO or dd.mm.yyyy.
    The next retrain should draw the row count from its own stream (e.g. ``random.Random(f"rows-{seed}")``)."""
    mod = suite_module("longgen", module="shipments")
    n_rows = random.Random(LONGGEN_SEED_BASE + index).randint(*rows)
    item = mod.make_items(LONGGEN_SEED_BASE + index, 1, n_rows, f"train-long-{index}")[0]
    return None if _sha(item["document"]) in longgen_eval_keys() else item


def longgen_sample(item: dict) -> Sample:
    return Sample("longgen", suite_module("longgen", module="shipments").doc_to_text(item), item["target"] + "\n\n")


@dataclass(frozen=True)
class Mix:
    """Samples per batch from each source."""

    docparse: int = 16
    finance: int = 32
    finance_lookup: int = 12  # extra finance items of the easy tier (qtype "lookup"), from other blocks
    code: int = 8
    code_chars: int = 1000
    coding: int = 12  # coding_small items (of the trained kinds)
    coding_kinds_every: int = 3
    longgen: int = 4  # shipment logs, in the long group
    longgen_rows: tuple[int, int] = (2, 12)
    long_len: int = 1920  # the long group's padded length (a multiple of the SSD chunk, 128)

    @property
    def size(self) -> int:
        return self.docparse + self.finance + self.finance_lookup + self.code + self.coding + self.longgen


def batch_samples(k: int, mix: Mix, corpus: str, chat: ChatMix | None = None) -> list[Sample]:
    """The samples of training batch ``k`` (a pure function of ``k``, ``mix``, ``corpus`` and ``chat``).

    Batch ``k`` draws docparse blocks ``k * m ..``, finance blocks likewise (and the extra lookup items from
    blocks ``LOOKUP_BLOCK_BASE + 8 k ..``), code windows from ``random.Random(CODE_SEED_BASE + k)``, so
    batches never share a generated document. With ``chat``, the chat samples (``chat_samples``) come last."""
    out: list[Sample] = []
    dp_blocks = -(-mix.docparse // DOCPARSE_BLOCK)
    items = [it for j in range(dp_blocks) for it in docparse_items(k * dp_blocks + j)]
    out += [docparse_sample(it) for it in items[: mix.docparse]]
    fin_blocks = -(-mix.finance // (FINANCE_BLOCK * 4))
    items = [it for j in range(fin_blocks) for it in finance_items(k * fin_blocks + j)]
    out += [finance_sample(it) for it in items[: mix.finance]]
    if mix.finance_lookup:
        # lookup items from blocks after every batch's ordinary finance blocks (negative-free, disjoint):
        # batch k uses blocks LOOKUP_BLOCK_BASE + k * 8 .. + 7 (about 2.4 lookups per block)
        items = [it for j in range(8) for it in finance_items(LOOKUP_BLOCK_BASE + k * 8 + j)
                 if it["qtype"] == "lookup"]
        out += [finance_sample(it) for it in items[: mix.finance_lookup]]
    rng = random.Random(CODE_SEED_BASE + k)
    out += [code_sample(corpus, rng, mix.code_chars) for _ in range(mix.code)] if corpus else []
    if mix.coding:
        per_block = len(trained_kinds(mix.coding_kinds_every))
        blocks = -(-mix.coding // per_block)
        items = [it for j in range(blocks) for it in coding_items(k * blocks + j, mix.coding_kinds_every)]
        out += [coding_sample(it) for it in items[: mix.coding]]
    for j in range(mix.longgen):
        item = longgen_item(k * mix.longgen + j, mix.longgen_rows)
        if item is not None:
            out.append(longgen_sample(item))
    return out + (chat_samples(k, chat) if chat else [])


# ---------------------------------------------------------------- chat
@dataclass(frozen=True)
class ChatMix:
    """Chat samples per batch (``batch_samples``'s ``chat``), each source half thinking off, half on."""

    docparse: int = 16
    finance: int = 32


@lru_cache(maxsize=None)
def _chat_template(path: Path = CHAT_TEMPLATE) -> Any:
    """The template compiled as ``transformers`` compiles a chat template (``render_jinja_template``: sandboxed,
    ``trim_blocks``, ``lstrip_blocks``, loop controls), so a training machine needs jinja2 only."""
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    return env.from_string(path.read_text(encoding="utf-8"))


def chat_prompt(user: str, thinking: bool, path: Path = CHAT_TEMPLATE) -> str:
    """The chat prompt of a suite prompt ``user`` under ``configs/chat/hybrid-chat.jinja``.

    docparse_fields / finance_tableqa have ``num_fewshot: 0`` (their worked examples are part of ``doc_to_text``),
    so lm-eval's ``fewshot_context(apply_chat_template=True, fewshot_as_multiturn=True)`` builds one user message
    (no system message: the chat configs set none, the tasks no description) and renders it with
    ``add_generation_prompt=True`` and the config's ``template_kwargs`` (``enable_thinking``)."""
    messages = [{"role": "user", "content": user}]
    return _chat_template(path).render(messages=messages, add_generation_prompt=True, enable_thinking=thinking)


def thought(suite: str, item: dict) -> str:
    """The short reasoning segment of a thinking-on chat sample, from the generator's ground truth: docparse, the
    document kind and the fields asked for; finance, the computation of the item's worked answer without its result
    (``"1,204 - 1,150 ="``, for a lookup ``"Revenue 2023 ="``). One line, no blank line."""
    if suite == "docparse":
        return f"{item['kind']}; fields: {', '.join(item['fields'])}"
    gold = item["target"]
    shown = f"{int(gold):,}" if gold.lstrip("-").isdigit() else gold
    work = item["work"]
    if not work.endswith(" " + shown):
        raise ValueError(f"finance item's worked answer {work!r} does not end with its target {shown!r}")
    return work[: -len(shown) - 1]


def chat_sample(suite: str, item: dict, thinking: bool) -> Sample:
    """``item`` as a chat turn: the template's prompt (``chat_prompt``) then, thinking on, ``thought + "\n</think>"``,
    then the completion answer (``docparse_sample`` / ``finance_sample``), then ``</s>``."""
    plain = docparse_sample(item) if suite == "docparse" else finance_sample(item)
    head = f"{thought(suite, item)}\n{THINK_END}" if thinking else ""
    return Sample(f"chat-{suite}", chat_prompt(plain.prompt, thinking), head + plain.answer, eos=True)


def chat_samples(k: int, chat: ChatMix) -> list[Sample]:
    """The chat samples of batch ``k``: docparse blocks ``CHAT_BLOCK_BASE + k m ..``, finance likewise (evaluation
    items dropped as everywhere); within each source, every second sample (odd positions) has thinking on."""
    out: list[Sample] = []
    for suite, n, per_block, items_of in (("docparse", chat.docparse, DOCPARSE_BLOCK, docparse_items),
                                          ("finance", chat.finance, FINANCE_BLOCK * 4, finance_items)):
        blocks = -(-n // per_block)
        items = [it for j in range(blocks) for it in items_of(CHAT_BLOCK_BASE + k * blocks + j)][:n]
        out += [chat_sample(suite, it, i % 2 == 1) for i, it in enumerate(items)]
    return out
