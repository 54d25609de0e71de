"""The bad-input corpus (``tests/bad_inputs/``) through the real command line.

Every malformed config, thresholds file, suite, command line and stored result must give exactly
one line on stderr naming the file and the field (where there is one), exit 2 (usage/config) or 3
(a corrupt stored result), no traceback, and — for ``run`` — fail before any engine or model work
starts: ``evalgate.evaluate.runner``'s entry points are replaced by tripwires, and the run directory must
not get a ``logs/`` folder.

Layout of the corpus::

    good/         valid configs (baseline, cand), thresholds and two suites: the defaults of every case
    configs/      malformed candidate configs (and the parents some of them extend)
    thresholds/   malformed thresholds files
    suites/<case>/  malformed suites directories
    results/      corrupt store entries and run files (evalgate.results.store)
    stored_runs/<case>/  corrupt run directories for ``evalgate report`` and ``evalgate compare`` (exit 3)

A case replaces one default of ``evalgate run`` (or runs ``evalgate list``). ``test_every_corpus_file_is_used``
keeps the corpus and the table in step.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import evalgate.evaluate.runner
from evalgate import cli
from evalgate.errors import ExitCode, StoreError
from evalgate.results.store import ResultStore, read_json, tasks_from_json

B = Path(__file__).resolve().parents[1] / "bad_inputs"
G = B / "good"
REPO = Path(__file__).resolve().parents[2]
STORE_KEY = "a" * 64  # the key the entries under results/ were written for


@dataclass(frozen=True)
class Case:
    """One bad input.

    Attributes:
        id: test id.
        opts: options replacing the defaults of ``evalgate run``: a value starting with ``@`` is a
            path under tests/bad_inputs/, a list is several values, None drops the option.
        file: the corpus file (relative to tests/bad_inputs/) the message must name, if any.
        field: the field (or option) the message must name, if any.
        fragment: more text the message must contain.
        command: ``run``, ``list``, ``report`` or ``compare`` (the last two take ``opts["RUN"]``, a run directory).
        uses: further corpus files the case reads (parents of a config, a suite's files).
        extra: more arguments, appended.
        code: the exit code: 2 (usage/config), 3 for a corrupt stored result.
    """

    id: str
    opts: dict[str, object]
    file: str | None
    field: str | None
    fragment: str | None = None
    command: str = "run"
    uses: tuple[str, ...] = ()
    extra: tuple[str, ...] = field(default=())
    code: int = ExitCode.USAGE


def _cfg(name: str, fld: str | None, fragment: str | None = None, *, file: str | None = "", uses=()) -> Case:
    return Case(f"config-{name}", {"--config": f"@configs/{name}.yaml"},
                f"configs/{name}.yaml" if file == "" else file, fld, fragment, uses=uses)


def _thr(name: str, fld: str | None, fragment: str | None = None) -> Case:
    return Case(f"thresholds-{name}", {"--thresholds": f"@thresholds/{name}.yaml"}, f"thresholds/{name}.yaml", fld,
                fragment)


def _suite(case: str, file: str | None, fld: str | None, fragment: str | None = None, suites=None) -> Case:
    opts: dict[str, object] = {"--suites-dir": f"@suites/{case}"}
    if suites:
        opts["--suites"] = suites
    return Case(f"suites-{case}", opts, file and f"suites/{case}/{file}", fld, fragment, uses=(f"suites/{case}",))


def _log(name: str, fld: str | None, fragment: str | None = None, *, file: str | None = "") -> Case:
    """A bad request log (``traffic.from``, evalgate.inputs.requestlog) behind ``thresholds/traffic-from-<name>.yaml``."""
    log = f"requestlogs/{name}.jsonl" if file == "" else file
    return Case(f"requestlog-{name}", {"--thresholds": f"@thresholds/traffic-from-{name}.yaml"}, log, fld, fragment)


PARENT = ("configs/ok-parent.yaml",)
CASES: list[Case] = [
    # ------------------------------------------------------------------ configs: YAML itself
    _cfg("syntax-unclosed-flow", None, "YAML syntax error: line 3"),
    _cfg("syntax-bad-indent", None, "YAML syntax error"),
    _cfg("syntax-tab-indent", None, "YAML syntax error"),
    _cfg("syntax-unclosed-quote", None, "YAML syntax error"),
    _cfg("syntax-multi-document", None, "YAML"),
    _cfg("duplicate-key", "engine_args", "duplicate key"),
    _cfg("duplicate-nested-key", "engine_args", "duplicate key 'dtype'"),
    _cfg("unhashable-key", None, "YAML"),
    _cfg("python-tag", None, "YAML"),
    _cfg("nul-bytes", None, "YAML"),
    _cfg("non-utf8", None, "not UTF-8"),
    _cfg("utf16", None, "not UTF-8"),
    _cfg("binary-junk", None, None),
    _cfg("empty", None, "empty"),
    _cfg("comments-only", None, "empty"),
    _cfg("top-list", None, "mapping"),
    _cfg("top-scalar", None, "mapping"),
    # ------------------------------------------------------------------ configs: keys and types
    _cfg("unknown-top-key", "engine_arg", "did you mean 'engine_args'", uses=PARENT),
    _cfg("unknown-top-key-extend", "extend", "did you mean 'extends'"),
    _cfg("null-key", "None", "unknown key", uses=PARENT),
    _cfg("alias-bomb", "a", "unknown key", uses=PARENT),
    _cfg("alias-bomb-deep", "engine_args.speculative_config", "aliases are expanded", uses=PARENT),
    _cfg("alias-recursive", "engine_args.speculative_config.nested", "recursive YAML alias", uses=PARENT),
    _cfg("alias-recursive-top", "[0]", "recursive YAML alias"),
    _cfg("engine-args-list", "engine_args", "mapping", uses=PARENT),
    _cfg("engine-args-string", "engine_args", "mapping", uses=PARENT),
    _cfg("env-string", "env", "mapping", uses=PARENT),
    _cfg("env-key-equals", "env.A=B", "environment variable", uses=PARENT),
    _cfg("env-value-mapping", "env.X", "string or number", uses=PARENT),
    _cfg("env-value-nul", "env.OMP_NUM_THREADS", "NUL byte", uses=PARENT),
    _cfg("sampling-list", "sampling", "mapping", uses=PARENT),
    _cfg("sampling-unknown-key", "sampling.temprature", "did you mean 'temperature'", uses=PARENT),
    _cfg("sampling-temperature-string", "sampling.temperature", "number", uses=PARENT),
    _cfg("sampling-temperature-negative", "sampling.temperature", ">= 0", uses=PARENT),
    _cfg("sampling-temperature-nan", "sampling.temperature", "number", uses=PARENT),
    _cfg("sampling-max-tokens-zero", "sampling.max_tokens", ">= 1", uses=PARENT),
    _cfg("sampling-max-tokens-float", "sampling.max_tokens", "integer", uses=PARENT),
    _cfg("sampling-max-tokens-inf", "sampling.max_tokens", "integer", uses=PARENT),
    _cfg("sampling-top-p-above-one", "sampling.top_p", "(0, 1]", uses=PARENT),
    _cfg("sampling-top-p-zero", "sampling.top_p", "(0, 1]", uses=PARENT),
    _cfg("sampling-seed-bool", "sampling.seed", "integer", uses=PARENT),
    _cfg("model-missing", "model", "required"),
    _cfg("model-int", "model", "required", uses=PARENT),
    _cfg("model-empty", "model", "required", uses=PARENT),
    _cfg("model-list", "model", "required", uses=PARENT),
    _cfg("model-path-missing", "model", "path does not exist: /nonexistent/evalgate-model", uses=PARENT),
    _cfg("model-embedded-unknown", "model", "unknown embedded model 'embedded:gemma-9000'; the embedded models are "
         "embedded:nemotron-h-tiny, embedded:nemotron-h-tiny-chat, embedded:gemma-3-270m, embedded:qwen3-next-tiny", uses=PARENT),
    _cfg("nested-deep", "description[0]", "values nested too deeply (more than 64 levels)", uses=PARENT),
    _cfg("nested-bomb", None, "values nested too deeply (more than 64 levels)"),
    _cfg("expect-invalid", "expect", "lossless", uses=PARENT),
    _cfg("placement-sideways", "placement", "must be one of auto, together, alternate", uses=PARENT),
    _cfg("suites-empty", "suites", "must be a non-empty list of suite names", uses=PARENT),
    _cfg("suites-unknown", "suites", "no suite named 'nosuch'", uses=PARENT),
    # --suites wins over the config's suites, but the config's are checked all the same
    Case("config-suites-unknown-with-suites-flag", {"--config": "@configs/suites-unknown.yaml", "--suites": ["s1"]},
         "configs/suites-unknown.yaml", "suites", "no suite named 'nosuch'", uses=PARENT),
    # alternate needs vLLM's sleep mode: this CPU host (no GPU device node) has none
    _cfg("placement-alternate-cpu", "placement", "sleep mode", uses=PARENT),
    _cfg("description-list", "description", "string", uses=PARENT),
    # random weights (load_format: dummy, the config-only shapes): speed only, never quality suites
    _cfg("load-format-dummy", "engine_args.load_format", "quality suites on random weights would be meaningless",
         uses=PARENT),
    Case("score-load-format-dummy", {"--config": "@configs/load-format-dummy.yaml"}, "configs/load-format-dummy.yaml",
         "engine_args.load_format", "use evalgate run --speed-only", command="score", uses=PARENT),
    _cfg("shape-without-dummy", "engine_args.load_format", "is a config-only model (no weights", uses=PARENT),
    Case("config-dummy-spec-decode", {"--config": "@configs/dummy-spec-decode.yaml"}, "configs/dummy-spec-decode.yaml",
         "engine_args.speculative_config", "on random weights (dummy) rejects every draft", uses=PARENT,
         extra=("--speed-only",)),
    _cfg("engine-arg-not-identifier", "engine_args.max model len", "identifier", uses=PARENT),
    _cfg("engine-arg-int-key", "engine_args.1", "identifier", uses=PARENT),
    # ------------------------------------------------------------------ configs: extends and baseline
    _cfg("extends-int", "extends", "config name"),
    _cfg("extends-empty", "extends", "config name"),
    _cfg("extends-list", "extends", "config name"),
    _cfg("extends-missing", "extends", "'no-such-parent' not found"),
    _cfg("extends-dir", "extends", "directory", uses=("configs/parent-dir.yaml",)),
    _cfg("extends-bad-parent", None, "YAML syntax error", file="configs/bad-parent-syntax.yaml"),
    _cfg("cycle-self", "extends", "cycle"),
    Case("config-cycle2", {"--config": "@configs/cycle2/a.yaml"}, "configs/cycle2/a.yaml", "extends", "cycle",
         uses=("configs/cycle2",)),
    Case("config-cycle3", {"--config": "@configs/cycle3/x.yaml"}, "configs/cycle3/x.yaml", "extends",
         "x.yaml -> y.yaml -> z.yaml -> x.yaml", uses=("configs/cycle3",)),
    _cfg("baseline-int", "baseline", "config name", uses=PARENT),
    _cfg("baseline-missing", "baseline", "'no-such-baseline' not found", uses=PARENT),
    _cfg("baseline-invalid", "sampling.max_tokens", ">= 1", file="configs/bad-base.yaml", uses=PARENT),
    _cfg("no-baseline", "baseline", "no baseline"),
    Case("config-dir", {"--config": "@configs/dir.yaml"}, "configs/dir.yaml", None, "directory"),
    Case("config-plain-dir", {"--config": "@configs/plain-dir"}, "configs/plain-dir", None, "directory"),
    Case("config-unknown-name", {"--config": "cnad"}, None, "--config", "did you mean 'cand'"),
    Case("config-missing-path", {"--config": "@configs/no-such-file.yaml"}, None, "--config", "not found"),
    # ------------------------------------------------------------------ configs: vLLM engine-arg names
    _cfg("engine-arg-reserved-model", "engine_args.model", "top-level 'model'", uses=PARENT),
    _cfg("engine-arg-unknown", "engine_args.mamba_ssm_cache_dtyp", "did you mean 'mamba_ssm_cache_dtype'",
         uses=PARENT),
    _cfg("engine-arg-unknown-nonsense", "engine_args.zzz_not_an_engine_arg", "unknown vLLM engine arg", uses=PARENT),
    _cfg("engine-arg-unknown-in-parent", "engine_args.enforce_eagr", "did you mean 'enforce_eager'",
         file="configs/bad-engine-parent.yaml"),
    # ------------------------------------------------------------------ configs: chat
    _cfg("chat-list", "chat", "mapping", uses=PARENT),
    _cfg("chat-unknown-key", "chat.tempalte", "did you mean 'template'", uses=PARENT),
    _cfg("chat-model-no-template", "chat.template", "has no chat template", uses=PARENT),
    _cfg("chat-template-missing", "chat.template", "template file not found", uses=PARENT),
    _cfg("chat-template-bad-jinja", "chat.template", "is not valid Jinja: line 2",
         uses=(*PARENT, "configs/chat-bad.jinja")),
    _cfg("chat-kwargs-list", "chat.template_kwargs", "must be a mapping", uses=(*PARENT, "configs/chat-good.jinja")),
    _cfg("chat-think-end-empty", "chat.think_end", "non-empty", uses=(*PARENT, "configs/chat-good.jinja")),
    _cfg("chat-system-without-template", "chat.system", "needs a chat template", uses=PARENT),
    _cfg("chat-kwarg-unread", "chat.template_kwargs.enable_thinking", "never reads 'enable_thinking'; it reads: messages",
         uses=(*PARENT, "configs/chat-good.jinja")),
    _cfg("chat-system-refused", "chat.system", "refuses a system message (TemplateError: System role not supported)",
         uses=(*PARENT, "configs/chat-no-system.jinja")),
    _cfg("chat-system-dropped", "chat.system", "drops the system message",
         uses=(*PARENT, "configs/chat-drops-system.jinja")),
    _cfg("chat-protocol-differs", "chat", 'mode: "completion" vs "chat"', uses=(*PARENT, "configs/chat-good.jinja")),
    # ------------------------------------------------------------------ thresholds
    _thr("syntax", None, "invalid YAML at line 3"),
    _thr("duplicate-key", None, "duplicate key 'alpha'"),
    _thr("empty", None, "empty"),
    _thr("top-list", None, "mapping"),
    _thr("margin-negative", "default.margin", ">= 0"),
    _thr("margin-string", "default.margin", "'two'"),
    _thr("margin-inf", "default.margin", "finite"),
    _thr("margin-nan", "default.margin", "finite"),
    _thr("margin-over-100", "default.margin", "<= 100"),
    _thr("margin-bool", "default.margin", "boolean"),
    _thr("margin-null", "default.margin", "null"),
    _thr("margin-percent-string", "default.margin", "'2%'"),
    _thr("suite-margin-negative", "suites.s1.margin", ">= 0"),
    _thr("task-margin-string", "tasks.s1_task.margin", "'lots'"),
    _thr("alpha-zero", "alpha", "0 < alpha < 0.5"),
    _thr("alpha-half", "alpha", "0 < alpha < 0.5"),
    _thr("alpha-above-one", "alpha", "0 < alpha < 0.5"),
    _thr("alpha-negative", "alpha", "0 < alpha < 0.5"),
    _thr("alpha-string", "alpha", "'five percent'"),
    _thr("suite-alpha-out-of-range", "suites.s1.alpha", "0 < alpha < 0.5"),
    _thr("alpha-missing", "alpha", "required"),
    _thr("default-missing", "default", "required"),
    _thr("default-not-mapping", "default", "mapping"),
    _thr("default-margin-missing", "default.margin", "required"),
    _thr("unknown-top-key", "alpah", "did you mean 'alpha'"),
    _thr("unknown-level-key", "suites.s1.margn", "did you mean 'margin'"),
    _thr("unknown-suite", "suites.nosuch", "unknown suite"),
    _thr("unknown-task", "tasks.nosuch_task", "unknown task"),
    _thr("suites-not-mapping", "suites", "mapping"),
    _thr("suite-entry-empty", "suites.s1", "empty"),
    _thr("bootstrap-too-few", "bootstrap_resamples", "1000 <= bootstrap_resamples"),
    _thr("bootstrap-too-many", "bootstrap_resamples", "<= 1_000_000, got 10000000000000"),
    _thr("bootstrap-string", "bootstrap_resamples", "integer"),
    _thr("seed-negative", "seed", ">= 0"),
    _thr("non-utf8", None, "UTF-8"),
    _thr("power-above-one", "power", "0.5 <= power < 1"),
    _thr("power-below-half", "power", "0.5 <= power < 1"),
    _thr("on-inconclusive-invalid", "on_inconclusive", "'shrug'"),
    _thr("lossless-share-above-one", "lossless.min_identical_share", "0 <= share <= 1"),
    _thr("lossless-unknown-key", "lossless.min_identical", "did you mean 'min_identical_share'"),
    _thr("lossless-near-tie-negative", "lossless.near_tie_logprob", "nats >= 0, got -0.1"),
    _thr("lossless-max-kl-string", "lossless.max_kl_mean", "nats >= 0, got 'small'"),
    _thr("configs-unknown-config", "configs.no-such-config", "unknown config"),
    _thr("configs-unknown-suite", "configs.cand.suites.nosuch", "unknown suite"),
    _thr("configs-margin-negative", "configs.cand.margin", ">= 0"),
    # latency objectives (serve mode)
    _thr("slo-negative", "speed.max_ttft_p99_ms", "milliseconds > 0"),
    _thr("slo-zero", "speed.max_tpot_p99_ms", "milliseconds > 0"),
    _thr("slo-string", "speed.max_ttft_p99_ms", "milliseconds > 0"),
    _thr("slo-unknown-percentile", "speed.max_ttft_p95_ms", "did you mean"),
    _thr("configs-slo-nan", "configs.cand.max_itl_p99_ms", "milliseconds > 0"),
    _thr("slo-offline-mode", "speed.max_ttft_p99_ms", "measured in serve mode only"),
    _thr("nested-bomb", None, "values nested too deeply (more than 64 levels)"),
    _thr("traffic-num-prompts-huge", "traffic.num_prompts", "<= 100_000, got 1000000000000"),
    _thr("traffic-repeats-huge", "traffic.repeats", "<= 100, got 1000000000000"),
    _thr("configs-traffic-repeats-huge", "configs.cand.traffic.repeats", "<= 100, got 101"),
    # ------------------------------------------------------------------ traffic.precision: Stein's two-stage rule
    _thr("traffic-precision-zero", "traffic.precision", "0 < precision < 1 (the interval's half-width as a share of "
                                                        "the speed-up: 0.02 = \u00b12 %), got 0"),
    _thr("traffic-precision-one", "traffic.precision", "0 < precision < 1"),
    _thr("traffic-precision-negative", "traffic.precision", "0 < precision < 1"),
    _thr("traffic-precision-string", "traffic.precision", "0 < precision < 1"),
    _thr("configs-traffic-precision-over-one", "configs.cand.traffic.precision", "0 < precision < 1"),
    _thr("traffic-precision-repeats-one", "traffic.repeats", "must be >= 2 with precision (Stein's first stage needs a "
                                                             "spread), got 1"),
    _thr("traffic-max-repeats-below-repeats", "traffic.max_repeats", "must be >= repeats (5), the first stage's "
                                                                     "pairs, got 4"),
    _thr("configs-traffic-max-repeats-below-repeats", "configs.cand.traffic.max_repeats", "must be >= repeats (4)"),
    _thr("traffic-max-repeats-without-precision", "traffic.max_repeats", "applies only with it"),
    _thr("traffic-max-seconds-zero", "traffic.max_seconds", "finite number of seconds > 0, got 0"),
    _thr("traffic-max-seconds-negative", "traffic.max_seconds", "finite number of seconds > 0, got -60"),
    _thr("traffic-precision-serve", "traffic.precision", "offline mode only"),
    # ------------------------------------------------------------------ traffic.range_ratio: vLLM's length spread
    _thr("traffic-range-ratio-one", "traffic.range_ratio", "must be a number with 0 <= range_ratio < 1 (0.5: lengths "
                                                           "drawn from half to one and a half times"),
    _thr("traffic-range-ratio-negative", "traffic.range_ratio", "0 <= range_ratio < 1"),
    _thr("traffic-range-ratio-suites", "traffic.range_ratio", "varies vLLM's random prompts only, got prompts: suites"),
    _thr("traffic-range-ratio-shortest-prompt", "traffic.range_ratio", "at input_len 16 the shortest prompt vLLM would "
                                                                        "draw"),
    Case("thresholds-traffic-from-with-range-ratio", {"--thresholds": "@thresholds/traffic-from-with-range-ratio.yaml"},
         "thresholds/traffic-from-with-range-ratio.yaml", "traffic.range_ratio", "does not apply with traffic.from",
         uses=("requestlogs/ok.jsonl",)),
    # ------------------------------------------------------------------ economics (issue 27, item 4)
    _thr("economics-price-negative", "economics.gpu_hour_usd", "must be a finite number > 0 (US dollars), got -2.5"),
    _thr("economics-price-zero", "economics.gpu_hour_usd", "must be a finite number > 0 (US dollars), got 0"),
    _thr("economics-price-string", "economics.gpu_hour_usd", "got '2.50 USD' (a string)"),
    _thr("economics-api-negative", "economics.api_usd_per_mtok", "must be a finite number > 0 (US dollars), got -1"),
    _thr("economics-gpus-zero", "economics.gpus", "must be an integer >= 1 (GPUs one engine occupies), got 0"),
    _thr("economics-unknown-key", "economics.gpu_hour_eur", "did you mean 'gpu_hour_usd'"),
    _thr("economics-price-missing", "economics.gpu_hour_usd", "gpu_hour_usd is required in an economics section"),
    _thr("configs-economics-gpus-zero", "configs.cand.economics.gpus", "integer >= 1 (GPUs one engine occupies), got 0"),
    _thr("configs-economics-price-missing", "configs.cand.economics.gpu_hour_usd",
         "gpu_hour_usd is required (no top-level economics section sets it)"),
    Case("thresholds-dir", {"--thresholds": "@thresholds/dir.yaml"}, "thresholds/dir.yaml", None, "directory"),
    Case("thresholds-missing", {"--thresholds": "@thresholds/no-such-file.yaml"}, "thresholds/no-such-file.yaml",
         None, "not found"),
    # ------------------------------------------------------------------ traffic.from: a request log (issue 27)
    _log("not-json", "line 2", "not valid JSON"),
    _log("not-object", "line 2", "a record must be a JSON object, got a string"),
    _log("no-prompt", "line 1", "the record has neither messages, prompt nor conversations (its keys: max_tokens, model)"),
    _log("messages-not-list", "line 1: messages", "non-empty list of {role, content} messages"),
    _log("message-no-role", "line 1: messages[0].role", "non-empty string, got null"),
    _log("message-content-int", "line 1: messages[0].content", "a string or a list of text parts, got an integer"),
    _log("message-image-part", "line 1: messages[0].content[0]", "only text parts"),
    _log("max-tokens-zero", "line 3: body.max_tokens", "an integer >= 1 (output tokens), got 0"),
    _log("max-tokens-float", "line 1: max_tokens", "an integer >= 1 (output tokens), got 12.5"),
    _log("max-tokens-string", "line 1: max_completion_tokens", "got \"16\""),
    _log("output-tokens-negative", "line 1: output_tokens", "got -3"),
    _log("empty", None, "holds no requests"),
    _log("body-string-bad", "line 1: body", "a body string must hold a JSON object"),
    _log("prompt-list", "line 1: prompt", "one prompt string per record"),
    _log("sharegpt-turn-no-value", "line 1: conversations[0].value", "must be a string"),
    _log("array-record-bad", "record 2: conversations", "non-empty list of {from, value} turns, got an empty list"),
    _log("timestamp-bad", "line 2: timestamp", "not a time: seconds since the epoch or an ISO 8601 string"),
    _log("no-end-time", "line 1: end_time", "needs each request's end (end_time or duration_s)"),
    _log("end-before-start", "line 1: end_time", "ends 1 s before it starts"),
    _log("non-utf8", "line 2", "not valid UTF-8: byte 0xe9"),
    _log("no-such-file", None, "request log not found"),
    _log("a-directory", None, "is a directory", file="requestlogs/a-directory"),
    _thr("traffic-from-log-without-from", "traffic.concurrency", "concurrency: from-log needs a request log"),
    Case("thresholds-traffic-from-with-input-len", {"--thresholds": "@thresholds/traffic-from-with-input-len.yaml"},
         "thresholds/traffic-from-with-input-len.yaml", "traffic.input_len", "does not apply with traffic.from",
         uses=("requestlogs/ok.jsonl",)),
    Case("thresholds-traffic-from-num-prompts-over", {"--thresholds": "@thresholds/traffic-from-num-prompts-over.yaml"},
         "thresholds/traffic-from-num-prompts-over.yaml", "traffic.num_prompts", "asks for 10 requests",
         uses=("requestlogs/ok.jsonl",)),
    Case("thresholds-traffic-from-serve-mode", {"--thresholds": "@thresholds/traffic-from-serve-mode.yaml"},
         "thresholds/traffic-from-serve-mode.yaml", "traffic.from", "offline mode only",
         uses=("requestlogs/ok.jsonl",)),
    Case("thresholds-configs-traffic-from-no-prompt", {"--thresholds": "@thresholds/configs-traffic-from-no-prompt.yaml"},
         "requestlogs/no-prompt.jsonl", "line 1", "neither messages, prompt nor conversations"),
    # ------------------------------------------------------------------ the replay gate's log (replay.from)
    _thr("replay-from-missing", "replay.from", "request log not found"),
    _thr("replay-from-absent", "replay.from", "replay.from is required"),
    Case("thresholds-replay-no-prompt", {"--thresholds": "@thresholds/replay-no-prompt.yaml"},
         "requestlogs/no-prompt.jsonl", "line 1", "neither messages, prompt nor conversations"),
    Case("thresholds-replay-only-structured-empty", {"--thresholds": "@thresholds/replay-only-structured-empty.yaml"},
         "thresholds/replay-only-structured-empty.yaml", "replay.only", "nothing is left to replay",
         uses=("requestlogs/ok.jsonl",)),
    Case("thresholds-replay-response-format-bad", {"--thresholds": "@thresholds/replay-response-format-bad.yaml"},
         "requestlogs/response-format-bad.jsonl", "line 2: response_format.json_schema.schema",
         "not a valid JSON Schema"),
    # ------------------------------------------------------------------ suites
    _suite("no-task", "s1/t.yaml", "task", "task"),
    _suite("no-metric-list", "s1/t.yaml", "metric_list", "metric_list"),
    _suite("empty-metric-list", "s1/t.yaml", "metric_list", "metric_list"),
    _suite("metric-not-mapping", "s1/t.yaml", "metric_list[0].metric", "metric"),
    _suite("metric-empty-name", "s1/t.yaml", "metric_list[0].metric", "metric"),
    _suite("task-int", "s1/t.yaml", "task", "task"),
    _suite("syntax-error", "s1/t.yaml", None, "YAML"),
    _suite("non-utf8", "s1/t.yaml", None, "UTF-8"),
    _suite("top-list", "s1/t.yaml", None, "mapping"),
    _suite("empty-yaml", "s1/t.yaml", None, "empty"),
    _suite("duplicate-task", "s1/b.yaml", "task", "defined twice"),
    _suite("duplicate-key", "s1/t.yaml", "task", "duplicate key 'task' (line 6)"),
    _suite("primary-lower-is-better", "s1/t.yaml", "metric_list[0].higher_is_better", "assumes higher is better"),
    _suite("id-field-int", "s1/t.yaml", "metadata.evalgate.id_field", "got 5"),
    _suite("id-field-empty", "s1/t.yaml", "metadata.evalgate.id_field", "a non-empty string"),
    _suite("modality-unknown", "s1/t.yaml", "metadata.evalgate.modality", "must be 'text' or 'image', got 'video'"),
    _suite("modality-image-without-images", "s1/t.yaml", "metadata.evalgate.modality", "sets no doc_to_image"),
    _suite("modality-text-with-images", "s1/t.yaml", "metadata.evalgate.modality",
           "is 'text', but the task sets doc_to_image"),
    _suite("uses-suites-unknown", "s1/t.yaml", "metadata.evalgate.uses_suites", "'nosuch' is not another suite"),
    # s1's utils.py loads s2's module (suite_module) undeclared: s2's files would not key s1's stored results
    _suite("uses-suites-undeclared", "s1/t.yaml", "metadata.evalgate.uses_suites",
           "utils.py line 3 loads a module of suite 's2' (suite_module), but no task of the suite lists 's2'"),
    # an image task scored by log-likelihood: refused at load, never inside the engine
    _suite("image-multiple-choice", "s1/t.yaml", "output_type",
           "is 'multiple_choice', but the task sets doc_to_image", suites=["s1"]),
    _suite("only-image-suites", None, None, "no text suite here, only image suites (s1)"),
    _suite("primary-aggregation-median", "s1/t.yaml", "metric_list[0].aggregation", "must be 'mean'"),
    _suite("include-self", "s1/t.yaml", "include", "include cycle: t.yaml -> t.yaml"),
    _suite("include-cycle", "s1/b.yaml", "include", "include cycle: a.yaml -> b.yaml -> a.yaml"),
    _suite("include-not-a-name", "s1/t.yaml", "include", "must be a YAML file name"),
    _suite("function-missing-file", "s1/t.yaml", "process_results", "no scoring.py beside the YAML"),
    _suite("function-missing-name", "s1/t.yaml", "process_results",
           "utils.py defines no 'proces_results'; did you mean 'process_results'?"),
    _suite("function-no-module", "s1/t.yaml", "process_results", "must be module.function"),
    _suite("duplicate-task-across-suites", None, "task", "'shared_task' is defined by suites 's1' and 's2'"),
    _suite("empty-suite", "empty", None, "no task YAML", suites=["empty"]),
    _suite("suite-is-file", "s2", None, "not a folder", suites=["s2"]),
    _suite("yaml-is-dir", "s1", None, "no task YAML", suites=["s1"]),
    _suite("no-suites", None, None, "no suites"),
    Case("suites-dir-is-a-file", {"--suites-dir": "@suites/file-not-dir"}, "suites/file-not-dir", None,
         "not a directory"),
    Case("suites-dir-missing", {"--suites-dir": "@suites/no-such-dir"}, "suites/no-such-dir", None, "does not exist"),
    Case("suites-unknown-name", {"--suites": ["s1", "docparse"]}, None, None, "no suite named 'docparse'"),
    Case("suites-close-name", {"--suites": ["s11"]}, None, None, "did you mean"),
    Case("suites-path-name", {"--suites": ["../good"]}, None, None, "invalid suite name"),
    Case("suites-empty-name", {"--suites": [""]}, None, None, "invalid suite name"),
    Case("suites-named-twice", {"--suites": ["s1", "s2", "s1"]}, None, "--suites", "suite 's1' is named more than once"),
    # ------------------------------------------------------------------ suites: the pre-flight (evalgate.evaluate.preflight)
    # lm-eval builds each task, item 0's requests are built and scored with dummy outputs, in a subprocess.
    _suite("preflight-data-empty", "s1/t.yaml", "dataset_kwargs.data_files", "task t1: data file <path> is empty"),
    _suite("preflight-data-blank", "s1/t.yaml", "dataset_kwargs.data_files", "task t1: reading its data"),
    _suite("preflight-data-is-dir", "s1/t.yaml", "dataset_kwargs.data_files", "is a directory, not a data file"),
    _suite("preflight-data-corrupt", "s1/t.yaml", "dataset_kwargs.data_files",
           "task t1: data file <path> line 1: not valid JSON"),
    _suite("preflight-data-wrong-field", "s1/t.yaml", "doc_to_text",
           "task t1: building the task: the template uses a variable the item lacks: 'q' is undefined; item 0 has "
           "the fields question, answer"),
    _suite("preflight-metric-unknown", "s1/t.yaml", "metric_list[0].metric",
           "task t1: 'exact_matc' is not a metric lm-eval knows; did you mean 'exact_match'?"),
    _suite("preflight-no-doc-to-text", "s1/t.yaml", "doc_to_text", "task t1: missing"),
    _suite("preflight-output-type-unknown", "s1/t.yaml", "output_type",
           "task t1: 'generate' is not an lm-eval output type"),
    _suite("preflight-template-undefined", "s1/t.yaml", "doc_to_text", "task t1: building the task: the template "
           "uses a variable the item lacks: 'frm' is undefined"),
    _suite("preflight-target-bare-word", "s1/t.yaml", "doc_to_target", "task t1: 'answer' is no field of the data"),
    _suite("preflight-scorer-keyerror", "s1/t.yaml", "process_results",
           "task t1: scoring an empty output for item 0: KeyError: 'answer' (utils.py line 3)"),
    _suite("preflight-score-out-of-range", "s1/t.yaml", "process_results",
           "task t1: scoring the target as output on item 0 gave exact_match = 100.0"),
    _suite("preflight-scorer-no-primary", "s1/t.yaml", "process_results",
           "gave no 'exact_match', the primary metric (got: em)"),
    # ------------------------------------------------------------------ command line
    Case("limit-zero", {"--limit": "0"}, None, "--limit", ">= 1"),
    Case("limit-negative", {"--limit": "-3"}, None, "--limit", ">= 1"),
    Case("limit-not-int", {"--limit": "abc"}, None, "--limit", "invalid int value"),
    Case("limit-float", {"--limit": "1.5"}, None, "--limit", "invalid int value"),
    Case("concurrency-zero", {"--concurrency": "0"}, None, "--concurrency", "distinct integers >= 1"),
    Case("concurrency-not-int", {"--concurrency": "0,x"}, None, "--concurrency", "integers separated by commas"),
    Case("concurrency-repeated", {"--concurrency": "4,4"}, None, "--concurrency", "distinct"),
    Case("concurrency-empty-element", {"--concurrency": ",4"}, None, "--concurrency", "integers separated by commas"),
    Case("concurrency-trailing-comma", {"--concurrency": "1,16,"}, None, "--concurrency",
         "integers separated by commas"),
    Case("placement-flag-sideways", {"--placement": "sideways"}, None, "--placement", "invalid choice"),
    Case("placement-flag-alternate-cpu", {"--placement": "alternate"}, None, "--placement", "CPU"),
    Case("repeats-zero", {"--repeats": "0"}, None, "--repeats", ">= 1"),
    Case("repeats-over-100", {"--repeats": "101"}, None, "--repeats", "must be <= 100, got 101"),
    Case("precision-zero", {"--precision": "0"}, None, "--precision", "0 < precision < 1"),
    Case("precision-one", {"--precision": "1"}, None, "--precision", "0 < precision < 1"),
    Case("precision-nan", {"--precision": "nan"}, None, "--precision", "0 < precision < 1"),
    Case("max-repeats-below-repeats", {"--precision": "0.02", "--repeats": "6", "--max-repeats": "5"}, None,
         "--max-repeats", "must be >= repeats (6)"),
    Case("max-repeats-one", {"--max-repeats": "1"}, None, "--max-repeats", "2 <= max_repeats <= 100, got 1"),
    Case("max-seconds-zero", {"--max-seconds": "0"}, None, "--max-seconds", "seconds > 0, got 0"),
    Case("precision-repeats-one", {"--precision": "0.02", "--repeats": "1"}, None, "--repeats",
         "must be >= 2 with precision"),
    Case("speed-and-no-speed", {}, None, "--no-speed", "contradicts", extra=("--speed", "--no-speed")),
    Case("speed-only-and-no-speed", {}, None, "--speed-only", "contradicts --no-speed",
         extra=("--speed-only", "--no-speed")),
    Case("speed-only-with-suites", {"--suites": "s1"}, None, "--suites", "--speed-only runs no quality suites",
         extra=("--speed-only",)),
    Case("thresholds-traffic-prompts-suites-speed-only",
         {"--thresholds": "@thresholds/traffic-prompts-suites-speed-only.yaml"},
         "thresholds/traffic-prompts-suites-speed-only.yaml", "traffic.prompts", "--speed-only runs no suite",
         extra=("--speed-only",)),
    Case("timeout-zero", {"--timeout": "0"}, None, "--timeout", "> 0"),
    Case("timeout-negative", {"--timeout": "-5"}, None, "--timeout", "> 0"),
    Case("timeout-nan", {"--timeout": "nan"}, None, "--timeout", "> 0"),
    Case("timeout-inf", {"--timeout": "inf"}, None, "--timeout", "> 0"),
    Case("out-is-a-file", {"--out": "@good/configs/baseline.yaml"}, "good/configs/baseline.yaml", "--out", "not a directory"),
    Case("out-under-a-file", {"--out": "@good/configs/baseline.yaml/run"}, "good/configs/baseline.yaml/run", "--out",
         "cannot write the run directory here: Not a directory"),
    Case("out-name-too-long", {"--out": "/tmp/" + "o" * 300 + "/run"}, None, "--out",
         "cannot write the run directory here: File name too long"),
    Case("suites-dir-empty", {"--suites-dir": ""}, None, "--suites-dir", "must not be empty"),
    Case("thresholds-empty", {"--thresholds": ""}, None, "--thresholds", "must not be empty"),
    Case("configs-dir-empty", {"--configs-dir": ""}, None, "--configs-dir", "must not be empty"),
    Case("unknown-option", {}, None, "--limt", "unrecognized arguments", extra=("--limt", "2")),
    Case("config-option-missing", {"--config": None}, None, "--config", "required"),
    Case("suites-option-without-value", {"--suites": []}, None, "--suites", "expected at least one"),
    Case("no-command", {}, None, "command", "required", command=""),
    Case("unknown-command", {}, None, "command", "invalid choice", command="rn"),
    Case("model-without-subcommand", {}, None, "model_command", "required", command="model"),
    # ------------------------------------------------------------------ evalgate plan
    Case("plan-margin-zero", {"--margin": "0"}, None, "--margin", "> 0", command="plan"),
    Case("plan-margin-nan", {"--margin": "nan"}, None, "--margin", "> 0", command="plan"),
    Case("plan-margin-over-100", {"--margin": "250"}, None, "--margin", "<= 100", command="plan"),
    Case("plan-bad-thresholds", {"--thresholds": "@thresholds/alpha-zero.yaml"}, "thresholds/alpha-zero.yaml", "alpha",
         "0 < alpha < 0.5", command="plan"),
    Case("plan-pilot-truncated", {}, "stored_runs/pilot-baseline-truncated/baseline.json", None, "truncated",
         command="plan", code=ExitCode.RUNTIME, uses=("stored_runs/pilot-baseline-truncated",)),
    Case("plan-config-unknown", {"--config": "nosuch", "--from": None}, None, "--config", "config 'nosuch' not found",
         command="plan"),
    # no pilot: the config decides the suites, so an invalid one is exit 2 as in run, never planned around
    Case("plan-assumed-config-invalid", {"--config": "@configs/sampling-temperature-negative.yaml", "--from": None,
                                         "--assume-discordance": "0.1"},
         "configs/sampling-temperature-negative.yaml", "sampling.temperature", ">= 0", command="plan", uses=PARENT),
    Case("plan-assumed-config-suites-unknown", {"--config": "@configs/suites-unknown.yaml", "--from": None,
                                                "--assume-discordance": "0.1"},
         "configs/suites-unknown.yaml", "suites", "no suite named", command="plan", uses=PARENT),
    # ------------------------------------------------------------------ evalgate score
    Case("score-config-unknown", {"--config": "nosuch"}, None, "--config", "config 'nosuch' not found",
         command="score"),
    Case("score-limit-zero", {"--limit": "0"}, None, "--limit", ">= 1", command="score"),
    Case("score-logprob-items-negative", {"--logprob-items": "-1"}, None, "--logprob-items", ">= 0", command="score"),
    Case("score-suite-unknown", {"--suites": "nosuch"}, None, "nosuch", None, command="score"),
    # ------------------------------------------------------------------ evalgate list
    Case("list-config-cycle", {"--configs-dir": "@configs/cycle2"}, "configs/cycle2/", "extends", "cycle",
         command="list"),
    Case("list-suites-dir-is-a-file", {"--suites-dir": "@suites/file-not-dir"}, "suites/file-not-dir", None,
         "not a directory", command="list"),
]


def _stored(command: str, run: str, file: str | None, fragment: str | None) -> Case:
    return Case(f"{command}-{run}", {"RUN": f"@stored_runs/{run}"}, file and f"stored_runs/{run}/{file}", None,
                fragment, command=command, code=ExitCode.RUNTIME, uses=(f"stored_runs/{run}",))


# A corrupt stored run given to ``evalgate report`` / ``evalgate compare``: exit 3.
STORED_CASES: list[Case] = [
    _stored("report", "verdict-truncated", "verdict.json", "truncated"),
    _stored("report", "verdict-empty", "verdict.json", "truncated"),
    _stored("report", "verdict-non-utf8", "verdict.json", None),
    _stored("report", "verdict-not-a-verdict", "verdict.json", "not an evalgate verdict"),
    _stored("report", "verdict-top-list", "verdict.json", "not an evalgate verdict"),
    _stored("report", "verdict-missing", "verdict.json", "not found"),
    _stored("report", "verdict-is-dir", "verdict.json", None),
    _stored("report", "run-is-a-file", None, None),
    # valid JSON, wrong-typed fields the renderers read: the dotted field where the model knows its shape
    _stored("report", "verdict-manifest-timings-string", "verdict.json",
            'manifest.timings: expected a mapping (a JSON object), got a string ("slow")'),
    # a hand-edited number: the file, the field path (list positions in brackets), what it must be and what it is
    _stored("report", "verdict-pair-seconds-string", "verdict.json",
            'not an evalgate verdict document: speed.levels[0].precision.pair_seconds: expected a number, got a '
            'string ("48")'),
    _stored("report", "verdict-manifest-suite-hash-null", "verdict.json",
            "manifest.suites[0].content_hash: expected a string, got null"),
    _stored("report", "verdict-speed-side-null", "verdict.json",
            "speed.sides.candidate: expected a mapping (a JSON object), got null"),
    # a value the model admits but evalgate never writes: the file, never an internal error
    _stored("report", "verdict-task-margin-null", "verdict.json", "tasks[0]: PASS, but its own numbers do not show"),
    _stored("report", "verdict-speed-ratio-huge", "verdict.json", "a field holds a value evalgate does not write"),
    _stored("compare", "candidate-truncated", "candidate.json", "truncated"),
    _stored("compare", "candidate-missing-tasks", "candidate.json", "tasks"),
    _stored("compare", "candidate-items-malformed", "candidate.json", "malformed"),
    _stored("compare", "manifest-truncated", "manifest.json", "truncated"),
    _stored("compare", "candidate-score-null", "candidate.json",
            "tasks.s1_task.items[0].score: must be a number in [0, 1], got None"),
    _stored("compare", "candidate-output-number", "candidate.json",
            "tasks.s1_task.items[0].output: must be a string, got int"),
    _stored("compare", "manifest-candidate-string", "manifest.json", "candidate: must be a mapping, got str"),
    _stored("compare", "run-is-a-file", None, "not found"),
    # issue 23: a manifest that cannot vouch for its suites' contents is refused, never gated
    _stored("compare", "manifest-no-suites", "manifest.json", "malformed run manifest: suites: missing (a required field)"),
    _stored("compare", "manifest-hash-int", "manifest.json",
            "malformed run manifest: suites[0].content_hash: expected a string, got 12345"),
    _stored("compare", "manifest-suite-not-listed", "manifest.json",
            "suites: no entry for task 's1_task' of suite 's1', so its suite content cannot be checked"),
    _stored("compare", "manifest-no-created", "manifest.json", "malformed run manifest: created: missing (a required field)"),
    # break test: a hand-edited device identity was an internal error in device.describe (TypeError), not the field
    _stored("compare", "manifest-device-isa-null", "manifest.json",
            "malformed run manifest: candidate.device.isa: expected a list, got null"),
    # issue 23: a verdict.json that contradicts itself is refused, never re-rendered (least of all as PASS)
    _stored("report", "verdict-pass-over-block", "verdict.json",
            "not a consistent evalgate verdict: verdict: PASS, but tasks[0] (s/t) is BLOCK"),
    _stored("report", "verdict-inconclusive-over-block", "verdict.json",
            "verdict: INCONCLUSIVE, but tasks[0] (s/t) is BLOCK"),
    _stored("report", "verdict-pass-no-tasks", "verdict.json", "tasks: none, under an overall PASS"),
    _stored("report", "verdict-version-99", "verdict.json", "version: 99 is not a verdict document version"),
    _stored("report", "verdict-negative-n", "verdict.json", "tasks[0].n: -40 is negative"),
    _stored("report", "verdict-nan-lower-bound", "verdict.json", "tasks[0].lower_bound: nan is not a finite number"),
    _stored("report", "verdict-pass-lb-below-margin", "verdict.json",
            "tasks[0]: PASS, but its own numbers do not show non-inferiority (lower bound -50.0, margin 10.0"),
    _stored("report", "verdict-pass-evidence-failure", "verdict.json",
            "tasks[0].evidence.failures: 'candidate NaN/+inf log-probs on 3 items' under an overall PASS"),
    _stored("report", "verdict-pass-not-gated", "verdict.json", "tasks[0].gated: False under an overall PASS"),
    _stored("report", "verdict-noop-with-diff", "verdict.json",
            "verdict: NO-OP, but effective_diff lists 1 differing engine key(s) (engine_args.dtype, ...)"),
]
CASES += STORED_CASES

# Run also as a real ``python -m evalgate`` process (stderr must hold the one line and nothing else).
SUBPROCESS_CASES = ("config-syntax-unclosed-flow", "config-engine-arg-unknown", "thresholds-alpha-zero",
                    "suites-no-metric-list", "limit-not-int", "no-command", "config-non-utf8", "out-is-a-file",
                    "suites-preflight-scorer-keyerror", "config-nested-bomb", "out-under-a-file",
                    "config-model-embedded-unknown", "requestlog-max-tokens-zero")

RESULT_FILES = sorted(p.name for p in (B / "results").iterdir())
# Run files (baseline.json / candidate.json): valid JSON, malformed task records.
RUN_FILES = ("malformed-tasks.json", "items-not-list.json", "items-wrong-keys.json")
# Not JSON at all.
UNREADABLE_FILES = ("empty.json", "non-utf8.json", "not-json.json", "nul-bytes.json", "truncated.json")


def _path(v: object) -> str:
    return str(B / v[1:]) if isinstance(v, str) and v.startswith("@") else str(v)


def _has_command(name: str) -> bool:
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return name in sub.choices


# Defaults of each command; a case's ``opts`` replace them.
DEFAULTS: dict[str, dict[str, object]] = {
    "run": {"--config": str(G / "configs" / "cand.yaml"), "--thresholds": str(G / "thresholds.yaml"),
            "--suites-dir": str(G / "suites"), "--configs-dir": str(G / "configs"), "--out": "OUT", "--limit": "2"},
    "score": {"--config": "cand", "--suites-dir": str(G / "suites"), "--configs-dir": str(G / "configs"),
              "--out": "OUT", "--limit": "2"},
    "list": {"--configs-dir": str(G / "configs"), "--suites-dir": str(G / "suites")},
    "plan": {"--config": "cand", "--margin": "2", "--from": "@stored_runs/pilot-baseline-truncated",
             "--thresholds": str(G / "thresholds.yaml")},
}


def _argv(case: Case, out: Path) -> list[str]:
    if case.command in ("report", "compare"):
        run = _path(case.opts["RUN"])
        runs = [run] if case.command == "report" else [run, run, "--thresholds", str(G / "thresholds.yaml")]
        return [case.command, *runs, "--out", str(out)]
    argv = [case.command] if case.command else []
    opts = {**DEFAULTS.get(case.command, {}), **case.opts}
    for key, value in opts.items():
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        argv += [key, *(str(out) if v == "OUT" else _path(v) for v in values)]
    return argv + list(case.extra)


class _Reached(BaseException):
    """Raised by the tripwires; a BaseException so the CLI's error boundary cannot swallow it."""


@pytest.fixture
def tripwires(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Make any engine or model work raise ``_Reached``; an empty EVALGATE_HOME."""
    calls: list[str] = []

    def trip(name: str):
        def f(*a, **k):
            calls.append(name)
            raise _Reached(name)
        return f

    for name in ("_run_worker", "evaluate_config", "resolve_model"):
        if hasattr(evalgate.evaluate.runner, name):
            monkeypatch.setattr(evalgate.evaluate.runner, name, trip(name))
    monkeypatch.setattr("evalgate.models.embedded.prepare_embedded_model", trip("prepare_embedded_model"))
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    return calls


def _check_message(case: Case, err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    line = lines[0]
    assert len(line) < 1000, f"a {len(line)}-character line: {line[:300]}..."
    assert line.startswith("evalgate: error: "), line
    if case.file:
        assert f"bad_inputs/{case.file}" in line, f"message does not name {case.file}: {line}"
    if case.field:
        assert case.field in line, f"message does not name the field {case.field}: {line}"
    if case.fragment:  # in the message itself, not in a path (the paths hold the case names)
        assert case.fragment in re.sub(re.escape(str(B)) + r"[^:\s']*", "<path>", line), line
    return line


def test_the_good_inputs_reach_the_engine(tripwires: list[str], tmp_path: Path, capsys) -> None:
    """The defaults of every case are valid: unchanged, the run gets as far as the engine."""
    with pytest.raises(_Reached):
        cli.main(_argv(Case("good", {}, None, None), tmp_path / "run"))
    assert tripwires and capsys.readouterr().err == ""


def test_the_good_inputs_of_score_reach_the_engine(tripwires: list[str], tmp_path: Path, capsys) -> None:
    """``score``'s defaults are valid too: its bad-input cases fail for their own reason."""
    with pytest.raises(_Reached):
        cli.main(_argv(Case("good", {}, None, None, command="score"), tmp_path / "run"))
    assert tripwires == ["evaluate_config"] and capsys.readouterr().err == ""


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clean_line_and_exit_2_or_3(case: Case, tripwires: list[str], tmp_path: Path, capsys) -> None:
    if case.command in ("report", "compare", "plan", "score") and not _has_command(case.command):
        pytest.skip(f"no 'evalgate {case.command}' command in this tree")
    out = tmp_path / "run"
    try:
        code = cli.main(_argv(case, out))
    except _Reached:
        pytest.fail(f"{case.id}: got past validation into {tripwires}")
    except SystemExit as exc:  # argparse
        pytest.fail(f"{case.id}: SystemExit({exc.code}) escaped main()")
    captured = capsys.readouterr()
    _check_message(case, captured.err)
    assert code == case.code
    assert not tripwires
    assert not (out / "logs").exists()


@pytest.mark.parametrize("case_id", SUBPROCESS_CASES)
def test_bad_input_in_a_real_process(case_id: str, tmp_path: Path) -> None:
    case = next(c for c in CASES if c.id == case_id)
    out = tmp_path / "run"
    env = {**os.environ, "EVALGATE_HOME": str(tmp_path / "home"), "PYTHONWARNINGS": "default"}
    proc = subprocess.run([sys.executable, "-m", "evalgate", *_argv(case, out)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)
    _check_message(case, proc.stderr)
    assert proc.returncode == ExitCode.USAGE
    assert proc.stdout == ""
    assert not (out / "logs").exists()
    assert not (tmp_path / "home").exists()


# ------------------------------------------------------------------------------------ stored results


@pytest.mark.parametrize("name", RESULT_FILES)
def test_corrupt_store_entry_is_quarantined_never_used(name: str, tmp_path: Path, caplog) -> None:
    store = ResultStore(tmp_path / "store")
    store.root.mkdir()
    shutil.copyfile(B / "results" / name, store.path(STORE_KEY))
    assert store.get(STORE_KEY) is None
    assert not store.path(STORE_KEY).exists()
    assert (store.root / f"{STORE_KEY}.corrupt").read_bytes() == (B / "results" / name).read_bytes()
    assert "corrupt" in caplog.text
    assert store.get(STORE_KEY) is None  # still a miss: recomputed, never used


@pytest.mark.parametrize("name", UNREADABLE_FILES + RUN_FILES)
def test_corrupt_result_file_is_a_one_line_store_error(name: str) -> None:
    path = B / "results" / name
    with pytest.raises(StoreError) as ei:
        tasks_from_json(read_json(path, "results file")["tasks"], path)
    msg = str(ei.value)
    assert "\n" not in msg and f"bad_inputs/results/{name}" in msg
    assert ei.value.exit_code == ExitCode.RUNTIME == 3


def test_corpus_is_large_enough_and_every_file_is_used() -> None:
    files = {p.relative_to(B).as_posix() for p in B.rglob("*") if p.is_file() and p.name != ".gitkeep"}
    files |= {p.relative_to(B).as_posix() + "/" for p in B.rglob("*") if p.is_dir() and not any(p.iterdir())}
    bad = {f for f in files if not f.startswith("good/")}
    referenced: set[str] = set()
    for c in CASES:
        refs = [c.file or ""] + list(c.uses) + [v[1:] for vs in c.opts.values()
                                                 for v in (vs if isinstance(vs, list) else [vs])
                                                 if isinstance(v, str) and v.startswith("@")]
        referenced |= {r for r in refs if r}
    unused = sorted(f for f in bad if not f.startswith("results/")
                    and not any(f == r or f.startswith(r.rstrip("/") + "/") for r in referenced))
    assert not unused, f"corpus files no case uses: {unused}"
    assert len(bad) >= 50
    assert len(CASES) + len(RESULT_FILES) >= 100


# ------------------------------------------------------------------------------------ issue 23: fail closed


def _runs_over_400_identical_items(tmp_path: Path) -> tuple[Path, Path]:
    """Two stored runs whose candidates agree on 400 items: with matching manifests ``compare`` PASSes them (MDE
    ~0.6 points, margin 2), so a refusal below is the check's doing, not the statistics'."""
    from runfixtures import task, write_run

    tasks = {"s1_task": task("s1_task", "s1", ["4"] * 400, [1.0] * 400)}
    return (write_run(tmp_path / "a", "a", "float32", tasks), write_run(tmp_path / "b", "b", "bfloat16", tasks))


def _edit_manifest(run: Path, edit) -> None:
    import json

    m = json.loads((run / "manifest.json").read_text())
    edit(m)
    (run / "manifest.json").write_text(json.dumps(m))


def test_compare_of_matching_manifests_passes(tmp_path: Path, capsys) -> None:
    """The control of the next test: the same two runs with complete, matching manifests are a PASS (exit 0)."""
    a, b = _runs_over_400_identical_items(tmp_path)
    assert cli.main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp"),
                     "--thresholds", str(G / "thresholds.yaml")]) == ExitCode.PASS
    assert (tmp_path / "cmp" / "verdict.json").is_file()


@pytest.mark.parametrize(("edit", "fragment"), [
    (lambda m: m.pop("suites"), "suites: missing (a required field)"),
    (lambda m: m["suites"][0].update(content_hash=12345), "suites[0].content_hash: expected a string, got 12345"),
    (lambda m: m["suites"][0].update(content_hash=None), "suites[0].content_hash: expected a string, got null"),
    (lambda m: m.update(suites=[]), "suites: no entry for task 's1_task' of suite 's1'"),
    (lambda m: m["suites"][0].update(name="other"), "suites: no entry for task 's1_task' of suite 's1'"),
    (lambda m: m["suites"][0].update(tasks=[]), "suites: no entry for task 's1_task' of suite 's1'"),
    (lambda m: m.pop("baseline"), "baseline: missing (a required field)"),
], ids=["no-suites", "hash-int", "hash-null", "suites-empty", "suite-renamed", "task-unlisted", "no-baseline"])
def test_compare_of_runs_over_different_prompts_is_refused_never_passed(edit, fragment: str, tmp_path: Path,
                                                                       capsys) -> None:
    """Issue 23: run B was made from other suite files (another content hash) and its manifest cannot vouch for them
    (incomplete or mistyped): the comparison must stop at exit 3 naming B's manifest and field, with no verdict."""
    a, b = _runs_over_400_identical_items(tmp_path)
    _edit_manifest(b, lambda m: m["suites"][0].update(content_hash="cd" * 32))
    _edit_manifest(b, edit)
    out = tmp_path / "cmp"
    code = cli.main(["compare", str(a), str(b), "--out", str(out), "--thresholds", str(G / "thresholds.yaml")])
    line = _check_message(Case("compare", {}, None, None), capsys.readouterr().err)
    assert code == ExitCode.RUNTIME
    assert f"{b / 'manifest.json'}: " in line and fragment in line, line
    assert not (out / "verdict.json").exists()


def test_compare_of_different_suite_contents_is_refused(tmp_path: Path, capsys) -> None:
    a, b = _runs_over_400_identical_items(tmp_path)
    _edit_manifest(b, lambda m: m["suites"][0].update(content_hash="cd" * 32))
    assert cli.main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == ExitCode.RUNTIME
    line = _check_message(Case("compare", {}, None, None), capsys.readouterr().err)
    assert "suite 's1' differs between" in line and "(content hash abababababab vs cdcdcdcdcdcd)" in line


def test_compare_of_runs_whose_protocols_differ_is_refused(tmp_path: Path, capsys) -> None:
    """Issue 26 item 1: run A's candidate sent completion prompts, run B's the same items through a chat template
    (chat and completion prompts of one task score differently): the real ``evalgate compare`` stops at exit 3
    naming ``candidate.protocol`` and each differing key, and writes no verdict. The same runs with equal
    protocols are the PASS of ``test_compare_of_matching_manifests_passes``."""
    a, b = _runs_over_400_identical_items(tmp_path)
    chat = {"mode": "chat", "template": "file", "template_sha256": "e" * 64, "template_kwargs": {},
            "system_sha256": None, "fewshot_as_multiturn": False, "think_end": None}
    _edit_manifest(a, lambda m: m["candidate"].update(protocol={"mode": "completion"}))
    _edit_manifest(b, lambda m: m["candidate"].update(protocol=chat))
    out = tmp_path / "cmp"
    code = cli.main(["compare", str(a), str(b), "--out", str(out), "--thresholds", str(G / "thresholds.yaml")])
    line = _check_message(Case("compare", {}, None, None), capsys.readouterr().err)
    assert code == ExitCode.RUNTIME
    assert "candidate.protocol" in line and 'mode: "completion" vs "chat"' in line, line
    assert "template_sha256: null vs eeeeeeeeeeee" in line, line
    assert not (out / "verdict.json").exists()


def _home_cases(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """EVALGATE_HOME value -> the fragment its refusal must hold, per kind of broken home."""
    plain = tmp_path / "plain-file"
    plain.write_text("not a directory\n")
    store_file = tmp_path / "home-with-store-file"
    store_file.mkdir()
    (store_file / "store").write_text("not a directory\n")
    return {"empty": ("", "is set but empty (an unset variable?)"),
            "blank": ("  ", "is set but empty (an unset variable?)"),
            "a-file": (str(plain), "exists and is not a directory (evalgate's home"),
            "store-a-file": (str(store_file), "exists and is not a directory (the result store)"),
            "under-a-file": (str(plain / "home"), "cannot write evalgate's home: models and the result store here: "
                                                  "Not a directory"),
            "name-too-long": (str(tmp_path / ("h" * 300)), "File name too long"),
            "path-too-long": (str(tmp_path / "/".join(["h" * 200] * 25)), "File name too long"),
            "cannot-be-created": ("/proc/evalgate-home", "cannot write evalgate's home")}


@pytest.mark.parametrize("kind", ["empty", "blank", "a-file", "store-a-file", "under-a-file", "name-too-long",
                                  "path-too-long", "cannot-be-created"])
def test_broken_home_is_refused_before_any_engine_starts(kind: str, tripwires: list[str], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Issue 23: a home the store cannot be written to was found only after the baseline's engine ran (its
    generations thrown away); an empty EVALGATE_HOME silently meant the default."""
    value, fragment = _home_cases(tmp_path)[kind]
    monkeypatch.setenv("EVALGATE_HOME", value)
    out = tmp_path / "run"
    code = cli.main(_argv(Case("good", {}, None, None), out))
    line = _check_message(Case(kind, {}, None, "EVALGATE_HOME", fragment), capsys.readouterr().err)
    assert code == ExitCode.USAGE, line
    assert not tripwires
    assert not (out / "logs").exists()
    if kind == "store-a-file":
        assert (Path(value) / "store").read_text() == "not a directory\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only directory")
def test_unwritable_home_is_refused_before_any_engine_starts(tripwires: list[str], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    home = tmp_path / "ro-home"
    home.mkdir()
    home.chmod(0o555)
    monkeypatch.setenv("EVALGATE_HOME", str(home))
    try:
        code = cli.main(_argv(Case("good", {}, None, None), tmp_path / "run"))
    finally:
        home.chmod(0o755)
    _check_message(Case("ro", {}, None, "EVALGATE_HOME", "Permission denied"), capsys.readouterr().err)
    assert code == ExitCode.USAGE and not tripwires


def test_a_good_home_is_checked_and_left_as_it_was(tripwires: list[str], tmp_path: Path, monkeypatch, capsys) -> None:
    """The check creates nothing it does not remove: a home that did not exist still does not once the run stops
    at the engine (the store is created by the first result written)."""
    home = tmp_path / "fresh" / "home"
    monkeypatch.setenv("EVALGATE_HOME", str(home))
    with pytest.raises(_Reached):
        cli.main(_argv(Case("good", {}, None, None), tmp_path / "run"))
    assert not (tmp_path / "fresh").exists()


@pytest.mark.parametrize("command", ["run", "ablate"])
@pytest.mark.parametrize("where", ["under-a-file", "name-too-long", "default-under-a-file"])
def test_bad_run_directory_is_refused_before_any_engine_starts(command: str, where: str, tripwires: list[str],
                                                               tmp_path: Path, monkeypatch, capsys) -> None:
    """Issue 23: an --out the OS refuses ended as 'internal error: OSError' (exit 3, no field)."""
    plain = tmp_path / "plain-file"
    plain.write_text("x")
    out = {"under-a-file": plain / "run", "name-too-long": tmp_path / ("o" * 300), "default-under-a-file": None}[where]
    argv = _argv(Case("good", {"--out": None if out is None else str(out)}, None, None), tmp_path / "unused")
    argv[0] = command
    if out is None:  # the default run directory, runs/<config>-<time>, where ./runs is a regular file
        monkeypatch.chdir(tmp_path)
        (tmp_path / "runs").write_text("x")
    code = cli.main(argv)
    line = _check_message(Case(where, {}, None, "--out"), capsys.readouterr().err)
    assert code == ExitCode.USAGE, line
    assert ("Not a directory" if "file" in where else "File name too long") in line
    assert not tripwires
    assert plain.read_text() == "x"


@pytest.mark.parametrize("command", ["compare", "report"])
@pytest.mark.parametrize("where", ["a-file", "under-a-file", "name-too-long"])
def test_bad_output_directory_of_compare_and_report_is_exit_2(command: str, where: str, tmp_path: Path,
                                                              capsys) -> None:
    a, b = _runs_over_400_identical_items(tmp_path)
    if command == "report":
        assert cli.main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == ExitCode.PASS
        capsys.readouterr()
    plain = tmp_path / "plain-file"
    plain.write_text("x")
    out = {"a-file": plain, "under-a-file": plain / "out", "name-too-long": tmp_path / ("o" * 300)}[where]
    argv = (["compare", str(a), str(b)] if command == "compare" else ["report", str(tmp_path / "cmp")])
    code = cli.main([*argv, "--out", str(out)])
    line = _check_message(Case(where, {}, None, "--out"), capsys.readouterr().err)
    assert code == ExitCode.USAGE, line
    assert {"a-file": "exists and is not a directory", "under-a-file": "Not a directory",
            "name-too-long": "File name too long"}[where] in line
    assert plain.read_text() == "x"


def test_compare_with_default_out_under_a_file_is_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    a, b = _runs_over_400_identical_items(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").write_text("x")
    assert cli.main(["compare", str(a), str(b)]) == ExitCode.USAGE
    line = _check_message(Case("default", {}, None, "--out", "Not a directory"), capsys.readouterr().err)
    assert line.startswith("evalgate: error: runs/compare-a-vs-b-")
    assert (tmp_path / "runs").read_text() == "x"


def test_suite_file_that_is_a_symlink_loop_is_one_line(tripwires: list[str], tmp_path: Path, capsys) -> None:
    """Issue 23: a self-referencing symlink in a suite folder ended as 'internal error: OSError' (exit 3)."""
    suites = tmp_path / "suites"
    shutil.copytree(G / "suites", suites)
    (suites / "s1" / "loop.jsonl").symlink_to("loop.jsonl")
    code = cli.main(_argv(Case("good", {"--suites-dir": str(suites)}, None, None), tmp_path / "run"))
    line = _check_message(Case("loop", {}, None, None), capsys.readouterr().err)
    assert code == ExitCode.USAGE and not tripwires
    assert f"{suites / 's1' / 'loop.jsonl'}: cannot read this suite file: Too many levels of symbolic links" in line


@pytest.mark.parametrize("which", ["config", "thresholds", "suite"])
def test_nested_bracket_bomb_of_100000_levels_is_one_line(which: str, tripwires: list[str], tmp_path: Path,
                                                          capsys) -> None:
    """Issue 23: ``[[[[...]]]]`` 10^5 deep in a YAML value was a RecursionError (internal error, exit 3)."""
    bomb = "[" * 100_000 + "]" * 100_000
    if which == "config":
        path = tmp_path / "cand.yaml"
        path.write_text(f"extends: {G / 'configs' / 'baseline.yaml'}\ndescription: {bomb}\n")
        opts = {"--config": str(path)}
    elif which == "thresholds":
        path = tmp_path / "thresholds.yaml"
        path.write_text(f"alpha: 0.05\ndefault: {{margin: 2.0}}\nsuites: {bomb}\n")
        opts = {"--thresholds": str(path)}
    else:
        shutil.copytree(G / "suites", tmp_path / "suites")
        path = tmp_path / "suites" / "s1" / "s1_task.yaml"
        path.write_text(path.read_text() + f"metadata: {bomb}\n")
        opts = {"--suites-dir": str(tmp_path / "suites")}
    code = cli.main(_argv(Case("bomb", opts, None, None), tmp_path / "run"))
    line = _check_message(Case("bomb", {}, None, None, "values nested too deeply"), capsys.readouterr().err)
    assert code == ExitCode.USAGE and not tripwires
    assert f"{path}: " in line


def test_json_depth_bomb_in_a_stored_verdict_is_exit_3(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "verdict.json").write_text('{"verdict": "PASS", "tasks": [], "manifest": ' + "[" * 100_000
                                      + "]" * 100_000 + "}")
    assert cli.main(["report", str(run), "--out", str(tmp_path / "out")]) == ExitCode.RUNTIME
    line = _check_message(Case("deep", {}, None, None), capsys.readouterr().err)
    assert f"{run / 'verdict.json'}: verdict is not a file evalgate writes: JSON nested too deeply" in line


def test_traffic_bounds_are_inclusive(tmp_path: Path) -> None:
    """The largest accepted values load; one more is refused (the corpus cases above)."""
    from evalgate.inputs.thresholds import MAX_TRAFFIC_PROMPTS, MAX_TRAFFIC_REPEATS, load_thresholds

    path = tmp_path / "thresholds.yaml"
    path.write_text("alpha: 0.05\ndefault: {margin: 2.0}\ntraffic: {num_prompts: 100000, repeats: 100}\n")
    traffic = load_thresholds(path).traffic
    assert (MAX_TRAFFIC_PROMPTS, MAX_TRAFFIC_REPEATS) == (100_000, 100)
    assert (traffic["num_prompts"], traffic["repeats"]) == (100_000, 100)


def _written_verdicts() -> list[Path]:
    return sorted((REPO / "tests" / "verdicts" / "v1").glob("*.json")) + sorted(
        (REPO / "benchmarks" / "results").rglob("verdict.json"))


@pytest.mark.parametrize("path", _written_verdicts(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_verdict_evalgate_wrote_passes_the_consistency_check(path: Path) -> None:
    """No false refusal: every stored document in the repository (old test documents, the benchmark runs) still
    reads back, and its overall verdict is unchanged."""
    import json

    from evalgate.commands.stored import read_verdict

    assert read_verdict(path).verdict == json.loads(path.read_text())["verdict"]


def test_fresh_documents_pass_the_consistency_check(tmp_path: Path) -> None:
    """Documents the gate builds now (a BLOCK over a BLOCK and a PASS task, a NO-OP) read back unchanged."""
    import json

    from evalgate.commands.stored import read_verdict
    from runfixtures import blocking_document, document, task

    same = {"t": task("t", "s", ["ok"] * 40, [1.0] * 40)}
    for name, doc in (("block", blocking_document()), ("noop", document(same, same, same_config=True))):
        path = tmp_path / name / "verdict.json"
        path.parent.mkdir()
        path.write_text(json.dumps(doc, allow_nan=True))
        assert read_verdict(path).verdict == doc["verdict"] == {"block": "BLOCK", "noop": "NO-OP"}[name]
