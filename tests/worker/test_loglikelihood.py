"""Loglikelihood requests (multiple-choice tasks): lm-eval's tokenisation, the journal, per-item choices, the 0/1
comparison path, the report; and (engine) the adapter against an independent reference on the embedded hybrid."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalgate.results.records import ItemResult, TaskResult
from evalgate.results.store import GenerationJournal
from evalgate.worker.lm_adapter import encode_pair, loglikelihood_key, request_key, score_pairs, score_rolling
from taskfixtures import json_task

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hf_tok():
    from transformers import AutoTokenizer

    from evalgate.models.hybrid import CHECKPOINT_DIR

    return AutoTokenizer.from_pretrained(str(CHECKPOINT_DIR))


def _hflm_without_model(tokenizer: Any) -> Any:
    """lm-eval's HFLM with just what its tokenisation reads (no model is loaded)."""
    from lm_eval.models.huggingface import HFLM

    lm = HFLM.__new__(HFLM)
    lm.tokenizer, lm.backend, lm.add_bos_token, lm.custom_prefix_token_id = tokenizer, "causal", None, None
    return lm


@pytest.mark.parametrize(("context", "continuation"), [
    ("Total due:", " 1,234.50"), ("Total due: ", "1,234.50"), ("Invoice  \n", "INV-0042"), ("<s>Q: 2+2\nA:", " 4"),
])
def test_encode_pair_is_lm_evals(hf_tok, context: str, continuation: str) -> None:
    assert encode_pair(hf_tok, context, continuation) == _hflm_without_model(hf_tok)._encode_pair(context, continuation)


def test_empty_context_is_the_prefix_token(hf_tok) -> None:
    ctx, cont = encode_pair(hf_tok, "", "Total")
    assert ctx == [hf_tok.bos_token_id] and cont == hf_tok.encode("Total", add_special_tokens=False)


