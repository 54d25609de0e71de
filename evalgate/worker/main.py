"""The engine worker process: start the engine once, evaluate each suite through lm-eval, attach evidence, file
each finished suite in the store at once (a crash loses only the suite in flight), then optionally serve
speed-measurement commands. Started by the parent (``evalgate.evaluate.runner``) as ``python -m evalgate.worker SPEC``;
everything vLLM and lm-eval is imported here, in the worker, never in the parent.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from evalgate.engine.protocol import (
    CONFIG_ERROR_EXIT,
    CONFIG_ERROR_TAG,
    LIMITS_TAG,
    LOGPROBS_K,
    SUITE_ERROR_EXIT,
    SUITE_ERROR_TAG,
    versions,
)
from evalgate.errors import StoreError
from evalgate.results.store import GenerationJournal, ResultStore, tasks_to_json
from evalgate.suites import scoring
from evalgate.worker.item_evidence import decode_evidence, logit_evidence, suite_spec_decode
from evalgate.worker.lm_adapter import ChatTemplateFailure
from evalgate.worker.suite_eval import evaluate_suite
from evalgate.worker.suite_fault import SUITE_CODE_ERRORS, suite_fault


def main(spec_path: str) -> int:
    """Run the worker described by the spec at ``spec_path`` (JSON, written by ``evalgate.evaluate.runner``).

    Returns the process exit code: 0, or ``CONFIG_ERROR_EXIT`` when vLLM refuses an engine-arg value (its reason on a
    ``CONFIG_ERROR_TAG`` line), or ``SUITE_ERROR_EXIT`` when a suite's own code raised on an item (``suite_fault``'s
    report on a ``SUITE_ERROR_TAG`` line; the suites before it are stored). A ``check_only`` spec validates the values and prints the engine's limits on a
    ``LIMITS_TAG`` line without loading the model. Other failures raise (a non-zero exit the parent reports).
    """
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    from evalgate.inputs.config import Sampling
    from evalgate.worker.engine_args import prepare_process_env
    from evalgate.worker.lm_adapter import make_lm
    from evalgate.worker.vllm_engine import VllmEngine

    prepare_process_env({})
    sampling = Sampling(**spec["sampling"])
    t0 = time.monotonic()
    problem, limits = validate_engine_args(spec["model"], spec["engine_args"], images=bool(spec.get("check_images")),
                                           chat=spec.get("chat"))
    if problem:
        print(f"{CONFIG_ERROR_TAG} {problem}", flush=True)
        return CONFIG_ERROR_EXIT
    if spec.get("check_only"):
        if spec.get("replay"):  # the replay gate's requests counted by the model's tokenizer (no weights loaded)
            limits.update(_replay_counts(spec))
        print(f"{LIMITS_TAG} {json.dumps(limits)}", flush=True)
        return 0
    problem = resolve_content(spec["model"], spec["engine_args"], spec.get("chat"))
    if problem:  # the template loses every message's text: refused before the engine starts
        print(f"{CONFIG_ERROR_TAG} chat.template: {problem}", flush=True)
        return CONFIG_ERROR_EXIT
    engine = VllmEngine(spec["model"], spec["engine_args"], sampling, sleep_mode=bool(spec.get("sleep_mode")))
    start_s = time.monotonic() - t0
    effective = engine.effective_config()
    print(f"evalgate: engine started in {start_s:.1f} s; effective config: {json.dumps(effective)}", flush=True)
    store = ResultStore(Path(spec["store"]))

    # Coding completions start in the sandbox pool as they finish; the suite's scorer picks the results up.
    lm = make_lm(engine, GenerationJournal(Path(spec["journal"])), logprobs=LOGPROBS_K, on_answer=scoring.on_answer,
                 chat=spec.get("chat"))
    reference = None if spec.get("reference") is None else GenerationJournal(Path(spec["reference"]["journal"])).load()
    from evalgate.suites.discovery import content_hash

    try:
        for suite in spec["suites"]:
            # The store key carries the suite hash the parent saw; refuse to file results of edited files under it.
            uses = [Path(suite["dir"]) / u for u in suite.get("uses", [])]  # suites whose files its code reads
            if content_hash(Path(suite["dir"]) / suite["name"], uses) != suite["hash"]:
                raise StoreError(f"suite {suite['name']} changed on disk while evalgate was running; run again")
            try:
                _run_suite(engine, lm, suite, spec, sampling, store, effective, start_s, reference)
            except ChatTemplateFailure as exc:  # the template raised on an item's messages: the config's fault
                which = "the template" if (spec.get("chat") or {}).get("template") is not None else \
                    "the model's chat template"
                print(f"{CONFIG_ERROR_TAG} chat.template: {which} fails to render an item's messages of suite "
                      f"{suite['name']}: {exc}; fix the template or leave the suite out (generations already "
                      f"made stay journaled)", flush=True)
                return CONFIG_ERROR_EXIT
            except SUITE_CODE_ERRORS as exc:
                fault = suite_fault(exc, Path(suite["dir"]) / suite["name"], suite["name"])
                if fault is None:  # the engine's, lm-eval's or evalgate's own error: the worker fails (exit 3)
                    raise
                sys.stdout.write(f"{SUITE_ERROR_TAG} {json.dumps(fault)}\n")  # one write: the line stays whole
                sys.stdout.flush()
                return SUITE_ERROR_EXIT
    finally:
        scoring.shutdown()
    if spec.get("serve_commands"):
        # Random weights (load_format: dummy): token ids only; a shape's vocabulary exceeds its borrowed tokenizer's.
        detokenize = str(spec["engine_args"].get("load_format", "")).lower() != "dummy"
        _serve_commands(engine, lm, spec["reply_fd"], effective, spec.get("chat"), detokenize=detokenize)
    return 0


def _run_suite(engine: Any, lm: Any, suite: dict[str, Any], spec: dict[str, Any], sampling: Any, store: ResultStore,
               effective: dict[str, Any], start_s: float, reference: dict[str, Any] | None) -> None:
    """Evaluate one suite in the worker, attach its evidence, store it, and log where its time went."""
    before = engine.spec_decode_counters()
    reused, generated, engine_s, wait_s = lm.reused, lm.generated, lm.engine_s, scoring.wait_seconds()
    print(f"evalgate: suite {suite['name']} started ({len(suite['tasks'])} tasks)", flush=True)
    t1 = time.monotonic()
    tasks, keys = evaluate_suite(lm, suite, spec["limit"], sampling, spec.get("chat"))
    after = engine.spec_decode_counters()
    suite_s = time.monotonic() - t1
    gen_s = lm.engine_s - engine_s
    sandbox_s = scoring.wait_seconds() - wait_s  # the scorer waiting on (or running) sandboxed programs
    t2 = time.monotonic()
    if reference is not None:
        tasks = decode_evidence(reference, lm.records, tasks, keys)
    decode_s = time.monotonic() - t2
    tasks = logit_evidence(engine, lm.records, tasks, keys, spec, reference)
    score_s = time.monotonic() - t2
    store.put(suite["key"], {
        "suite": suite["name"], "effective": effective, "tasks": tasks_to_json(tasks),
        **suite_spec_decode(lm.records, keys.values(), before, after),
        "timings": {"engine_start": start_s, f"suite:{suite['name']}": suite_s,
                    f"generate:{suite['name']}": gen_s, f"sandbox_wait:{suite['name']}": sandbox_s,
                    f"logprobs:{suite['name']}": score_s},
        "generations": {"reused": lm.reused - reused, "generated": lm.generated - generated},
        **resolved_content(spec.get("chat"), lm),
    })
    items = sum(len(t.items) for t in tasks.values())
    print(f"evalgate: suite {suite['name']} done in {suite_s:.1f} s, {items} items "
          f"({lm.generated - generated} generated, "
          f"{lm.reused - reused} reused from the journal): engine submissions {gen_s:.1f} s, waiting on sandboxed "
          f"programs {sandbox_s:.1f} s, the rest of lm-eval {suite_s - gen_s - sandbox_s:.1f} s; evidence {score_s:.1f} s (decode-time {decode_s:.1f} s, "
          f"teacher-forced {score_s - decode_s:.1f} s)", flush=True)


def _serve_commands(engine: Any, lm: Any, reply_fd: int, effective: dict[str, Any],
                    chat: dict[str, Any] | None = None, *, detokenize: bool = True) -> None:
    """After the suites: say ``ready``, then answer measurement commands (stdin, one JSON line each) until stdin
    closes. A measurement that fails is reported (``{"event": "error"}``) and the worker keeps serving.
    ``detokenize``: passed to ``throughput.measure`` (False for random weights)."""
    from evalgate.worker import replay, throughput

    llm = engine.llm
    vc = llm.llm_engine.vllm_config
    replies = os.fdopen(reply_fd, "w", encoding="utf-8")

    def reply(msg: dict[str, Any]) -> None:
        replies.write(json.dumps(msg) + "\n")
        replies.flush()

    reply({"event": "ready", **throughput.device_info(), "versions": versions(), "effective": effective,
           "max_num_seqs": int(vc.scheduler_config.max_num_seqs), "max_model_len": int(vc.model_config.max_model_len),
           "sleep_mode": engine.sleep_mode(), **resolved_content(chat, lm)})
    cache: dict[tuple[Any, ...], list[Any]] = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        try:
            if cmd.get("sleep") or cmd.get("wake"):  # placement: alternate (evalgate.evaluate.placement.Alternation)
                t0 = time.monotonic()
                engine.sleep(int(cmd["sleep"])) if cmd.get("sleep") else engine.wake()
                what = "slept" if cmd.get("sleep") else "woke"
                print(f"evalgate: {what} in {time.monotonic() - t0:.2f} s", flush=True)
                reply({"event": what, "seconds": time.monotonic() - t0})
                continue
            if cmd.get("replay"):  # the replay gate: the chosen recorded requests answered greedily
                from evalgate.worker import replay_gate

                t0 = time.monotonic()
                outputs = replay_gate.generate(llm, cmd["replay"], LOGPROBS_K, chat)
                print(f"evalgate: replayed {len(outputs)} recorded requests ({time.monotonic() - t0:.1f} s)",
                      flush=True)
                reply({"event": "measured", "result": {"outputs": outputs}})
                continue
            if cmd.get("log"):  # traffic.from: the recorded requests (engine.replay), the warm-up their first ones
                requests, summary = _log_requests(llm, cmd["log"], cache)
                if cmd.get("warmup"):
                    requests = replay.warmup(requests, int(cmd["concurrency"]))
                t0 = time.monotonic()
                result = {**throughput.measure(llm, requests, int(cmd["concurrency"]), detokenize=detokenize),
                          "requests_summary": summary}
                print(f"evalgate: {cmd.get('label', 'measure')} (request log) at concurrency {cmd['concurrency']}: "
                      f"{_rate_words(result)} ({time.monotonic() - t0:.1f} s)", flush=True)
                reply({"event": "measured", "result": result})
                continue
            key = (cmd["input_len"], cmd["output_len"], cmd["num_prompts"], cmd["prompts"], cmd.get("seed", 0),
                   cmd.get("range_ratio", 0.0))
            if key not in cache:
                suite_ids = ([r["prompt_token_ids"] for _, r in sorted(lm.records.items()) if r.get("prompt_token_ids")]
                             if cmd["prompts"] == "suites" else None)
                cache[key] = throughput.sample_requests(llm, cmd["input_len"], cmd["output_len"], cmd["num_prompts"],
                                                        seed=cmd.get("seed", 0), suite_prompts=suite_ids,
                                                        range_ratio=float(cmd.get("range_ratio", 0.0)))
            t0 = time.monotonic()
            result = throughput.measure(llm, cache[key], int(cmd["concurrency"]), detokenize=detokenize)
            print(f"evalgate: {cmd.get('label', 'measure')} at concurrency {cmd['concurrency']}: "
                  f"{_rate_words(result)} ({time.monotonic() - t0:.1f} s)", flush=True)
            reply({"event": "measured", "result": result})
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the speed part (exit 3)
            import traceback

            traceback.print_exc()
            reply({"event": "error", "message": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"})


def resolved_content(chat: dict[str, Any] | None, lm: Any) -> dict[str, Any]:
    """``{"content": "string" | "parts" | None}`` for a hub model's own template (``chat["template"]`` None: the
    parent could not read it, so the form is decided here, :func:`resolve_content`, else by the adapter on first use),
    reported in the ready reply and filed with each suite's store entry: the parent keys nothing on it before the
    run, so it records it in the manifest's protocol and misses a stored entry without it or with another form
    (``evaluate.runner``). ``{}`` for any other config (a file or local template: decided by the parent, in the key)."""
    if not chat or not chat.get("chat") or chat.get("template") is not None:
        return {}
    return {"content": getattr(lm, "content", None) or chat.get("content")}


def _rate_words(result: dict[str, Any]) -> str:
    """A pass's rate for the engine log: "812.4 output tok/s", and with a steady-state window (``throughput.
    steady_window``) "... (steady window 3.1-9.8 s; whole pass 640.2)"."""
    window = result.get("window")
    words = f"{result['output_tok_s']:.1f} output tok/s"
    if window:
        words += (f" (steady window {window['start_s']:.1f}-{window['end_s']:.1f} s; "
                  f"whole pass {result['pass_output_tok_s']:.1f})")
    return words


def _log_requests(llm: Any, spec: dict[str, Any], cache: dict[Any, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The request log's ``SampleRequest``s and summary (``engine.replay.prepare``), made once per log and count."""
    from evalgate.worker import replay

    key = ("log", spec["path"], spec["sha256"], spec["num_prompts"], spec["output_len"])
    if key not in cache:
        cache[key] = replay.prepare(llm, spec)
    return cache[key]


