"""Chat-formatted training data for the embedded hybrid (issue 26 item 3, ``tools.hybrid.data.ChatMix``): the
training prompt is what evalgate's chat path gives the engine for the same item (lm-eval's ``fewshot_context`` with
``apply_chat_template`` and ``fewshot_as_multiturn``, through the adapter's ``apply_chat_template``, under
``configs/chat/baseline.yaml``), the reasoning segment is the generator's ground truth and fits the task's token
budget, the chat items are training items (never evaluation items), and ``--init`` / ``--chat`` fine-tuning is
deterministic on CPU."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalgate.models.hybrid import CHECKPOINT_DIR
from tools.hybrid import data as D

ROOT = Path(__file__).resolve().parents[2]
TASKS = {"docparse_fields": "docparse", "finance_tableqa": "finance"}


@pytest.fixture(scope="module")
def hf_tokenizer():
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(CHECKPOINT_DIR))


def _adapter(hf_tokenizer, thinking: bool):
    """evalgate's lm-eval adapter with ``configs/chat/baseline.yaml``'s chat section (thinking set as given), over an
    engine stand-in whose tokenizer is the packaged checkpoint's: only ``apply_chat_template`` is called."""
    from evalgate.inputs.config import load_config
    from evalgate.worker.lm_adapter import make_lm

    spec = load_config("chat/baseline", check_engine_args=False).chat.worker_spec()
    assert spec["template_kwargs"] == {"enable_thinking": False} and spec["fewshot_as_multiturn"] is True
    spec = spec | {"template_kwargs": {"enable_thinking": thinking}}
    return make_lm(SimpleNamespace(tokenizer=lambda: hf_tokenizer), chat=spec), spec


@pytest.mark.parametrize("thinking", [False, True])
def test_chat_training_prompt_is_what_evalgates_chat_path_renders(hf_tokenizer, thinking: bool) -> None:
    from lm_eval.tasks import get_task_dict

    from evalgate.suites.discovery import task_manager

    lm, spec = _adapter(hf_tokenizer, thinking)
    tasks = get_task_dict(list(TASKS), task_manager())
    for name, suite in TASKS.items():
        task = tasks[name]
        for doc in list(task.test_docs())[:3]:
            # what lm-eval's evaluator builds for the item under the config's chat section
            rendered = task.fewshot_context(doc, num_fewshot=task.config.num_fewshot,
                                            system_instruction=spec["system"], apply_chat_template=True,
                                            fewshot_as_multiturn=spec["fewshot_as_multiturn"],
                                            chat_template=lm.apply_chat_template)
            sample = D.chat_sample(suite, dict(doc), thinking)
            assert sample.prompt == rendered == D.chat_prompt(task.doc_to_text(doc), thinking)
            assert rendered.endswith("JSON:\nAssistant: <think>\n" if thinking and suite == "docparse" else
                                     "Answer:\nAssistant: <think>\n" if thinking else "\nAssistant: <think></think>")


def test_chat_answers_are_the_completion_answers_after_a_ground_truth_thought() -> None:
    dp, fin = D.docparse_items(D.CHAT_BLOCK_BASE)[0], D.finance_items(D.CHAT_BLOCK_BASE)[1]
    # thinking off: the completion answer, the turn ended by </s>
    for suite, it, plain in (("docparse", dp, D.docparse_sample(dp)), ("finance", fin, D.finance_sample(fin))):
        off, on = D.chat_sample(suite, it, False), D.chat_sample(suite, it, True)
        assert (off.answer, off.eos, off.source) == (plain.answer, True, f"chat-{suite}")
        assert on.answer == D.thought(suite, it) + "\n</think>" + plain.answer and on.eos
    # the thought is the generator's ground truth: docparse's kind and fields, finance's computation without result
    assert D.thought("docparse", dp) == f"{dp['kind']}; fields: " + ", ".join(dp["fields"])
    fmod = D.suite_module("finance")
    assert fin["work"] == D.thought("finance", fin) + " " + fmod._pretty(fin["target"])
    # read back as evalgate's chat path reads a thinking-on generation, the answer scores full marks
    from evalgate.inputs.chat import split_thought

    for suite, it, until in (("docparse", dp, ["\n\n", "\nDocument:", "\nFields:", "\nJSON:"]),
                             ("finance", fin, ["\n\n", "\nStatement:", "\nQuestion:", "\nAnswer:"])):
        s = D.chat_sample(suite, it, True)
        t = split_thought(s.prompt, s.answer, D.THINK_END, until)
        assert t.thought == D.thought(suite, it) + "\n</think>" and not t.truncated
        metric = "field_acc" if suite == "docparse" else "num_match"
        assert D.suite_module(suite).process_results(it, [t.answer])[metric] == 1.0


