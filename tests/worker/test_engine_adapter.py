"""The lm-eval adapter and the engine's streaming loop, with fake engines (no vLLM): one submission per
(stop strings, token budget) group, each generation journaled the step it finishes in, scoring hooks as they come."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from lm_eval.api.instance import Instance

from evalgate.inputs.config import Sampling
from evalgate.results.store import GenerationJournal
from evalgate.worker.lm_adapter import make_lm, request_key
from evalgate.worker.vllm_engine import Generation, VllmEngine

CODE_STOP = ["\ndef "]
QA_STOP = ["\n\n"]


def _req(task: str, doc_id: int, prompt: str, stop: list[str], max_toks: int) -> Instance:
    return Instance(request_type="generate_until", doc={"id": doc_id}, arguments=(prompt, {"until": stop, "max_gen_toks": max_toks}),
                    idx=0, metadata=(task, doc_id, 1))


def _answer(prompt: str) -> str:
    return f"<{prompt[::-1]}>"


class FakeEngine:
    """Answers each submission in steps of ``step`` requests, last prompt first (so completion order differs from
    submission order), recording every submission and, before each step, what the journal already holds."""

    def __init__(self, journal: GenerationJournal | None = None, step: int = 7, fail_after: int | None = None) -> None:
        self.sampling = Sampling(max_tokens=64)
        self.submissions: list[tuple[list[str], int, list[str]]] = []
        self.journal, self.step, self.fail_after = journal, step, fail_after
        self.journaled_before_step: list[int] = []
        self.yielded = 0

    def generate_stream(self, prompts: list[str], *, max_tokens: int, stop: list[str], logprobs: int = 0) -> Any:
        self.submissions.append((list(prompts), max_tokens, list(stop)))
        order = list(reversed(range(len(prompts))))
        for start in range(0, len(order), self.step):
            if self.journal is not None:
                self.journaled_before_step.append(len(self.journal.load()))
            if self.fail_after is not None and self.yielded >= self.fail_after:
                raise KeyboardInterrupt  # the run is killed with requests in flight
            done = [(i, Generation(_answer(prompts[i]), 3, "stop", [1, 2], [3, 4, 5])) for i in order[start:start + self.step]]
            self.yielded += len(done)
            yield done


def _requests() -> list[Instance]:
    code = [_req("coding", i, f"def f{i}():", CODE_STOP, 32) for i in range(70)]
    qa = [_req("qa", i, f"Q{i}?", QA_STOP, 16) for i in range(40)]
    return code + qa + [_req("qa", 0, "Q0?", QA_STOP, 16)]  # a repeated request is generated once


def test_one_submission_per_stop_and_budget_group(tmp_path: Path) -> None:
    engine = FakeEngine()
    lm = make_lm(engine, GenerationJournal(tmp_path / "j.jsonl"))
    reqs = _requests()
    texts = lm.generate_until(reqs)
    assert texts == [_answer(r.args[0]) for r in reqs]
    assert [(len(p), m, s) for p, m, s in engine.submissions] == [(70, 32, CODE_STOP), (40, 16, QA_STOP)]
    assert (lm.generated, lm.reused) == (110, 0)


def test_each_generation_is_journaled_the_step_it_finishes(tmp_path: Path) -> None:
    journal = GenerationJournal(tmp_path / "j.jsonl")
    engine = FakeEngine(journal, step=7)
    make_lm(engine, journal).generate_until(_requests())
    # Before every engine step the journal holds everything finished so far: 0, 7, ..., 63 in the first
    # submission (70 prompts), then 70, 77, ... in the second.
    first = list(range(0, 70, 7))
    second = [70 + n for n in range(0, 40, 7)]
    assert engine.journaled_before_step == first + second
    assert len(journal.load()) == 110


def test_a_killed_run_keeps_every_finished_generation(tmp_path: Path) -> None:
    journal = GenerationJournal(tmp_path / "j.jsonl")
    reqs = _requests()
    with pytest.raises(KeyboardInterrupt):
        make_lm(FakeEngine(journal, step=7, fail_after=21), journal).generate_until(reqs)
    kept = journal.load()
    assert len(kept) == 21  # three steps of seven finished before the kill; the rest were in flight

    engine = FakeEngine(journal)
    lm = make_lm(engine, journal)
    assert lm.generate_until(reqs) == [_answer(r.args[0]) for r in reqs]
    assert lm.reused == 21 and lm.generated == 110 - 21
    resubmitted = {p for prompts, _, _ in engine.submissions for p in prompts}
    assert not resubmitted & {r.args[0] for r in reqs[:70][-21:]}  # the 21 finished ones (the last prompts first)
    assert [len(p) for p, _, _ in engine.submissions] == [49, 40]


def test_on_answer_sees_every_request_as_its_text_arrives(tmp_path: Path) -> None:
    journal = GenerationJournal(tmp_path / "j.jsonl")
    reqs = _requests()
    first = reqs[:5]
    journal.append({request_key(r.args[0], CODE_STOP, 32): vars(Generation(_answer(r.args[0]), 3, "stop", [], []))
                    for r in first})
    seen: list[tuple[str, int, str, int]] = []
    engine = FakeEngine(journal, step=10)
    lm = make_lm(engine, journal,
                 on_answer=lambda req, text: seen.append((req.task_name, req.doc_id, text, len(engine.submissions))))
    lm.generate_until(reqs)
    assert sorted((t, d, x) for t, d, x, _ in seen) == sorted((r.task_name, r.doc_id, _answer(r.args[0])) for r in reqs)
    # The journaled ones are handed over before the first submission; the first coding result before the QA group.
    assert [n for _, _, _, n in seen[:5]] == [0] * 5
    assert seen[5][:2] == ("coding", 69) and seen[5][3] == 1


class _FakeCore:
    """vLLM's LLMEngine as the streaming loop uses it: ids "<n>-<random>", outputs named by "<n>"."""

    def __init__(self, finish_order: list[list[int]], foreign: bool = False) -> None:
        self.finish_order, self.foreign = finish_order, foreign
        self.unfinished: set[int] = set()
        self.aborted: list[str] = []

    def has_unfinished_requests(self) -> bool:
        return bool(self.unfinished)

    def step(self) -> list[Any]:
        batch = self.finish_order.pop(0)
        outs = [SimpleNamespace(request_id=str(n), finished=True, prompt_token_ids=[n],
                                outputs=[SimpleNamespace(text=f"t{n}", token_ids=[n, n], finish_reason="stop",
                                                         logprobs=None)]) for n in batch]
        if self.foreign:
            outs.append(SimpleNamespace(request_id="999", finished=True))
        outs.append(SimpleNamespace(request_id="x", finished=False))  # a request still running
        self.unfinished -= set(batch)
        return outs

    def abort_request(self, ids: list[str], internal: bool = False) -> None:
        assert internal
        self.aborted += ids