def _replay_counts(spec: dict[str, Any]) -> dict[str, Any]:
    """``{"replay_prompt_tokens": [...]}`` of the replay's requests under the model's tokenizer (transformers'
    ``AutoTokenizer``, the ``tokenizer`` engine arg when set), or ``{"replay_error": reason}`` when they cannot be
    rendered; the parent judges them (``inputs.replay.check_lengths``)."""
    from evalgate.worker import replay_gate
    from evalgate.worker.replay import LogMismatch

    try:
        tok = _load_tokenizer(spec["model"], spec["engine_args"])
        ids = replay_gate.prompt_ids(tok, spec["replay"], spec.get("chat"))
        return {"replay_prompt_tokens": [len(x) for x in ids]}
    except LogMismatch as exc:
        return {"replay_error": str(exc)}


def validate_engine_args(model: str, engine_args: dict[str, Any], *, images: bool = False,
                         chat: dict[str, Any] | None = None) -> tuple[str | None, dict[str, Any]]:
    """vLLM's own validation of the engine-arg values, without loading the model: ``(None, limits)`` if they are
    accepted (``limits``: the resolved ``max_num_seqs`` and ``max_model_len``; with ``images``, also
    ``image_input``: :func:`image_input` of the resolved model config, and with a chat protocol (``chat``: the
    worker's chat spec, ``chat.ChatSpec.worker_spec``) on a model that reads images, ``chat_images``:
    :func:`chat_image_input`), else ``(reason, {})``.

    ``EngineArgs(...).create_engine_config()`` builds and checks the whole engine config (types, choices,
    limits against the model's config) in about a second; a wrong value is then a config error (exit 2) with
    vLLM's reason, not an engine crash (exit 3) after the model has loaded.
    """
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    try:
        # LLM_CLASS: the defaults vllm.LLM applies (max_num_seqs depends on the usage context and the device).
        vc = EngineArgs(model=model, **engine_args).create_engine_config(usage_context=UsageContext.LLM_CLASS)
    except Exception as exc:  # noqa: BLE001 - any refusal of the values (ValidationError, AttributeError on a
        # string where a mapping belongs, a model name vLLM cannot resolve) is a config problem: no engine ran yet
        first = " ".join(str(exc).split()).split(" For further information visit")[0]
        return f"{type(exc).__name__}: {first[:400]}", {}
    limits: dict[str, Any] = {"max_num_seqs": int(vc.scheduler_config.max_num_seqs),
                              "max_model_len": int(vc.model_config.max_model_len)}
    if images:
        limits["image_input"] = image_input(vc.model_config)
        if chat and chat.get("chat") and limits["image_input"].get("reads_images") is True:
            limits["chat_images"] = chat_image_input(vc.model_config, model, engine_args, chat)
    return None, limits


