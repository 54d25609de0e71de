"""A recorded request log as a speed profile (``traffic.from``): reading and checking it, the concurrency its
timestamps imply, and the summary of its lengths. Pure: no vLLM, no tokenizer (the worker renders and counts
tokens: ``evalgate.worker.replay``).

The log is JSON lines (one request per line; blank lines are skipped), or one JSON array of records (the shape of
the public ShareGPT files; its records are then numbered, ``record N``, instead of lines). Each record is one of:

* an OpenAI request body, ``/v1/chat/completions`` (``messages``: a list of ``{role, content}``; output budget
  ``max_completion_tokens``, else ``max_tokens``) or ``/v1/completions`` (``prompt``: one string; ``max_tokens``);
* vLLM's custom benchmark format: ``prompt`` and optional ``output_tokens``;
* a ShareGPT record: ``conversations``, a list of ``{from, value}``; as vLLM's ``ShareGPTDataset`` reads it, the
  first turn is the prompt (sent as one user message) and the second turn's length in tokens is the output budget;

each either bare or wrapped as a gateway logs it: a body under ``body`` or ``request`` (a mapping, or a string
holding the JSON body), with the wrapper's ``timestamp`` or ``start_time`` (when the request arrived) and
``end_time`` or ``duration_s`` (when its response ended). Times are seconds since the epoch (a number) or ISO 8601
strings (no zone = UTC); ``duration_s`` is seconds. A bare record may carry the same time keys. Other keys (model,
temperature, stream, ...) are ignored: the speed profile sends every request with the benchmark's sampling
(``engine.throughput``). A chat or completions body's ``response_format`` (``json_object`` / ``json_schema``, whose
``schema`` must be a valid JSON Schema) and ``tools`` (``[{type: function, function: {name, ...}}]``) are kept, checked,
for the replay gate (``replay:``, ``evalgate.compare.replay``), and so are its ``temperature`` (a number >= 0),
``top_p`` (0 < top_p <= 1) and ``seed`` (an integer), which ``replay.sampling: recorded`` replays.

A ``prompt`` is sent as recorded, without a chat template (what ``/v1/completions`` does, and what ``vllm bench serve
--dataset-name custom --skip-chat-template`` sends); ``messages`` and ShareGPT turns are rendered by the engine's
tokenizer chat template. A record with no output budget takes ``traffic.output_len``.

Concurrency from the log (``traffic.concurrency: from-log``): request ``i`` is in flight over ``[start_i, end_i)``;
the in-flight count request ``i`` meets on arrival is ``c_i = #{j : start_j <= start_i < end_j}`` (itself included,
also when its duration is 0). The levels measured are the peak, ``max c_i`` (the in-flight count only rises at an
arrival, so this is the log's peak), and the typical level, ``median c_i`` rounded up: the load a typical request
met.

Nothing of a request's text leaves this module's callers: the profile records the file's path, SHA-256, request
count, formats and token-length quantiles only.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError

__all__ = ["BODY_KEYS", "END_KEYS", "FROM_LOG", "LoggedRequest", "RequestLog", "START_KEYS", "in_flight_counts",
           "concurrency_from_log", "length_summary", "nearest_rank", "read_request_log"]

BODY_KEYS = ("body", "request")  # a gateway's wrapper: the request body under one of these
START_KEYS = ("timestamp", "start_time")  # when the request arrived (the first one present)
END_KEYS = ("end_time", "duration_s")  # when its response ended, or how long it took (the first one present)
BUDGET_KEYS = ("max_completion_tokens", "max_tokens", "output_tokens")  # the output budget (the first one present)
FROM_LOG = "from-log"  # traffic.concurrency: the log's peak and typical in-flight requests
QUANTILES = (50, 90, 99)  # percent: the summary's quantiles of input and output lengths
MAX_NESTING_NOTE = "nested too deeply"


@dataclass(frozen=True)
class LoggedRequest:
    """One recorded request, checked.

    Attributes:
        line: where it is in the file: the 1-based line (JSON lines) or record number (a JSON array).
        kind: ``chat`` (``messages``), ``prompt`` (``/v1/completions`` or vLLM's custom format) or ``sharegpt``.
        messages: ``chat`` and ``sharegpt``: ``({"role", "content"}, ...)``, content a string.
        prompt: ``prompt``: the text sent as is.
        max_tokens: the recorded output budget in tokens (>= 1), or None (``traffic.output_len`` applies; for
            ``sharegpt``, the length of ``completion``).
        completion: ``sharegpt``: the recorded reply, whose length in tokens is the budget; else None.
        start, end: arrival and end in seconds since the epoch (None when not asked for or not recorded).
        response_format: the body's ``response_format`` when it asks for JSON (``{"type": "json_object"}`` or
            ``{"type": "json_schema", "json_schema": {"schema": {...}, ...}}``), else None.
        tools: the body's ``tools`` (each ``{"type": "function", "function": {"name", ...}}``), ``()`` when none.
        sampling: the body's recorded ``temperature`` / ``top_p`` / ``seed`` (only those present), ``{}`` when none.
    """

    line: int
    kind: str
    messages: tuple[dict[str, str], ...] | None = None
    prompt: str | None = None
    max_tokens: int | None = None
    completion: str | None = None
    start: float | None = None
    end: float | None = None
    response_format: dict[str, Any] | None = None
    tools: tuple[dict[str, Any], ...] = ()
    sampling: dict[str, Any] = field(default_factory=dict)

    @property
    def wants_json(self) -> bool:
        """The request asks for a JSON answer (``response_format`` json_object or json_schema)."""
        return self.response_format is not None

    @property
    def json_schema(self) -> dict[str, Any] | None:
        """The JSON Schema a ``json_schema`` response format names, else None."""
        if self.response_format is None or self.response_format.get("type") != "json_schema":
            return None
        return self.response_format["json_schema"]["schema"]

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The names of the functions the request offers (``tools[i].function.name``)."""
        return tuple(t["function"]["name"] for t in self.tools)


