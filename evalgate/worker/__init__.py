"""The engine worker process (``python -m evalgate.worker SPEC``): starts ``vllm.LLM`` once, runs each suite
through lm-eval, attaches evidence, files results in the store, and measures throughput (and answers the replay
gate's recorded requests) on request.

Modules: ``engine_args``, ``item_evidence``, ``lm_adapter``, ``main``, ``replay``, ``replay_gate``, ``suite_eval``,
``throughput``, ``vllm_engine``.
"""