class FakeEngine:
    """Token log-prob -0.5 per continuation token, greedy where the token id is even; counts calls."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok, self.calls = tokenizer, []

    def tokenizer(self) -> Any:
        return self.tok

    def max_model_len(self) -> int:
        return 16

    def loglikelihood(self, sequences):
        self.calls.append(sequences)
        return [[(-0.5, ids[j] % 2 == 0) for j in range(n, len(ids))] for ids, n in sequences]


class Counters:
    def __init__(self, records=None) -> None:
        self.records, self.reused, self.generated = dict(records or {}), 0, 0


def test_score_pairs_journals_and_reuses(hf_tok, tmp_path: Path) -> None:
    journal = GenerationJournal(tmp_path / "j.jsonl")
    eng, lm = FakeEngine(hf_tok), Counters()
    pairs = [("Total due:", " 12"), ("Total due:", " 13"), ("Total due:", " 12")]
    out = score_pairs(eng, journal, lm, pairs)
    n = [len(encode_pair(hf_tok, *p)[1]) for p in pairs]
    assert [r["logprob"] for r in out] == [-0.5 * k for k in n]
    assert [r["n_tokens"] for r in out] == n and lm.generated == 2 and lm.reused == 0  # the repeat is scored once
    ids = [i for i in encode_pair(hf_tok, *pairs[0])[1]]
    assert out[0]["is_greedy"] == all(i % 2 == 0 for i in ids)
    again = Counters(journal.load())  # a resumed run
    assert score_pairs(FakeEngine(hf_tok), journal, again, pairs) == out and again.reused == 3 and again.generated == 0
    keys = set(journal.load())
    assert keys == {loglikelihood_key("loglikelihood", *p) for p in pairs[:2]}
    assert request_key("Total due:", [" 12"], 1) not in keys  # never a generation's key


def test_long_requests_are_left_truncated_keeping_the_continuation(hf_tok) -> None:
    eng, lm = FakeEngine(hf_tok), Counters()
    context = "Total due: " + "1,234.50 " * 20
    score_pairs(eng, None, lm, [(context, "USD")])
    (ids, n_ctx), = eng.calls[0]
    ctx, cont = encode_pair(hf_tok, context, "USD")
    assert len(ids) == eng.max_model_len() - 1 and ids[n_ctx:] == cont and ids == (ctx + cont)[-len(ids):]


def test_rolling_windows_cover_every_token_once(hf_tok) -> None:
    eng, lm = FakeEngine(hf_tok), Counters()
    text = "Invoice number INV-0042, total due 1,234.50 USD, due date 2024-06-11, vendor Acme Tools Ltd."
    rec, = score_rolling(eng, None, lm, [text])
    n = len(hf_tok.encode(text))  # lm-eval HFLM tok_encode: the tokenizer's <s> included, scored after the prefix
    assert rec["n_tokens"] == n and rec["logprob"] == pytest.approx(-0.5 * n) and len(eng.calls) == 1
    assert len(eng.calls[0]) > 1 and all(len(ids) <= eng.max_model_len() - 1 for ids, _ in eng.calls[0])


def _mc_sample(doc_id: int, lls: list[float], gold: int) -> dict[str, Any]:
    choices = ["12", "13", "14"]
    acc = float(int(np.argmax(lls)) == gold)
    return {"doc_id": doc_id, "doc": {"q": doc_id}, "target": gold, "doc_hash": f"h{doc_id}", "filter": "none",
            "arguments": [["Q:", " " + c] for c in choices], "resps": [[[ll, False]] for ll in lls],
            "filtered_resps": [[ll, False] for ll in lls], "metrics": ["acc", "acc_norm"], "acc": acc,
            "acc_norm": acc}


def test_choice_item_holds_each_choices_logprob() -> None:
    from evalgate.worker.suite_eval import _choice_item, _is_loglikelihood

    s = _mc_sample(3, [-4.0, -1.5, -2.0], gold=2)
    assert _is_loglikelihood(s) and not _is_loglikelihood({"resps": [["text"]]})
    records = {loglikelihood_key("loglikelihood", "Q:", " 13"): {"n_tokens": 2}}
    item = _choice_item("mc", s, "acc", records)
    assert (item.output, item.target, item.score, item.prompt) == (" 13", " 14", 0.0, "Q:")
    assert [c["logprob"] for c in item.choices] == [-4.0, -1.5, -2.0]
    assert [c["n_tokens"] for c in item.choices] == [None, 2, None]
    assert ItemResult.from_dict(json.loads(json.dumps(item.to_dict()))) == item  # stored and read back


def test_mc_accuracy_takes_the_paired_binary_path() -> None:
    """acc / acc_norm items are 0/1: compare_tasks uses McNemar and Newcombe's interval, as for exact match."""
    from evalgate.compare.pairing import compare_tasks
    from evalgate.inputs.thresholds import load_thresholds
    from evalgate.worker.suite_eval import _choice_item

    rng = random.Random(0)
    base, cand = [], []
    for i in range(40):
        lls = [rng.uniform(-5, 0) for _ in range(3)]
        flip = [x + (3.0 if j == 0 and i % 7 == 0 else 0.0) for j, x in enumerate(lls)]
        base.append(_choice_item("mc", _mc_sample(i, lls, gold=1), "acc", {}))
        cand.append(_choice_item("mc", _mc_sample(i, flip, gold=1), "acc", {}))
    thr = load_thresholds(ROOT / "thresholds.yaml")
    (c,) = compare_tasks({"mc": TaskResult("mc", "s", "acc", tuple(base))},
                         {"mc": TaskResult("mc", "s", "acc", tuple(cand))}, thr.policy(None))
    b = np.array([i.score for i in base])
    k = np.array([i.score for i in cand])
    assert c.comparison.binary and not np.isnan(c.comparison.mcnemar_p)
    assert c.comparison.n_regressed == int(((b == 1) & (k == 0)).sum()) > 0
    assert c.comparison.n_improved == int(((b == 0) & (k == 1)).sum())