@dataclass(frozen=True)
class RequestLog:
    """A checked request log: ``path``, the file's ``sha256`` (hex), its ``requests`` in file order, and ``unit``
    (``line`` or ``record``: how ``LoggedRequest.line`` counts)."""

    path: Path
    sha256: str
    requests: tuple[LoggedRequest, ...]
    unit: str = "line"

    def formats(self) -> dict[str, int]:
        """Requests per kind (``chat`` / ``prompt`` / ``sharegpt``), only kinds present."""
        return dict(sorted(Counter(r.kind for r in self.requests).items()))

    def where(self, request: LoggedRequest) -> str:
        """``line 7`` or ``record 7``: the dotted-field prefix of an error about ``request``."""
        return f"{self.unit} {request.line}"


def read_request_log(path: Path, *, times: bool = False) -> RequestLog:
    """Read and check a request log (module docstring for the formats).

    Args:
        path: the log file.
        times: whether arrival and end times are needed (``concurrency: from-log``): every record must then have
            a parsable start and end, the end not before the start.
    Returns:
        The ``RequestLog`` (at least one request).
    Raises:
        ConfigError (exit 2), naming the file and, for a record, ``line N: field``: the file is missing, a
            directory or unreadable; not UTF-8; a line is not JSON or not a JSON object; a body string is not a
            JSON object; a record has neither ``messages``, ``prompt`` nor ``conversations``; ``messages`` is not a
            non-empty list of ``{role, content}`` with string (or text-part) content; ``prompt`` is not a
            non-empty string; ``conversations`` is not a non-empty list of ``{from, value}``; an output budget is
            not an integer >= 1; a time does not parse, or ends before it starts (``times`` only); no request at
            all.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("request log not found (traffic.from)", path=path) from None
    except IsADirectoryError:
        raise ConfigError("request log (traffic.from) is a directory, not a file", path=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the request log: {exc.strerror or exc}", path=path) from None
    digest = hashlib.sha256(raw).hexdigest()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"not valid UTF-8: byte 0x{raw[exc.start]:02x}", path=path, field=f"line {line}") from None
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"not valid JSON: {_json_reason(exc)}", path=path) from None
        items: list[tuple[int, Any]] = list(enumerate(records, 1))
        unit = "record"
    else:
        items, unit = [], "line"
        for n, line in enumerate(text.split("\n"), 1):  # "\n" only: JSON strings may hold U+2028 and friends
            if not line.strip():
                continue
            try:
                items.append((n, json.loads(line)))
            except (ValueError, RecursionError) as exc:
                raise ConfigError(f"not valid JSON: {_json_reason(exc)}", path=path, field=f"line {n}") from None
    requests = tuple(_request(n, obj, path, f"{unit} {n}", times) for n, obj in items)
    if not requests:
        raise ConfigError("the request log holds no requests (empty, or blank lines only)", path=path)
    return RequestLog(path=path, sha256=digest, requests=requests, unit=unit)


def _json_reason(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return MAX_NESTING_NOTE
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at column {exc.colno}"
    return str(exc)


class _Bad(Exception):
    """A record's problem: ``field`` (dotted, within the record) and ``message``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