def test_chat_samples_are_half_thinking_deterministic_and_never_evaluation_items() -> None:
    mix = D.ChatMix()
    a = D.batch_samples(3, replace(D.Mix(), code=0), "", mix)
    assert a == D.batch_samples(3, replace(D.Mix(), code=0), "", mix)
    chat = [s for s in a if s.source.startswith("chat-")]
    assert a[-len(chat):] == chat == D.chat_samples(3, mix)
    for src, n in (("chat-docparse", mix.docparse), ("chat-finance", mix.finance)):
        of = [s for s in chat if s.source == src]
        assert len(of) == n and sum(D.THINK_END in s.answer for s in of) == n // 2
    assert [s for s in a if not s.source.startswith("chat-")] == D.batch_samples(3, replace(D.Mix(), code=0), "")
    # chat items come from their own blocks: no document shared with the completion samples of the first batches
    completion_docs = {s.prompt.rsplit("\n\n", 1)[-1] for k in range(20)
                       for s in D.batch_samples(k, replace(D.Mix(), code=0, coding=0, longgen=0), "")}
    keys, tails = D.eval_keys(), {D.suite_module(s).doc_to_text(it).rsplit("\n\n", 1)[-1]
                                  for s in ("docparse", "finance") for it in D.eval_items(s)}
    for k in range(20):
        for s in D.chat_samples(k, mix):
            user = s.prompt.removeprefix("User: ").rsplit("\nAssistant:", 1)[0]
            assert user.rsplit("\n\n", 1)[-1] not in completion_docs | tails
        for j in range(2):
            assert all(D.content_key("docparse", it) not in keys
                       for it in D.docparse_items(D.CHAT_BLOCK_BASE + 2 * k + j))
            assert all(D.content_key("finance", it) not in keys
                       for it in D.finance_items(D.CHAT_BLOCK_BASE + 2 * k + j))
    # and the chat seeds are far from every evaluation seed
    eval_seeds = {20240611, 20240612, D.suite_module("docparse").FEWSHOT_SEED, D.suite_module("finance").FEWSHOT_SEED}
    for base in (D.DOCPARSE_SEED_BASE, D.FINANCE_SEED_BASE):
        lo = base + D.CHAT_BLOCK_BASE
        assert not any(lo <= s < lo + 10_000_000 for s in eval_seeds)


def test_thinking_on_completions_fit_the_tasks_token_budgets() -> None:
    """With ``think_end`` no stop string reaches the engine: thought, ``</think>``, answer and ``</s>`` must fit the
    task's ``max_gen_toks`` (96 / 48) for every evaluation item, and a whole chat sample the 512-token training row."""
    pytest.importorskip("tokenizers")
    import yaml

    from tools.hybrid.tokenizer import load_tokenizer

    tok = load_tokenizer(CHECKPOINT_DIR)
    budget = {s: yaml.safe_load((ROOT / "suites" / s / f"{t}.yaml").read_text().replace("!function ", ""))
              ["generation_kwargs"]["max_gen_toks"] for t, s in TASKS.items()}
    assert budget == {"docparse": 96, "finance": 48}
    for suite in ("docparse", "finance"):
        worst = max(len(tok.encode(D.chat_sample(suite, it, True).answer, add_special_tokens=False).ids) + 1
                    for it in D.eval_items(suite))
        assert worst <= budget[suite], (suite, worst)
    rows = [len(tok.encode(s.prompt).ids) + len(tok.encode(s.answer, add_special_tokens=False).ids) + 1
            for k in range(10) for s in D.chat_samples(k, D.ChatMix())]
    assert max(rows) <= 512


