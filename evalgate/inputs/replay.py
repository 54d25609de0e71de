"""The replay gate's input (``thresholds.yaml``'s ``replay`` section): which recorded requests are replayed, with
which output budget, checked before any engine starts. Pure: the worker renders and counts tokens
(``evalgate.worker.replay_gate``); ``check_lengths`` judges the counts against the engine's ``max_model_len``.

The log is read by ``requestlog.read_request_log`` (its formats and its one-line errors, naming the file, the line
and the field). Then ``replay.only: structured`` keeps the requests that ask for JSON or offer tools, and
``replay.limit`` the first ones of those; nothing left is an error (exit 2). Each request's output budget is its
recorded one capped at ``replay.max_tokens`` (a record without one gets ``replay.max_tokens``); its sampling is
greedy, or with ``replay.sampling: recorded`` its own temperature and top-p with a fixed seed (``ReplayPlan.sampling``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError
from evalgate.inputs.requestlog import LoggedRequest, RequestLog, read_request_log
from evalgate.inputs.thresholds import ReplaySection, Thresholds

__all__ = ["FIELD", "ReplayPlan", "check_lengths", "load_replay", "select"]

FIELD = {"chat": "messages", "prompt": "prompt", "sharegpt": "conversations"}  # the record field a problem names


@dataclass(frozen=True)
class ReplayPlan:
    """The requests the replay gate sends to both sides.

    Attributes:
        section: the ``replay`` section. log: the whole checked log. requests: the chosen ones, in log order.
    """

    section: ReplaySection
    log: RequestLog
    requests: tuple[LoggedRequest, ...]

    def budget(self, request: LoggedRequest) -> int:
        """Output tokens for ``request``: its recorded budget capped at ``replay.max_tokens``, else that cap."""
        cap = self.section.max_tokens
        return cap if request.max_tokens is None else min(request.max_tokens, cap)

    def sampling(self, request: LoggedRequest) -> dict[str, Any]:
        """The sampling both sides use for ``request``: ``{"temperature": 0.0}`` (greedy), or with ``sampling:
        recorded`` its own ``temperature`` (absent: 0) and ``top_p`` (absent: 1.0) and a fixed ``seed`` (its
        recorded one, else ``replay.seed`` + its line)."""
        if self.section.sampling == "greedy":
            return {"temperature": 0.0}
        rec = request.sampling
        return {"temperature": float(rec.get("temperature", 0.0)), "top_p": float(rec.get("top_p", 1.0)),
                "seed": int(rec.get("seed", self.section.seed + request.line))}

    def spec(self) -> dict[str, Any]:
        """What the worker needs to replay the same requests: ``{"path", "sha256", "lines", "budgets",
        "sampling"}`` (the log is read again there and must have the same SHA-256)."""
        return {"path": str(self.log.path), "sha256": self.log.sha256, "lines": [r.line for r in self.requests],
                "budgets": [self.budget(r) for r in self.requests],
                "sampling": [self.sampling(r) for r in self.requests]}


def select(log: RequestLog, section: ReplaySection) -> tuple[LoggedRequest, ...]:
    """The requests of ``log`` that ``section`` replays (module docstring): ``only`` first, then ``limit``."""
    chosen = [r for r in log.requests if section.only == "all" or r.wants_json or r.tools]
    return tuple(chosen[:section.limit] if section.limit is not None else chosen)


def load_replay(thresholds: Thresholds) -> ReplayPlan | None:
    """The replay plan of ``thresholds`` (None: no ``replay`` section). ``replay.from`` is relative to the
    thresholds file.

    Raises:
        ConfigError (exit 2): the log is missing or a directory (naming the thresholds file and ``replay.from``);
            every problem of the log itself (``read_request_log``: its file, line and field); no request left after
            ``only`` (naming ``replay.only``).
    """
    section = thresholds.replay
    if section is None:
        return None
    base = Path(thresholds.path).parent if thresholds.path is not None else Path(".")
    path = Path(os.path.normpath(base / section.from_))
    if not path.exists():
        raise ConfigError(f"request log not found: {path}", path=thresholds.path, field="replay.from")
    if path.is_dir():
        raise ConfigError(f"request log {path} is a directory, not a file", path=thresholds.path, field="replay.from")
    log = read_request_log(path)
    chosen = select(log, section)
    if not chosen:
        raise ConfigError(f"no request of {path} ({len(log.requests)} read) asks for JSON (response_format) or offers "
                          f"tools, so nothing is left to replay", path=thresholds.path, field="replay.only")
    return ReplayPlan(section=section, log=log, requests=chosen)


def check_lengths(plan: ReplayPlan, prompt_tokens: Sequence[int], max_model_len: int, config: str) -> None:
    """Refuse a request too long for the engine: prompt tokens (as the worker's tokenizer counts them, in
    ``plan.requests`` order) plus its output budget above ``max_model_len`` (of ``config``'s engine).

    Raises:
        ConfigError (exit 2): naming the log file, the request's line and field, the counts and the limit; also
            when the counts do not match the requests (a worker that counted another log).
    """
    if len(prompt_tokens) != len(plan.requests):
        raise ConfigError(f"the engine counted {len(prompt_tokens)} prompts, the replay has {len(plan.requests)}",
                          path=plan.log.path)
    for r, n in zip(plan.requests, prompt_tokens):
        if n + plan.budget(r) > max_model_len:
            raise ConfigError(f"{n} prompt tokens + {plan.budget(r)} output tokens exceed max_model_len "
                              f"{max_model_len} of {config}'s engine (lower replay.max_tokens or drop the request)",
                              path=plan.log.path, field=f"{plan.log.where(r)}: {FIELD[r.kind]}")