def test_report_shows_the_choices_escaped() -> None:
    from evalgate.report.render import render_html
    from evalgate.worker.suite_eval import _choice_item
    from runfixtures import document

    base, cand = [], []
    for i in range(20):  # item 0 regresses: its gold choice loses to another under the candidate
        s_b, s_c = _mc_sample(i, [-1.0, -2.0, -3.0], gold=0), _mc_sample(i, [-2.5 if i == 0 else -1.0, -2.0, -3.0], 0)
        for s in (s_b, s_c):
            s["arguments"][0][1] = " <b>12</b>"
        base.append(_choice_item("mc", s_b, "acc", {}))
        cand.append(_choice_item("mc", s_c, "acc", {}))
    doc = document({"mc": TaskResult("mc", "s", "acc", tuple(base))}, {"mc": TaskResult("mc", "s", "acc", tuple(cand))})
    flip, = doc["tasks"][0]["flipped"]
    assert flip["choices"][0] == {"continuation": " <b>12</b>", "baseline_logprob": -1.0, "candidate_logprob": -2.5,
                                  "gold": True}
    html = render_html(doc)
    assert "<b>12</b>" not in html and "&lt;b&gt;12&lt;/b&gt;" in html
    assert "\u22122.5000" in html and "\u22121.5000" in html  # the candidate's log-prob and its change, real minus


# ---------------------------------------------------------------- engine: the adapter on the embedded hybrid
MC_TASK = json_task("tiny_mc", "data/mc.json", "multiple_choice",
                    'doc_to_text: "{{prompt}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{gold}}"\n',
                    ("acc", "acc_norm"))


def mc_items(n: int = 6, seed: int = 7) -> list[dict[str, Any]]:
    """Deterministic invoice questions, three choices each (one right)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        total, number = f"{rng.randint(100, 9999):,}.{rng.randint(0, 99):02d}", f"INV-{rng.randint(1, 9999):04d}"
        prompt = f"Invoice number: {number}\nTotal due: {total} USD\nQuestion: what is the total due?\nAnswer:"
        choices = [total, number, f"{rng.randint(100, 9999):,}.00"]
        rng.shuffle(choices)
        out.append({"prompt": prompt, "choices": choices, "gold": choices.index(total)})
    return out


WORKER = r"""
import json, sys
from pathlib import Path
from evalgate.inputs.config import Sampling
from evalgate.worker.vllm_engine import VllmEngine
from evalgate.worker.lm_adapter import make_lm
from evalgate.worker.engine_args import prepare_process_env
from evalgate.worker.suite_eval import evaluate_suite as _evaluate_suite
from evalgate.results.store import GenerationJournal
from evalgate.suites.discovery import load_suite

suites, journal, text = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
prepare_process_env({})
from evalgate.models.hybrid import CHECKPOINT_DIR
sampling = Sampling(temperature=0.0, max_tokens=16, seed=0)
engine = VllmEngine(str(CHECKPOINT_DIR), {"dtype": "float32", "enforce_eager": True, "max_model_len": 2048,
                    "kv_cache_memory_bytes": 1 << 30, "enable_prefix_caching": False, "seed": 0}, sampling)
s = load_suite("mc", suites)
spec = {"name": s.name, "dir": str(s.path.parent), "tasks": list(s.tasks), "metrics": s.primary_metric,
        "builtins": s.builtins, "entries": [list(e) for e in s.entries]}
runs = []
for _ in range(2):  # the second adapter starts from the journal the first wrote: a resumed run
    lm = make_lm(engine, GenerationJournal(journal))
    tasks, _ = _evaluate_suite(lm, spec, None, sampling)
    runs.append({"items": [i.to_dict() for i in tasks["tiny_mc"].items], "reused": lm.reused, "generated": lm.generated})
