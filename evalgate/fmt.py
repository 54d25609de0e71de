"""How every output writes numbers: points, signed deltas, intervals, p-values, ratios (pure).

One place, so a reason in ``verdict.json``, the HTML report, the JUnit file, the Markdown summary, the terminal
table and the SVG plots show the same value the same way: a real minus sign (U+2212), ``+`` on a positive signed
value (a difference), no sign on zero (``0.0``, also for a value that rounds to zero), and ``n/a`` (or ``NaN`` in
the gate's sentences) where a value is missing. A decision rule (``verdict.json``'s ``rule``, ASCII data) is shown
with the same signs: ``rule_text``.
"""

from __future__ import annotations

import math
import re
from typing import Any

MINUS = "\u2212"


def num(x: float, decimals: int = 1, *, signed: bool = True) -> str:
    """``x`` with ``decimals`` decimals, a real minus sign and ``+`` on positives (``signed``); zero has no sign;
    ``NaN``, ``+inf`` and ``−inf`` for non-finite values (the gate's sentences)."""
    if not math.isfinite(x):
        return "NaN" if math.isnan(x) else (f"{MINUS}inf" if x < 0 else "+inf")
    text = f"{x:.{decimals}f}"
    if float(text) == 0.0:
        return f"{0.0:.{decimals}f}"
    if text.startswith("-"):
        return MINUS + text[1:]
    return ("+" + text) if signed else text


def count(n: int, noun: str) -> str:
    """``n`` (with thousands separators) and ``noun``, plural unless ``n`` is 1: ``count(1, "restart")`` is
    ``"1 restart"``, ``count(1200, "preemption")`` ``"1,200 preemptions"`` (regular English plurals only: the nouns
    evalgate counts)."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at the last space before the limit (a word is never cut in
    two), ending in ``…`` when something was cut; a text with no space in its first ``limit - 1`` characters is cut
    there. ValueError: ``limit`` < 2."""
    if limit < 2:
        raise ValueError(f"clip needs a limit of at least 2 characters, got {limit}")
    if len(text) <= limit:
        return text
    head = text[:limit - 1]
    cut = head.rfind(" ")
    return (head[:cut].rstrip() if cut > 0 else head) + "\u2026"


_ASCII_RELATIONS = (("<=", "\u2264"), (">=", "\u2265"))
_ASCII_MINUS = re.compile(r"(?<![\w.])-(?=[A-Za-z\d])")  # "-margin", " -1.5"; not "non-inferiority"


def rule_text(rule: str) -> str:
    """A decision rule as reports show it: ``non-inferiority: LB >= -margin and MDE <= margin`` (the ASCII string
    ``verdict.json`` stores) reads ``non-inferiority: LB \u2265 \u2212margin and MDE \u2264 margin``."""
    for ascii_op, op in _ASCII_RELATIONS:
        rule = rule.replace(ascii_op, op)
    return _ASCII_MINUS.sub(MINUS, rule)


def decimals_apart(a: float, b: float) -> int:
    """Fewest decimals (1..15) at which ``a`` and ``b`` print differently, when they differ (1 when equal), so a
    lower bound just below ``-margin`` never prints equal to it."""
    for d in range(1, 16):
        if a == b or f"{a:.{d}f}" != f"{b:.{d}f}":
            return d
    return 15


def p_value(x: float) -> str:
    """A p-value: two significant digits, scientific below 0.001, ``NaN`` when undefined."""
    return "NaN" if math.isnan(x) else f"{x:.2g}" if x >= 0.001 else f"{x:.1e}"


def pts(x: float | None, signed: bool = True) -> str:
    """Points with one decimal and a real minus sign (zero unsigned); ``n/a`` for a missing or NaN value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return num(float(x), 1, signed=signed)


def interval(lo: float | None, hi: float | None) -> str:
    """``[lo, hi]`` in points (``pts``)."""
    return f"[{pts(lo)}, {pts(hi)}]"


def ratio(x: Any) -> str:
    """A speed-up ratio with two decimals, ``n/a`` when missing or not finite."""
    return f"{float(x):.2f}" if isinstance(x, (int, float)) and math.isfinite(x) else "n/a"


def finite(x: Any) -> float | None:
    """``x`` as a float when it is a finite number, else None (missing values of a plot or a table)."""
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def json_number(x: float | None) -> float | None:
    """``x``, or None for NaN or None: verdict.json writes an undefined statistic as ``null``."""
    return None if x is None or math.isnan(x) else x