def test_parse_chat_reads_fields_and_refuses_bad_parts_by_name() -> None:
    pytest.importorskip("torch")
    from tools.hybrid.train import parse_chat

    assert parse_chat("docparse=16, finance=32") == D.ChatMix(16, 32)
    assert parse_chat("finance=4") == D.ChatMix(docparse=0, finance=4)
    for bad, says in (("docprase=1", "unknown field 'docprase'"), ("finance", "expected key=value"),
                      ("finance=1,finance=2", "each key once"), ("finance=-1", "bad value '-1'")):
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            parse_chat(bad)


def test_fine_tune_from_the_checkpoint_with_chat_samples_is_deterministic_on_cpu() -> None:
    """``--init`` + ``--chat``: two CPU runs of the first step from the shipped checkpoint with chat samples only
    give the same loss; the chat turn's </s> carries weight; the step moves the weights."""
    torch = pytest.importorskip("torch")
    from tools.hybrid.modeling import load_checkpoint
    from tools.hybrid.tokenizer import EOS, load_tokenizer
    from tools.hybrid.train import REPRO, encode_groups, train

    torch.set_num_threads(2)
    args = replace(REPRO, steps=1, warmup=1, lr=3e-4, mix=replace(REPRO.mix, docparse=0, finance=0, finance_lookup=0,
                                                                  code=0, coding=0, longgen=0))
    chat = D.ChatMix(docparse=1, finance=1)
    tok = load_tokenizer(CHECKPOINT_DIR)
    (ids, w), = encode_groups(D.batch_samples(0, args.mix, "", chat), tok, args)
    eos = tok.token_to_id(EOS)
    for row, weights, s in zip(ids, w, D.chat_samples(0, chat)):
        last = int((weights > 0).nonzero().max())
        assert int(row[last]) == eos and int(row[last + 1]) == 0  # </s> ends the weighted answer, then padding
        assert tok.decode(row[weights > 0].tolist()[:-1]) == s.answer
    init = load_checkpoint(CHECKPOINT_DIR)
    before = {k: v.clone() for k, v in init.state_dict().items()}
    runs = [train(args, CHECKPOINT_DIR, "", "cpu", 0, log=lambda _: None, model=load_checkpoint(CHECKPOINT_DIR),
                  chat=chat) for _ in range(2)]
    (m1, r1), (_, r2) = runs
    assert r1 == [dict(r, elapsed_s=x["elapsed_s"]) for r, x in zip(r2, r1)] and len(r1) == 1
    assert 0 < r1[0]["loss"] < 10 and r1[0]["tokens"] == ids.numel()
    assert any(not torch.equal(before[k], v) for k, v in m1.state_dict().items())


def test_the_recipes_chat_answer_reads_a_generation_as_evalgate_does() -> None:
    """``train.chat_answer`` (the held-out check of a chat fine-tune) agrees with ``split_thought`` (what the chat
    configs score), thinking on and off, closed, truncated and never opened."""
    pytest.importorskip("torch")
    from evalgate.inputs.chat import split_thought
    from tools.hybrid.train import chat_answer

    stops = ["\n\n", "\nStatement:", "\nQuestion:", "\nAnswer:"]
    it = D.finance_items(D.CHAT_BLOCK_BASE)[0]
    outputs = (" 1,234\n\nStatement: x", "461 / 1,103 * 100 =\n</think> 41.8\n\nQuestion: </think> 7",
               "461 / 1,103 * 100 =\n</think> 41.8\n\nQuestion: 7", "461 / 1,103 * 100 = 41.8\n\n and on",
               "<think> a</think>  12\nAnswer: 3", "", "<think> never closed 12")
    for thinking in (False, True):
        prompt = D.chat_prompt(D.suite_module("finance").doc_to_text(it), thinking)
        for out in outputs:
            t = split_thought(prompt, out, D.THINK_END, stops)
            assert chat_answer(prompt, out, stops) == (t.answer, t.thought is not None and not t.truncated), out


def test_thought_refuses_a_worked_answer_that_does_not_end_with_its_target() -> None:
    """Data validation is a ValueError (an assert vanishes under python -O)."""
    from tools.hybrid.data import thought

    assert thought("finance", {"target": "54", "work": "1,204 - 1,150 = 54"}) == "1,204 - 1,150 ="
    with pytest.raises(ValueError, match=r"worked answer '1,204 - 1,150 = 55' does not end with its target '54'"):
        thought("finance", {"target": "54", "work": "1,204 - 1,150 = 55"})