def _request(n: int, obj: Any, path: Path, where: str, times: bool) -> LoggedRequest:
    try:
        return _parse(n, obj, times)
    except _Bad as bad:
        raise ConfigError(bad.message, path=path, field=f"{where}: {bad.field}" if bad.field else where) from None


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if value == [] or value == {}:
        return f"an empty {'list' if value == [] else 'mapping'}"
    return {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number"}.get(
        type(value), type(value).__name__)


def _parse(n: int, obj: Any, times: bool) -> LoggedRequest:
    if not isinstance(obj, dict):
        raise _Bad("", f"a record must be a JSON object, got {_kind_of(obj)}")
    body, prefix = obj, ""
    for key in BODY_KEYS:
        if key in obj and not any(k in obj for k in ("messages", "prompt", "conversations")):
            body, prefix = obj[key], f"{key}."
            if isinstance(body, str):  # a gateway that logs the raw body text
                try:
                    body = json.loads(body)
                except (ValueError, RecursionError) as exc:
                    raise _Bad(key, f"a body string must hold a JSON object: {_json_reason(exc)}") from None
            if not isinstance(body, dict):
                raise _Bad(key, f"the request body must be a JSON object, got {_kind_of(body)}")
            break
    start, end = _times(obj) if times else (None, None)
    if "messages" in body:
        messages = _messages(body["messages"], f"{prefix}messages")
        budget = _budget(body, prefix, ("max_completion_tokens", "max_tokens"))
        return LoggedRequest(n, "chat", messages=messages, max_tokens=budget, start=start, end=end,
                             response_format=_response_format(body, prefix), tools=_tools(body, prefix),
                             sampling=_sampling(body, prefix))
    if "prompt" in body:
        prompt = body["prompt"]
        if isinstance(prompt, list):
            raise _Bad(f"{prefix}prompt", "a list of prompts or of token ids is not supported: write one prompt "
                                          "string per record")
        if not isinstance(prompt, str) or not prompt:
            raise _Bad(f"{prefix}prompt", f"must be a non-empty string, got {_kind_of(prompt)}")
        budget = _budget(body, prefix, ("max_tokens", "output_tokens"))
        return LoggedRequest(n, "prompt", prompt=prompt, max_tokens=budget, start=start, end=end,
                             response_format=_response_format(body, prefix), sampling=_sampling(body, prefix))
    if "conversations" in body:
        turns = _turns(body["conversations"], f"{prefix}conversations")
        return LoggedRequest(n, "sharegpt", messages=({"role": "user", "content": turns[0]},),
                             completion=turns[1] if len(turns) > 1 else None, start=start, end=end)
    keys = ", ".join(sorted(map(str, body))[:8]) or "none"
    raise _Bad(prefix.rstrip(".") or "", f"the record has neither messages, prompt nor conversations (its keys: "
                                         f"{keys}); wrapped bodies go under {' or '.join(BODY_KEYS)}")