def _load_tokenizer(model: str, engine_args: dict[str, Any]) -> Any:
    """The tokenizer the engine will load, as vLLM picks it: the ``tokenizer`` engine arg when set, else the model's
    (transformers' ``AutoTokenizer``, with the engine args' ``trust_remote_code``). Raises whatever loading raises."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(engine_args.get("tokenizer") or model,
                                         trust_remote_code=bool(engine_args.get("trust_remote_code")))


def _model_template(model: str, engine_args: dict[str, Any]) -> str | None:
    """The chat template of the tokenizer the engine will load (:func:`_load_tokenizer`), None when it has none.
    Raises whatever loading the tokenizer raises."""
    text = getattr(_load_tokenizer(model, engine_args), "chat_template", None)
    return text if isinstance(text, str) and text.strip() else None


def resolve_content(model: str, engine_args: dict[str, Any], chat: dict[str, Any] | None) -> str | None:
    """Decide, before the engine starts, how a chat config's text messages go to a template the parent could not
    read (``chat["content"]`` None: a hub model's own template): :func:`evalgate.inputs.chat.content_form` of the
    model tokenizer's template, written into ``chat["content"]``.

    Args:
        model: the model the engine loads. engine_args: its engine args (``tokenizer``, ``trust_remote_code``).
        chat: the worker's chat spec (``chat.ChatSpec.worker_spec``), updated in place; None: completion.
    Returns:
        None, or why the template cannot be used (it renders a message's text neither from a plain string nor from
        content parts). A tokenizer that does not load here leaves ``content`` None (the adapter decides from the
        engine's tokenizer on first use).
    """
    if not chat or not chat.get("chat") or chat.get("content") is not None:
        return None
    from evalgate.inputs.chat import content_form

    text = chat.get("template")
    if text is None:
        try:
            text = _model_template(model, engine_args)
        except Exception:  # noqa: BLE001 - not this check's to report: the engine's tokenizer load says it
            return None
        if text is None:
            return None  # the adapter refuses a tokenizer without a template
    chat["content"] = content_form(text, chat.get("template_kwargs"))
    if chat["content"] is None:
        return (f"the chat template of {model} loses a message's text: it is in the rendered prompt neither when "
                "the message's content is a plain string nor when it is content parts, so every item would be "
                "scored without its question")
    return None


def chat_image_input(model_config: Any, model: str, engine_args: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any]:
    """Whether the chat template puts an image where the model reads it: the model's image placeholder as vLLM
    names it (the model class's ``get_placeholder_str("image", 1)``, what vLLM's own chat renderer inserts, e.g.
    ``<image>`` for Idefics3) and the probe of ``chat.image_placement_problem`` on the template the engine will use
    (``chat["template"]``, else the model tokenizer's own, read as the engine's tokenizer reads it).

    Returns:
        ``{"places_images": True | False | None, "placeholder": str or None, "why": str}``; None when it cannot be
        told (vLLM names no placeholder, the tokenizer does not load, it has no template), which the parent refuses
        as it refuses False (fail closed).
    """
    from evalgate.inputs.chat import image_placement_problem

    out: dict[str, Any] = {"places_images": None, "placeholder": None}
    try:
        from vllm.model_executor.model_loader import get_model_cls

        placeholder = get_model_cls(model_config).get_placeholder_str("image", 1)
        out["placeholder"] = placeholder
        template = chat.get("template")
        if template is None:
            template = _model_template(model, engine_args)
            if template is None:
                return {**out, "why": f"the tokenizer of {engine_args.get('tokenizer') or model} has no chat "
                                      "template"}
    except Exception as exc:  # noqa: BLE001 - an API this vLLM lacks, a tokenizer that fails: cannot tell, say why
        return {**out, "why": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    problem = image_placement_problem(template, placeholder, chat.get("template_kwargs"))
    if problem is None:
        return {**out, "places_images": True, "why": f"the template writes {placeholder!r} for an image part"}
    return {**out, "places_images": False if placeholder else None, "why": problem}


def image_input(model_config: Any) -> dict[str, Any]:
    """Whether vLLM takes images for a model, decided the way vLLM itself decides it, never by the model's name: its
    model registry marks the architecture multimodal (``ModelConfig.is_multimodal_model``: the model class's
    ``supports_multimodal``, read from the checkpoint's ``config.json`` architectures), the model's multimodal
    processor lists ``image`` among its modalities (``MULTIMODAL_REGISTRY.get_processing_info(...)
    .supported_mm_limits``), and the engine args neither set ``language_model_only`` nor limit images per prompt to
    0 (``limit_mm_per_prompt``).

    Returns:
        ``{"reads_images": True | False | None, "architecture": str, "why": str, "field": str}``: None when it
        cannot be told (an attribute this vLLM lacks, a processor that fails; ``why`` says which), which the parent
        refuses as it refuses False (fail closed). ``field``: the config key that decides it (``model``,
        ``engine_args.limit_mm_per_prompt`` or ``engine_args.language_model_only``). With True, also ``limit``
        (the most images one prompt may carry) and ``limit_field`` (the key that sets it): :func:`images_per_prompt`,
        which the parent holds each item's images against (``modality.check_image_counts``).
    """
    arch = ", ".join(getattr(model_config, "architectures", None) or []) or "?"
    out: dict[str, Any] = {"reads_images": None, "architecture": arch, "field": "model"}
    try:
        if not model_config.is_multimodal_model:
            return {**out, "reads_images": False, "why": f"vLLM's model registry lists {arch} as text-only (not "
                                                         "multimodal)"}
        from vllm.multimodal import MULTIMODAL_REGISTRY

        modalities = sorted(MULTIMODAL_REGISTRY.get_processing_info(model_config).supported_mm_limits)
        if "image" not in modalities:
            return {**out, "reads_images": False, "why": f"{arch} takes {', '.join(modalities) or 'no media'} in "
                                                         "vLLM, not images"}
        mm = model_config.multimodal_config
        if getattr(mm, "language_model_only", False):
            return {**out, "reads_images": False, "field": "engine_args.language_model_only",
                    "why": f"language_model_only is set: vLLM runs {arch} as a text model"}
        limit = mm.get_limit_per_prompt("image")
        if limit == 0:
            return {**out, "reads_images": False, "field": "engine_args.limit_mm_per_prompt",
                    "why": f"limit_mm_per_prompt allows 0 images per prompt on {arch}"}
        most, decided_by = images_per_prompt(MULTIMODAL_REGISTRY.get_processing_info(model_config), limit)
    except Exception as exc:  # noqa: BLE001 - an API this vLLM lacks, a processor that fails: cannot tell, say why
        return {**out, "why": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    return {**out, "reads_images": True, "why": f"{arch} takes images in vLLM (up to {most} per prompt)",
            "limit": most, "limit_field": decided_by}


def images_per_prompt(info: Any, user_limit: int) -> tuple[int, str]:
    """The most images vLLM takes in one prompt for a model, as its processor enforces it
    (``BaseProcessingInfo.validate_num_items``: the smaller of what the model's processor supports,
    ``supported_mm_limits["image"]`` (None: no bound of its own), and what the engine args allow,
    ``MultiModalConfig.get_limit_per_prompt("image")``: ``limit_mm_per_prompt``, 999 when unset in vLLM 0.32), and
    the config field that decides it. Feature-detected: a vLLM whose processing info has ``allowed_mm_limits``
    is asked that; else the two are combined here as that version does.

    Args:
        info: ``MULTIMODAL_REGISTRY.get_processing_info(model_config)``. user_limit: the engine args' limit.
    Returns:
        ``(most, field)``: ``field`` is ``engine_args.limit_mm_per_prompt`` when the engine args' limit is the
        binding one, ``model`` when the model's processor takes fewer.
    Raises:
        Whatever the processor raises (the caller reports it as "cannot tell").
    """
    supported = info.supported_mm_limits.get("image")
    allowed = getattr(info, "allowed_mm_limits", None)
    most = int(allowed["image"]) if isinstance(allowed, dict) and "image" in allowed else int(user_limit)
    if supported is not None:
        most = min(most, int(supported))
    field = "model" if supported is not None and int(supported) < int(user_limit) else "engine_args.limit_mm_per_prompt"
    return most, field


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
