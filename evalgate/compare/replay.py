"""The replay gate's facts: the same recorded requests answered greedily by both sides, compared request by request
(pure; no vLLM). ``evalgate.gate.replay`` decides on them.

Per request (``ReplayItem``): whether the outputs are identical (same output token ids, hence the same text), the
first divergence position in output tokens, the decode-time KL(baseline || candidate) along the common prefix and the
baseline's near-tie gap at the first differing token (``kl.decode_divergence``, where both sides recorded top-k
log-probs), the output lengths in tokens; where the request asks for JSON (``response_format`` json_object or
json_schema), whether each side's output is valid JSON, and for json_schema whether it conforms to the schema
(``jsonschema``, the validator of the schema's own draft); where the request offers ``tools``, the tool each side
called and whether they agree.

Rules of reading an output (documented in the replay guide):

* *valid JSON*: the whole output, stripped of surrounding whitespace, parses as JSON (``json.loads``); for
  ``json_object`` it must be an object; for ``json_schema`` it must also conform to the schema. No code fence or
  prose around it is accepted: a client that set ``response_format`` parses the body as it comes.
* *tool call*: the text inside the first ``<tool_call>...</tool_call>`` (else the whole output, stripped) starts with
  a JSON object (``json.JSONDecoder.raw_decode``) that has a string ``name`` (or ``function.name``): that is the
  tool called; anything else is "no tool call". Two sides agree when they name the same tool or both call none.

Across requests (``ReplayComparison``): the output agreement the lossless rule reads (``agreement.OutputAgreement``,
identical or near-tie flips, with the token-weighted decode-time KL as ``evidence.decode_summary`` computes it) and,
over the JSON-asking requests, the paired comparison of the 0/1 valid-JSON pairs (``stats.paired_comparison``:
Newcombe's interval for paired proportions and McNemar's exact one-sided loss test).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalgate.compare.agreement import OutputAgreement, is_near_tie
from evalgate.compare.kl import decode_divergence
from evalgate.compare.stats import PairedComparison, paired_comparison
from evalgate.inputs.requestlog import LoggedRequest

__all__ = ["ReplayComparison", "ReplayItem", "ReplayOutput", "ReplayRun", "compare_replay", "json_validity",
           "replay_item", "tool_called"]

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)


@dataclass(frozen=True)
class ReplayOutput:
    """One side's answer to one replayed request.

    Attributes:
        text: the output text. token_ids: the output token ids. finish_reason: vLLM's (``stop``, ``length``).
        top_logprobs: per output position ``[[token id, logprob], ...]`` (the engine's top-k), or None when not
            recorded.
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None = None
    top_logprobs: tuple[Any, ...] | None = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ReplayOutput:
        """From the worker's reply (``{"text", "token_ids", "finish_reason", "top_logprobs"}``)."""
        lps = obj.get("top_logprobs")
        return cls(text=str(obj["text"]), token_ids=tuple(int(t) for t in obj["token_ids"]),
                   finish_reason=obj.get("finish_reason"), top_logprobs=None if lps is None else tuple(lps))


@dataclass(frozen=True)
class ReplayItem:
    """One request, both sides compared (module docstring for the rules).

    Attributes:
        line: where the request is in the log (its line or record number).
        identical: same output token ids on both sides.
        first_divergence: the first output token position (0-based) where the sides differ (the shorter output's
            length when one is a prefix of the other); None when identical.
        tie_gap: nats, the baseline's log-prob gap between its token and the candidate's at the first divergence
            (``kl.DecodeDivergence.tie_gap``); None when identical or not recorded.
        kl_mean, kl_positions: decode-time KL(baseline || candidate) per compared position (nats) and the positions
            compared; None / 0 when log-probs were not recorded.
        base_tokens, cand_tokens: output lengths in tokens.
        wants_json: the request asks for JSON. json_valid: ``(baseline, candidate)`` valid JSON (None: not asked).
        has_schema: the request names a JSON Schema.
        tools: the request offers tools. tool_names: ``(baseline, candidate)`` tool called (None: no call).
    """

    line: int
    identical: bool
    first_divergence: int | None
    tie_gap: float | None
    kl_mean: float | None
    kl_positions: int
    base_tokens: int
    cand_tokens: int
    wants_json: bool = False
    json_valid: tuple[bool, bool] | None = None
    has_schema: bool = False
    tools: bool = False
    tool_names: tuple[str | None, str | None] | None = None

    @property
    def tools_agree(self) -> bool | None:
        """Both sides called the same tool, or none (None: the request offers no tools)."""
        return None if self.tool_names is None else self.tool_names[0] == self.tool_names[1]


def json_validity(text: str, schema: Mapping[str, Any] | None, *, object_only: bool = True) -> bool:
    """Whether ``text`` is a valid JSON answer (module docstring): the stripped text parses, is an object when
    ``object_only`` (json_object) and, with ``schema``, conforms to it (``jsonschema``, the schema's own draft)."""
    try:
        value = json.loads(text.strip())
    except (ValueError, RecursionError):
        return False
    if schema is not None:
        import jsonschema

        return bool(jsonschema.validators.validator_for(schema)(schema).is_valid(value))
    return isinstance(value, dict) or not object_only


def tool_called(text: str) -> str | None:
    """The name of the tool ``text`` calls (module docstring), or None when it calls none."""
    m = _TOOL_CALL.search(text)
    body = (m.group(1) if m else text).strip()
    if not body.startswith("{"):
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    name = value.get("name")
    if not isinstance(name, str) and isinstance(value.get("function"), dict):
        name = value["function"].get("name")
    return name if isinstance(name, str) and name else None


def replay_item(line: int, base: ReplayOutput, cand: ReplayOutput, *, wants_json: bool = False,
                schema: Mapping[str, Any] | None = None, tools: bool = False) -> ReplayItem:
    """Compare one request's two outputs (module docstring).

    Args:
        line: the request's line (or record) in the log. base, cand: the two sides' outputs.
        wants_json: the request set ``response_format`` json_object or json_schema; schema: the json_schema's schema.
        tools: the request offers tools.
    """
    b, c = base.token_ids, cand.token_ids
    identical = b == c
    first = None
    if not identical:
        first = next((i for i, (x, y) in enumerate(zip(b, c)) if x != y), min(len(b), len(c)))
    dd = None
    if base.top_logprobs and cand.top_logprobs:
        dd = decode_divergence(list(b), list(base.top_logprobs), list(c), list(cand.top_logprobs))
    kl = dd.kl_mean if dd is not None and math.isfinite(dd.kl_mean) else None
    return ReplayItem(
        line=line, identical=identical, first_divergence=first, tie_gap=None if dd is None else dd.tie_gap,
        kl_mean=kl, kl_positions=dd.positions if kl is not None and dd is not None else 0,
        base_tokens=len(b), cand_tokens=len(c), wants_json=wants_json,
        json_valid=(json_validity(base.text, schema), json_validity(cand.text, schema)) if wants_json else None,
        has_schema=schema is not None, tools=tools,
        tool_names=(tool_called(base.text), tool_called(cand.text)) if tools else None)


@dataclass(frozen=True)
class ReplayComparison:
    """Every replayed request compared, and what the gate reads.

    Attributes:
        items: per request, in log order.
        agreement: identical outputs, differing requests (their log lines), near-tie flips (``near_tie`` nats) and
            the token-weighted decode-time KL (None: no request recorded log-probs).
        json: the paired comparison of valid-JSON 0/1 pairs over the JSON-asking requests (points), None when no
            request asks for JSON.
    """

    items: tuple[ReplayItem, ...]
    agreement: OutputAgreement
    json: PairedComparison | None

    @property
    def n(self) -> int:
        """Requests replayed."""
        return len(self.items)

    def summary(self) -> dict[str, Any]:
        """The numbers the report shows: ``requests``, ``identical``, ``agreeing``, ``tie_flips``, ``share``
        (agreeing / requests), ``kl_mean`` (nats/token), ``first_divergence_median`` (tokens, over differing
        requests; None if none), ``tokens`` per side (sums), ``length_change`` (candidate / baseline output tokens
        - 1, a share; None when the baseline produced none), ``json`` (``requests``, ``valid`` per side,
        ``schema_requests``), ``tools`` (``requests``, ``agree``)."""
        items = self.items
        firsts = sorted(i.first_divergence for i in items if i.first_divergence is not None)
        base_tok, cand_tok = sum(i.base_tokens for i in items), sum(i.cand_tokens for i in items)
        js = [i for i in items if i.json_valid is not None]
        tl = [i for i in items if i.tool_names is not None]
        a = self.agreement
        return {
            "requests": a.n, "identical": a.identical, "agreeing": a.agreeing, "tie_flips": len(a.tie_flips),
            "share": a.share, "kl_mean": a.kl_mean,
            "first_divergence_median": _median(firsts), "tokens": {"baseline": base_tok, "candidate": cand_tok},
            "length_change": (cand_tok / base_tok - 1.0) if base_tok else None,
            "json": {"requests": len(js), "schema_requests": sum(i.has_schema for i in js),
                     "valid": {"baseline": sum(i.json_valid[0] for i in js),  # type: ignore[index]
                               "candidate": sum(i.json_valid[1] for i in js)}},  # type: ignore[index]
            "tools": {"requests": len(tl), "agree": sum(bool(i.tools_agree) for i in tl)},
        }


def _median(values: Sequence[int]) -> float | None:
    if not values:
        return None
    n = len(values)
    return float(values[n // 2]) if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def compare_replay(items: Sequence[ReplayItem], *, near_tie: float, alpha: float,
                   seed: int = 0, n_resamples: int = 10_000) -> ReplayComparison:
    """The run-level facts of ``items`` (module docstring).

    Args:
        items: per request (``replay_item``), at least one. near_tie: ``lossless.near_tie_logprob``, nats.
        alpha: the one-sided level of the valid-JSON interval. seed, n_resamples: the bootstrap's (``paired_comparison``
            draws it beside Newcombe's interval).
    Raises:
        ValueError: no items.
    """
    if not items:
        raise ValueError("no replayed requests: no evidence is never a pass")
    differing = tuple(i.line for i in items if not i.identical)
    ties = tuple(i.line for i in items if not i.identical and is_near_tie(i.tie_gap, near_tie))
    with_kl = [i for i in items if i.kl_mean is not None and i.kl_positions]
    positions = sum(i.kl_positions for i in with_kl)
    kl = sum(i.kl_mean * i.kl_positions for i in with_kl) / positions if positions else None  # type: ignore[operator]
    agreement = OutputAgreement(identical=sum(i.identical for i in items), n=len(items), differing=differing,
                                tie_flips=ties, kl_mean=kl)
    js = [i for i in items if i.json_valid is not None]
    cmp = None
    if js:
        b = np.array([float(i.json_valid[0]) for i in js])  # type: ignore[index]
        c = np.array([float(i.json_valid[1]) for i in js])  # type: ignore[index]
        cmp = paired_comparison(b, c, alpha=alpha, rng=np.random.default_rng(seed), n_resamples=n_resamples,
                                interval="auto")
    return ReplayComparison(items=tuple(items), agreement=agreement, json=cmp)


@dataclass(frozen=True)
class ReplayRun:
    """Both sides' answers to the replayed requests, as the engines returned them (before any comparison).

    Attributes:
        requests: the replayed requests, in log order. outputs: ``"baseline"`` / ``"candidate"`` -> one
            ``ReplayOutput`` per request, same order. log: what the report says of the log (``path``, ``sha256``,
            ``requests`` read, ``replayed``, ``only``, ``limit``, ``max_tokens``, ``sampling``). redact: ``replay.redact``.
    """

    requests: tuple[LoggedRequest, ...]
    outputs: Mapping[str, tuple[ReplayOutput, ...]]
    log: Mapping[str, Any]
    redact: bool = False

    def items(self) -> list[ReplayItem]:
        """``replay_item`` of every request. Raises ValueError: a side answered another number of requests."""
        base, cand = self.outputs["baseline"], self.outputs["candidate"]
        if not len(base) == len(cand) == len(self.requests):
            raise ValueError(f"replay: {len(self.requests)} requests, but {len(base)} baseline and {len(cand)} "
                             f"candidate answers")
        return [replay_item(r.line, b, c, wants_json=r.wants_json, schema=r.json_schema, tools=bool(r.tools))
                for r, b, c in zip(self.requests, base, cand)]

    def compare(self, *, near_tie: float, alpha: float, seed: int = 0, n_resamples: int = 10_000) -> ReplayComparison:
        """``compare_replay`` over ``items()``."""
        return compare_replay(self.items(), near_tie=near_tie, alpha=alpha, seed=seed, n_resamples=n_resamples)
