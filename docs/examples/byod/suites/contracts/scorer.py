"""Scoring of the ``contracts_qa`` task: normalised exact match of the first line of the answer.

lm-eval calls :func:`process_results` once per item with the item (one JSONL record) and the model's outputs; it
returns one value per ``metric_list`` entry. evalgate gates on the first, ``exact`` (1 = right, 0 = wrong), and
reads ``parsed`` (did the output have the answer's format) for its output-health evidence.
"""

from __future__ import annotations

import re
from typing import Any


def normalize(text: str) -> str:
    """``text`` as compared: case folded, outer spaces and full stops removed, thousands separators dropped
    (``USD 12,000.`` -> ``usd 12000``), runs of spaces made one."""
    text = text.strip().strip(".").casefold()
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    return " ".join(text.split())


def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """``exact``: 1.0 when the output's first line equals ``doc["answer"]`` after :func:`normalize`, else 0.0;
    ``parsed``: 1.0 when that line is not empty."""
    lines = results[0].strip().splitlines()
    answer = lines[0] if lines else ""
    return {"exact": float(bool(answer) and normalize(answer) == normalize(doc["answer"])),
            "parsed": float(bool(answer))}