def _engine(core: _FakeCore, first_id: int = 10) -> VllmEngine:
    engine = VllmEngine.__new__(VllmEngine)

    def enqueue(prompts: list[str], params: Any, use_tqdm: bool = True) -> list[str]:
        ids = list(range(first_id, first_id + len(prompts)))
        core.unfinished |= set(ids)
        return [f"{n}-ab12cd34" for n in ids]

    engine.llm = SimpleNamespace(enqueue=enqueue, llm_engine=core)
    engine._params = lambda max_tokens, stop, logprobs: None  # type: ignore[method-assign]
    return engine


def test_stream_maps_vllm_request_ids_back_to_prompts() -> None:
    core = _FakeCore([[12], [10, 13], [11]])
    steps = list(_engine(core).generate_stream(["a", "b", "c", "d"], max_tokens=4, stop=[]))
    assert [[(i, g.text) for i, g in step] for step in steps] == [[(2, "t12")], [(0, "t10"), (3, "t13")], [(1, "t11")]]
    assert core.aborted == []


def test_stream_aborts_what_is_in_flight_when_closed_early() -> None:
    core = _FakeCore([[10], [11], [12]])
    stream = _engine(core).generate_stream(["a", "b", "c"], max_tokens=4, stop=[])
    next(stream)
    stream.close()
    assert sorted(core.aborted) == ["11-ab12cd34", "12-ab12cd34"]


def test_stream_refuses_outputs_of_requests_it_did_not_submit() -> None:
    core = _FakeCore([[10]], foreign=True)
    with pytest.raises(RuntimeError, match="not one of ours"):
        list(_engine(core).generate_stream(["a"], max_tokens=4, stop=[]))


def test_an_error_while_journaling_closes_the_stream_at_once(tmp_path: Path) -> None:
    closed: list[bool] = []

    class Engine(FakeEngine):
        def generate_stream(self, prompts: list[str], **kw: Any) -> Any:
            try:
                yield from super().generate_stream(prompts, **kw)
            finally:
                closed.append(True)  # where VllmEngine aborts the requests in flight

    class BrokenJournal(GenerationJournal):
        def append(self, records: dict) -> None:
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full") as err:
        make_lm(Engine(), BrokenJournal(tmp_path / "j.jsonl")).generate_until(_requests())
    assert closed == [True] and err.value is not None  # closed while the traceback still holds the frame