def _messages(value: Any, field: str) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise _Bad(field, f"must be a non-empty list of {{role, content}} messages, got {_kind_of(value)}")
    out = []
    for i, m in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(m, dict):
            raise _Bad(where, f"a message must be a mapping with role and content, got {_kind_of(m)}")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise _Bad(f"{where}.role", f"must be a non-empty string, got {_kind_of(role)}")
        if "content" not in m:
            raise _Bad(f"{where}.content", "missing")
        content = m["content"]
        if content is None and role == "assistant":  # an assistant turn that only called tools
            content = ""
        elif isinstance(content, list):
            content = _text_parts(content, f"{where}.content")
        elif not isinstance(content, str):
            raise _Bad(f"{where}.content", f"must be a string or a list of text parts, got {_kind_of(content)}")
        out.append({"role": role, "content": content})
    return tuple(out)


def _text_parts(parts: list[Any], field: str) -> str:
    texts = []
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else None
            raise _Bad(f"{field}[{j}]", "only text parts ({type: text, text: ...}) are supported"
                                        + (f", got type {kind!r}" if isinstance(kind, str) else ""))
        texts.append(part["text"])
    return "".join(texts)


def _turns(value: Any, field: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise _Bad(field, f"must be a non-empty list of {{from, value}} turns, got {_kind_of(value)}")
    out = []
    for i, t in enumerate(value[:2]):  # as vLLM's ShareGPTDataset: the first turn is the prompt, the second the reply
        if not isinstance(t, dict) or not isinstance(t.get("value"), str):
            raise _Bad(f"{field}[{i}].value", "must be a string (a turn is {from, value})")
        out.append(t["value"])
    if not out[0]:
        raise _Bad(f"{field}[0].value", "the first turn (the prompt) is empty")
    return out


def _response_format(body: dict[str, Any], prefix: str) -> dict[str, Any] | None:
    """The body's ``response_format`` when it asks for JSON, checked; None when absent, null or ``{"type": "text"}``.
    A ``json_schema`` format's ``json_schema.schema`` must be a valid JSON Schema (``jsonschema``'s meta-schema check
    for the schema's own draft)."""
    value = body.get("response_format")
    field = f"{prefix}response_format"
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Bad(field, f"must be a mapping with a type, got {_kind_of(value)}")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise _Bad(f"{field}.type", f"must be text, json_object or json_schema, got {json.dumps(kind)[:40]}")
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        raise _Bad(f"{field}.json_schema.schema", "a json_schema response format needs json_schema.schema, a "
                                                 "JSON Schema mapping")
    import jsonschema  # only logs that ask for a schema need it

    try:
        jsonschema.validators.validator_for(spec["schema"]).check_schema(spec["schema"])
    except jsonschema.SchemaError as exc:
        raise _Bad(f"{field}.json_schema.schema", f"not a valid JSON Schema: {' '.join(exc.message.split())[:160]}"
                   ) from None
    return {"type": "json_schema", "json_schema": {"name": str(spec.get("name", "")), "schema": spec["schema"]}}


def _sampling(body: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The body's ``temperature`` (a number >= 0), ``top_p`` (0 < top_p <= 1) and ``seed`` (an integer), checked;
    absent or null keys left out."""
    out: dict[str, Any] = {}
    for key in ("temperature", "top_p", "seed"):
        value = body.get(key)
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if key == "seed" and not (number and isinstance(value, int)):
            raise _Bad(f"{prefix}{key}", f"must be an integer, got {json.dumps(value)[:40]}")
        if key == "temperature" and not (number and value >= 0):
            raise _Bad(f"{prefix}{key}", f"must be a number >= 0, got {json.dumps(value)[:40]}")
        if key == "top_p" and not (number and 0 < value <= 1):
            raise _Bad(f"{prefix}{key}", f"must be a number with 0 < top_p <= 1, got {json.dumps(value)[:40]}")
        out[key] = value
    return out


def _tools(body: dict[str, Any], prefix: str) -> tuple[dict[str, Any], ...]:
    """The body's ``tools``, checked: a list of ``{type: function, function: {name: <non-empty string>, ...}}``."""
    value = body.get("tools")
    field = f"{prefix}tools"
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _Bad(field, f"must be a list of {{type: function, function: {{name, ...}}}}, got {_kind_of(value)}")
    for i, tool in enumerate(value):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise _Bad(f"{field}[{i}].function.name", "must be a non-empty string (a tool is {type: function, "
                                                      "function: {name, ...}})")
    return tuple(value)


def _budget(body: dict[str, Any], prefix: str, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = body.get(key)
        if value is None:  # absent, or written as null (OpenAI clients do): traffic.output_len applies
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _Bad(f"{prefix}{key}", f"must be an integer >= 1 (output tokens), got {json.dumps(value)[:40]}")
        return value
    return None


def _time(value: Any, field: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            t = datetime.fromisoformat(value.strip())
        except ValueError:
            pass
        else:
            return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()
    raise _Bad(field, f"not a time: seconds since the epoch or an ISO 8601 string, got {json.dumps(value)[:40]}")


def _times(obj: dict[str, Any]) -> tuple[float, float]:
    start_key = next((k for k in START_KEYS if k in obj), None)
    if start_key is None:
        raise _Bad(START_KEYS[0], f"concurrency: {FROM_LOG} needs each request's arrival time "
                                  f"({' or '.join(START_KEYS)})")
    start = _time(obj[start_key], start_key)
    if "end_time" in obj:
        end = _time(obj["end_time"], "end_time")
        if end < start:
            raise _Bad("end_time", f"ends {start - end:g} s before it starts ({start_key})")
        return start, end
    if "duration_s" in obj:
        d = obj["duration_s"]
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or d < 0:
            raise _Bad("duration_s", f"must be a number of seconds >= 0, got {json.dumps(d)[:40]}")
        return start, start + float(d)
    raise _Bad(END_KEYS[0], f"concurrency: {FROM_LOG} needs each request's end ({' or '.join(END_KEYS)})")


def in_flight_counts(intervals: Sequence[tuple[float, float]]) -> list[int]:
    """Per request ``i`` (``(start, end)`` in seconds, ``end >= start``), the requests in flight when it arrived:
    ``#{j : start_j <= start_i < end_j}``, itself included even with a zero duration (module docstring).
    ``O(n log n)``."""
    starts = sorted(s for s, _ in intervals)
    ends = sorted(e for _, e in intervals)
    out = []
    for s, e in intervals:
        n = bisect.bisect_right(starts, s) - bisect.bisect_right(ends, s)  # started by s, not ended by s
        out.append(n + (1 if e <= s else 0))
    return out


def concurrency_from_log(log: RequestLog) -> dict[str, int]:
    """``{"typical": ceil(median c_i), "peak": max c_i}`` of ``in_flight_counts`` over the log's requests.

    Raises:
        ValueError: a request has no start or end (read the log with ``times=True``).
    """
    if any(r.start is None or r.end is None for r in log.requests):
        raise ValueError("the log was read without times")
    counts = in_flight_counts([(r.start, r.end) for r in log.requests])  # type: ignore[misc]
    return {"typical": math.ceil(statistics.median(counts)), "peak": max(counts)}


def nearest_rank(values: Sequence[int], percent: float) -> int:
    """The ``percent`` quantile by nearest rank: the smallest value with at least ``percent`` % of ``values`` at or
    below it, ``sorted(values)[ceil(percent / 100 * n) - 1]`` (an observed length, not an interpolated one).

    Raises:
        ValueError: no values, or ``percent`` outside (0, 100].
    """
    if not values or not 0 < percent <= 100:
        raise ValueError(f"nearest_rank needs values and 0 < percent <= 100, got {len(values)} values, {percent}")
    ordered = sorted(values)
    return ordered[max(math.ceil(percent / 100 * len(ordered)), 1) - 1]


def length_summary(values: Sequence[int]) -> dict[str, int]:
    """``{"p50", "p90", "p99", "max"}`` of token lengths (``nearest_rank``). Raises ValueError: no values."""
    out = {f"p{q}": nearest_rank(values, q) for q in QUANTILES}
    out["max"] = max(values)
    return out