from lm_eval.api.instance import Instance
rolling = make_lm(engine).loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
print("RESULT " + json.dumps({"runs": runs, "rolling": rolling[0]}))
"""


def _reference_logprob(model: Any, ids: list[int], n_ctx: int) -> float:
    """Sum of log p(ids[j] | ids[:j]) for j >= n_ctx under evalgate's plain-PyTorch hybrid (float32)."""
    import torch

    with torch.no_grad():
        logits, _ = model(torch.tensor([ids]))
        logp = torch.log_softmax(logits[0].double(), dim=-1)
    return float(sum(logp[j - 1, ids[j]] for j in range(n_ctx, len(ids))))


@pytest.mark.engine
def test_adapter_matches_an_independent_reference_and_resumes(tmp_path: Path, hf_tok) -> None:
    from evalgate.models.hybrid import CHECKPOINT_DIR
    from tools.hybrid.modeling import load_checkpoint

    d = tmp_path / "suites" / "mc"
    (d / "data").mkdir(parents=True)
    (d / "tiny_mc.yaml").write_text(MC_TASK)
    items = mc_items()
    (d / "data" / "mc.json").write_text(json.dumps(items))
    text = "Invoice number: INV-0042\nTotal due: 1,234.50 USD\nDue date: 2024-06-11"
    (tmp_path / "cwd").mkdir()
    proc = subprocess.run([sys.executable, "-c", WORKER, str(tmp_path / "suites"), str(tmp_path / "j.jsonl"), text],
                          cwd=tmp_path / "cwd", capture_output=True, text=True, timeout=900,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    first, second = out["runs"]
    assert first["generated"] == 3 * len(items) and first["reused"] == 0
    assert second["generated"] == 0 and second["reused"] == 3 * len(items) and second["items"] == first["items"]

    model = load_checkpoint(CHECKPOINT_DIR).eval()
    worst = 0.0
    for got, doc in zip(first["items"], items):
        ref = []
        for choice in doc["choices"]:  # lm-eval's request: context, target_delimiter " " + choice
            ctx, cont = encode_pair(hf_tok, doc["prompt"], " " + choice)
            ref.append(_reference_logprob(model, ctx + cont, len(ctx)))
        assert [c["continuation"] for c in got["choices"]] == [" " + c for c in doc["choices"]]
        worst = max(worst, *(abs(c["logprob"] - r) for c, r in zip(got["choices"], ref)))
        assert got["score"] == float(int(np.argmax(ref)) == doc["gold"])
        assert got["target"] == " " + doc["choices"][doc["gold"]]
    assert worst < 2e-3, f"largest |vLLM - reference| log-prob difference {worst:.2e} nats"
    ids = [hf_tok.bos_token_id] + hf_tok.encode(text)  # HFLM rolling: the prefix token, then the text's tokens
    assert out["rolling"] == pytest.approx(_reference_logprob(model, ids, 1), abs=2e-3)


@pytest.mark.engine
def test_a_multiple_choice_suite_is_gated_end_to_end(tmp_path: Path) -> None:
    """``evalgate run`` over a suite holding only a multiple-choice task: both sides score each choice, the
    comparison is the paired 0/1 one, and the per-item choices reach baseline.json/candidate.json and the report."""
    import os

    d = tmp_path / "suites" / "mc"
    (d / "data").mkdir(parents=True)
    (d / "tiny_mc.yaml").write_text(MC_TASK)
    items = mc_items()
    (d / "data" / "mc.json").write_text(json.dumps(items))
    out = tmp_path / "run"
    (tmp_path / "thresholds.yaml").write_text("alpha: 0.05\npower: 0.8\non_inconclusive: warn\n"
                                              "default: {margin: 5.0}\n")
    proc = subprocess.run([sys.executable, "-m", "evalgate", "run", "--config", "fp16-state", "--configs-dir",
                           str(ROOT / "configs"), "--suites-dir", str(tmp_path / "suites"), "--thresholds",
                           str(tmp_path / "thresholds.yaml"), "--out", str(out)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=1200,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "EVALGATE_HOME": str(tmp_path / "home")})
    verdict = json.loads((out / "verdict.json").read_text())
    (task,) = verdict["tasks"]
    assert (task["task"], task["metric"], task["n"], task["binary"]) == ("tiny_mc", "acc", len(items), True)
    sides = {}
    for side in ("baseline", "candidate"):
        got = json.loads((out / f"{side}.json").read_text())["tasks"]["tiny_mc"]["items"]
        assert [len(i["choices"]) for i in got] == [3] * len(items)
        assert [i["score"] for i in got] == [float(max(range(3), key=lambda k: i["choices"][k]["logprob"]) == doc["gold"])
                                             for i, doc in zip(got, items)]
        sides[side] = got
    # The verdict is knowable. A choice's log-prob comes from one prefill pass over context + choice; the FP16 SSM
    # state is only stored after it and read at decode, so both sides score every choice alike (teacher-forced
    # prefill moved <= 5.4e-11 nats on the hybrid, test_hybrid_gate) and pick the same choice: every paired
    # difference is 0, so McNemar has no discordant pair and no loss can be shown (no BLOCK), while 6 items put the
    # MDE floor at (z_0.95 + z_0.8)·100/6 = 41.4 points > the 5-point margin (no PASS): INCONCLUSIVE, exit 5.
    for b, c in zip(sides["baseline"], sides["candidate"]):
        assert [x["logprob"] for x in c["choices"]] == pytest.approx([x["logprob"] for x in b["choices"]], abs=1e-6)
        assert b["score"] == c["score"]
    assert (task["verdict"], task["discordant"], task["mde"] > task["margin"] == 5.0) == ("INCONCLUSIVE", 0, True)
    assert (proc.returncode, verdict["verdict"]) == (5, "INCONCLUSIVE"), proc.stderr[-3000:]
    assert "tiny_mc" in (out / "report.html").read_text()


def test_runner_evaluates_a_group_with_its_limit_through_lm_eval(tmp_path: Path, monkeypatch) -> None:
    """The worker's lm-eval call on a suite whose YAML is a group over a local multiple-choice task, with the suite
    YAML's limit, run from another directory (a stand-in LM answers: a choice's log-prob is minus its length)."""
    from lm_eval.api.model import LM

    from evalgate.inputs.config import Sampling
    from evalgate.suites.discovery import load_suite
    from evalgate.worker.suite_eval import evaluate_suite as _evaluate_suite

    d = tmp_path / "suites" / "mc"
    (d / "data").mkdir(parents=True)
    (d / "tiny_mc.yaml").write_text(MC_TASK)
    (d / "g.yaml").write_text("group: mc_group\nlimit: 4\ntask:\n  - task: tiny_mc\n    num_fewshot: 0\n")
    items = mc_items()
    (d / "data" / "mc.json").write_text(json.dumps(items))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")

    class ByLength(LM):
        records: dict = {}

        def loglikelihood(self, requests, disable_tqdm=False):
            return [(-float(len(r.args[1])), False) for r in requests]

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            raise AssertionError("not asked")

        def generate_until(self, requests, disable_tqdm=False):
            raise AssertionError("not asked")

    s = load_suite("mc", tmp_path / "suites")
    assert s.entries == (("mc_group", 4),)
    spec = {"name": s.name, "dir": str(s.path.parent), "tasks": list(s.tasks), "metrics": s.primary_metric,
            "builtins": s.builtins, "entries": [list(e) for e in s.entries]}
    tasks, keys = _evaluate_suite(ByLength(), spec, 10, Sampling())
    got = tasks["tiny_mc"].items
    assert len(got) == 4 and keys == {}  # the YAML's limit is tighter than --limit 10; no generation keys
    for item, doc in zip(got, items):
        shortest = min(range(3), key=lambda k: (len(doc["choices"][k]), k))
        assert item.output == " " + doc["choices"][shortest]
        assert item.score == float(shortest == doc["gold"])
        assert [c["logprob"] for c in item.choices] == [-float(len(c) + 1) for c in doc["choices"]]
