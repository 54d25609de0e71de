"""finance_tatqa: TAT-QA (hybrid table + text questions from real financial reports), 3-shot, scored by the
official TAT-QA evaluation: exact match and numeracy-focused F1, with the answer's scale.

Data: ``data/tatqa/`` (a subset of the published dev set, CC BY 4.0; what and why in its README.md). The
published data is ``dataset_raw/tatqa_dataset_dev.json`` of github.com/NExTplusplus/TAT-QA; the authors' hub copy
is ``next-tat/TAT-QA``. Each item is one question; the questions of one context (a table and
its paragraphs) share its ``doc_group``. Prompt: the context as ``Table:`` rows (cells joined by `` | ``) and
``Text:`` paragraphs, the question, ``Answer:``; the worked examples answer in two lines, the answer (spans
joined by `` | ``) and ``Scale: none|thousand|million|billion|percent``. :func:`parse_prediction` reads those
two lines back as the ``[answer, scale]`` pair the official script takes.

Scoring follows ``tatqa_metric.py`` / ``tatqa_utils.py`` of github.com/NExTplusplus/TAT-QA (commit 4bd0b9c,
"revise eval and metric"), re-implemented here function by function, with the same names; each function
cites the one it follows. Behaviour kept on purpose, although it surprises:

* ``negative_num_handle`` reads ``(134)`` as -134 but ``(1,234)`` as +1234: its pattern ``\\([\\d.\\s]+\\)``
  admits no comma. A gold ``(6,533)`` is matched by ``6,533`` and ``(6,533)``, not by ``-6,533``.
* every number is compared as ``'%.4f' % (round(x, 2) * scale)``: 1,496.5 million and 1496500000 agree.
* a percent answer matches as a fraction: gold 23.42 with scale ``percent`` is 0.2342, matched by ``23.42%``,
  by ``0.2342`` (``add_percent_pred``) and by ``23.42`` with scale ``percent``, not by ``23.42`` alone.
* for arithmetic and count questions F1 is set to the exact match.
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

import datasets

DATA = Path(__file__).resolve().parent / "data" / "tatqa"
SCALES = ("thousand", "million", "billion", "percent")
SPAN_SEP = " | "


# ---------------------------------------------------------------- data and prompt
def render_context(ctx: dict) -> str:
    """A TAT-QA context (published schema: ``table.table`` rows of cells, ``paragraphs`` with ``order``) as text:
    ``Table:`` then one line per row, cells whitespace-collapsed and joined by `` | ``, then ``Text:`` and the
    paragraphs in order."""
    rows = [" | ".join(" ".join(str(cell).split()) for cell in row) for row in ctx["table"]["table"]]
    paragraphs = [p["text"] for p in sorted(ctx["paragraphs"], key=lambda p: int(p["order"]))]
    return "Table:\n" + "\n".join(rows) + "\nText:\n" + "\n".join(paragraphs)


def format_answer(answer: object, answer_type: str, scale: str) -> str:
    """The worked-example answer: the gold answer (spans joined by `` | ``; a count as an integer) and its scale
    line, e.g. ``"-12.6\\nScale: million"``."""
    if answer_type in ("span", "multi-span"):
        text = SPAN_SEP.join(str(a) for a in answer)
    elif answer_type == "count":
        text = str(int(answer))
    else:
        text = str(answer)
    return f"{text}\nScale: {scale or 'none'}"


def _items(path: Path) -> list[dict]:
    items = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            ctx = json.loads(line)
            context = render_context(ctx)
            for q in sorted(ctx["questions"], key=lambda q: int(q["order"])):
                items.append({"id": q["uid"], "doc_group": ctx["table"]["uid"], "context": context,
                              "question": q["question"], "answer_type": q["answer_type"],
                              "answer_from": q["answer_from"], "scale": q["scale"],
                              "answer_json": json.dumps(q["answer"], ensure_ascii=False),
                              "target": format_answer(q["answer"], q["answer_type"], q["scale"])})
    return items


def load_data(**_: object) -> dict[str, datasets.Dataset]:
    """lm-eval ``custom_dataset`` hook: ``{"test": the shipped questions, "fewshot": the 3 worked examples}``.

    Each item: id (the question's uid), doc_group (its context's table uid), context (rendered), question,
    answer_type, answer_from, scale, answer_json (the gold answer as published, JSON), target (worked answer).
    """
    return {"test": datasets.Dataset.from_list(_items(DATA / "dev_subset.jsonl")),
            "fewshot": datasets.Dataset.from_list(_items(DATA / "fewshot.jsonl"))}


def parse_prediction(text: str) -> tuple[list[str], str]:
    """``(answer spans, scale)`` from a generation that continues ``Answer:``: the first non-empty line, split
    on `` | ``; the scale is the first of thousand/million/billion/percent on a ``Scale:`` line, else ``""``."""
    lines = [ln.strip() for ln in text.strip().split("\n")]
    answer = next((ln for ln in lines if ln), "")
    spans = [s.strip() for s in answer.split(SPAN_SEP.strip()) if s.strip()] if answer else []
    scale = ""
    m = re.search(r"Scale:\s*([A-Za-z]+)", text)
    if m and m.group(1).lower() in SCALES:
        scale = m.group(1).lower()
    return spans, scale


# ---------------------------------------------------------------- official metric (tatqa_utils.py)
EXCLUDE_IN_NUM = "'\"\\$€£¥%(),[]"
_NUM = re.compile(r"([+-]?\d+(\.\d+)?)|([+-]?\.\d+)")


def scale_to_num(scale: str) -> int | float:
    """tatqa_utils.scale_to_num: 100 / 1000 / 10**6 / 10**9 for a text containing hundred / thousand / million /
    billion (checked in that order), 0.01 for percent, else 1. Ints except percent, as upstream (``round`` of an
    int stays an int, so ``(134)`` normalizes to ``-134``, not ``-134.0``)."""
    s = scale.lower()
    for word, num in (("hundred", 100), ("thousand", 1000), ("million", 1000000), ("billion", 1000000000)):
        if word in s:
            return num
    return 0.01 if "percent" in s else 1


def _clean_num(text: str) -> str:
    return "".join(ch for ch in str(text) if ch not in EXCLUDE_IN_NUM)


def extract_one_num_from_str(s: str) -> int | float | None:
    """tatqa_utils.extract_one_num_from_str: the first number after removing ``'"\\$€£¥%(),[]``; an int unless it
    has a ``.``; None when there is none or it starts with the point (``.5``: upstream's group 0 is then empty)."""
    groups = _NUM.findall(_clean_num(s))
    if not groups or groups[0][0] == "":
        return None
    num = groups[0][0]
    return float(num) if "." in num else int(num)


def is_number(text: str) -> bool:
    """tatqa_utils.is_number: the first whitespace word (cleaned) parses as a float that is not NaN, and a second
    word, if any, is a scale word (``1023``, ``1 million``, ``12 percent``; not ``2019 and 2018``)."""
    words = " ".join(_clean_num(w) for w in text.split()).split()
    if not words:
        return False
    try:
        num = float(words[0])
    except ValueError:
        return False
    if num != num:  # NaN
        return False
    return not (len(words) >= 2 and scale_to_num(words[1]) == 1)


def negative_num_handle(x: str) -> int:
    """tatqa_utils.negative_num_handle: -1 if the text has ``(digits, dots, spaces)``, e.g. ``(134)``; a comma
    inside the brackets does not count (``(1,234)`` gives +1)."""
    return -1 if re.findall(r"(\([\d.\s]+\))", x.strip()) else 1


def percent_num_handle(x: str) -> int | float:
    """tatqa_utils.percent_num_handle: 0.01 if the text has digits followed by ``%``, else 1."""
    return 0.01 if re.findall(r"([\d.\s]+%)", x.strip()) else 1


def word_scale_handle(x: str) -> int | float:
    """tatqa_utils.word_scale_handle: the scale of the first ``<digits><optional space><letters>`` in the text
    (``1.2 million`` -> 10**6), else 1."""
    m = re.search(r"([\d.]+\s?[a-zA-Z]+)", x)
    return scale_to_num(m.group(0).lower()) if m else 1


def to_number(text: str) -> int | float | None:
    """tatqa_utils.to_number: first number x word scale x sign x percent, rounded to 4 decimals; None if none."""
    num = extract_one_num_from_str(text)
    if num is None:
        return None
    return round(num * word_scale_handle(text) * negative_num_handle(text) * percent_num_handle(text), 4)


def normalize_answer(text: str) -> str:
    """tatqa_utils.normalize_answer: per space-separated token, lower-case, strip punctuation (unless the token is
    a number), a number to ``str(to_number)``, drop articles, collapse whitespace; empty tokens dropped."""
    parts = []
    for token in re.split(" ", text):
        token = token.lower()
        if not is_number(token):
            token = "".join(ch for ch in token if ch not in string.punctuation)
        if is_number(token):
            token = str(to_number(token))
        token = " ".join(re.sub(r"\b(a|an|the)\b", " ", token).split())
        if token.strip():
            parts.append(token)
    return " ".join(parts).strip()


# ---------------------------------------------------------------- official metric (tatqa_metric.py)
def _compute_f1(predicted_bag: set[str], gold_bag: set[str]) -> float:
    """tatqa_metric._compute_f1: token-set F1 (an empty bag has precision/recall 1)."""
    inter = len(gold_bag & predicted_bag)
    precision = 1.0 if not predicted_bag else inter / len(predicted_bag)
    recall = 1.0 if not gold_bag else inter / len(gold_bag)
    return 0.0 if precision == 0.0 and recall == 0.0 else 2 * precision * recall / (precision + recall)


def get_metrics(predicted: str, gold: str) -> tuple[float, float]:
    """tatqa_metric.get_metrics for two answer strings: (exact match of the normalized strings, token-set F1 of
    their normalized tokens rounded to 2 decimals). Upstream aligns bags with the Hungarian method; with one
    string on each side (get_answer_str joins all spans into one) that alignment is this single pair."""
    p, g = normalize_answer(predicted), normalize_answer(gold)
    return float(p == g), round(_compute_f1(set(p.split()), set(g.split())), 2)


def get_answer_str(answers: list[str], scale: str) -> list[str]:
    """tatqa_metric.get_answer_str: the answers sorted, each number as ``'%.4f' % (round(x, 2) * scale)`` (or
    ``'%.4f' % x`` if it holds ``%``), anything else with the scale word appended; joined by spaces, as one
    string in a list."""
    out = []
    for ans in sorted(answers):
        s = str(ans)
        num = to_number(s) if is_number(s) else None
        if num is None:
            out.append(f"{s} {scale}" if scale else s)
        elif "%" in s:
            out.append("%.4f" % num)
        else:
            out.append("%.4f" % (round(num, 2) * scale_to_num(scale)))
    return [" ".join(out)]


def add_percent_pred(prediction_strings: list[str], pred_scale: str, pred: list[str]) -> list[str]:
    """tatqa_metric.add_percent_pred: for a single numeric prediction without scale or ``%``, also try its plain
    value (``0.2342`` then matches gold 23.42 percent)."""
    if len(pred) > 1:
        return prediction_strings
    s = str(pred[0])
    if not pred_scale and "%" not in s and is_number(s):
        num = to_number(s)
        if num is not None:
            prediction_strings.append("%.4f" % num)
    return prediction_strings


def extract_gold_answers(qa: dict) -> tuple[str, list[str], str]:
    """tatqa_metric.extract_gold_answers: (answer_type, gold answer strings, scale) of a published question."""
    answer_type, answer = qa["answer_type"], qa["answer"]
    if answer_type in ("span", "multi-span"):
        gold = list(answer)
    elif answer_type == "count":
        gold = [str(int(answer))]
    else:
        gold = [str(answer)]
    return answer_type, gold, qa["scale"]


def score(qa: dict, prediction: str | list[str], pred_scale: str = "") -> dict[str, float]:
    """One question scored as ``TaTQAEmAndF1.__call__`` scores it (tatqa_metric.py).

    Args:
        qa: the published question (answer_type, answer, scale).
        prediction: the predicted answer or spans; empty means no answer (0, 0).
        pred_scale: ``""``, thousand, million, billion or percent.
    Returns:
        ``{"em": 0|1, "f1": in [0, 1], "scale": 1.0 iff pred_scale equals the gold scale}``; ``scale`` is counted
        as upstream's ``_scale_em`` (only for a non-empty prediction).
    """
    pred = prediction if isinstance(prediction, list) else [prediction]
    gold_type, gold, gold_scale = extract_gold_answers(qa)
    if not prediction or not pred or not gold:
        return {"em": 0.0, "f1": 0.0, "scale": 0.0}
    gold_strings = get_answer_str(gold, gold_scale)
    pred_strings = add_percent_pred(get_answer_str(pred, pred_scale), pred_scale, pred)
    em, f1 = max(get_metrics(p, g) for p in pred_strings for g in gold_strings)
    if gold_type in ("arithmetic", "count"):
        f1 = em
    return {"em": em, "f1": float(f1), "scale": float(pred_scale == gold_scale)}


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """Per-item metrics of the generation ``results[0]``: em, f1 (see :func:`score`) and scale."""
    spans, scale = parse_prediction(results[0] if results else "")
    qa = {"answer_type": doc["answer_type"], "answer": json.loads(doc["answer_json"]), "scale": doc["scale"]}
    return score(qa, spans, scale)
