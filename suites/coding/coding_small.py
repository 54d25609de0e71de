"""coding_small: generated one-line Python functions with tests, executed in evalgate's sandbox like HumanEval.

Each item is a function signature and docstring in the style of the Python standard library (the code the
embedded hybrid was trained on), preceded by two solved functions of other kinds; the model completes the body.
The program ``prompt + completion + tests`` runs in ``evalgate.suites.sandbox.run_python`` (as ``coding_humaneval``).
Function kinds (``KINDS``) range from a one-token body (``return a + b``) to a short expression over a list;
names, parameter names and test values vary with ``random.Random(seed)``.
"""

from __future__ import annotations

import random
from typing import Callable

import datasets

from evalgate.suites import scoring

TIMEOUT_S = 10.0

# kind -> (function names, parameter-name tuples, docstring, body using {0}, {1}..., reference, argument maker)
_Args = Callable[[random.Random], tuple]
_ints = lambda r: (r.randrange(-50, 50), r.randrange(-50, 50))  # noqa: E731
_list = lambda r: ([r.randrange(-20, 40) for _ in range(r.randrange(1, 7))],)  # noqa: E731
_words = ("alpha", "beta", "gamma", "delta", "spam", "eggs", "foo", "bar", "tree", "node")
_str = lambda r: (r.choice(_words) + r.choice(("", "_", " ")) + r.choice(_words),)  # noqa: E731
KINDS: dict[str, tuple[tuple[str, ...], tuple[tuple[str, ...], ...], str, str, Callable, _Args]] = {
    "add": (("add", "plus", "total"), (("a", "b"), ("x", "y")), "Return the sum of {0} and {1}.",
            "return {0} + {1}", lambda a, b: a + b, _ints),
    "sub": (("subtract", "difference"), (("a", "b"), ("x", "y")), "Return {0} minus {1}.",
            "return {0} - {1}", lambda a, b: a - b, _ints),
    "mul": (("multiply", "product"), (("a", "b"), ("x", "y")), "Return the product of {0} and {1}.",
            "return {0} * {1}", lambda a, b: a * b, _ints),
    "square": (("square", "squared"), (("x",), ("n",), ("value",)), "Return {0} squared.",
               "return {0} * {0}", lambda x: x * x, lambda r: (r.randrange(-30, 30),)),
    "negate": (("negate", "negative"), (("x",), ("n",)), "Return {0} with the opposite sign.",
               "return -{0}", lambda x: -x, lambda r: (r.randrange(-30, 30),)),
    "is_even": (("is_even", "even"), (("n",), ("x",)), "Return True if {0} is even, else False.",
                "return {0} % 2 == 0", lambda n: n % 2 == 0, lambda r: (r.randrange(-40, 40),)),
    "is_positive": (("is_positive", "positive"), (("n",), ("x",)), "Return True if {0} is greater than zero.",
                    "return {0} > 0", lambda n: n > 0, lambda r: (r.randrange(-40, 40),)),
    "maximum": (("maximum", "larger", "bigger"), (("a", "b"), ("x", "y")), "Return the larger of {0} and {1}.",
                "return max({0}, {1})", max, _ints),
    "minimum": (("minimum", "smaller"), (("a", "b"), ("x", "y")), "Return the smaller of {0} and {1}.",
                "return min({0}, {1})", min, _ints),
    "absolute": (("absolute", "magnitude"), (("x",), ("n",)), "Return the absolute value of {0}.",
                 "return abs({0})", abs, lambda r: (r.randrange(-40, 40),)),
    "first": (("first", "head"), (("items",), ("seq",), ("lst",)), "Return the first element of {0}.",
              "return {0}[0]", lambda s: s[0], _list),
    "last": (("last", "tail_item"), (("items",), ("seq",), ("lst",)), "Return the last element of {0}.",
             "return {0}[-1]", lambda s: s[-1], _list),
    "length": (("length", "size", "count_items"), (("items",), ("seq",)), "Return the number of elements in {0}.",
               "return len({0})", len, _list),
    "total": (("total", "sum_all"), (("items",), ("numbers",), ("values",)), "Return the sum of the numbers in {0}.",
              "return sum({0})", sum, _list),
    "largest": (("largest", "max_item"), (("items",), ("numbers",)), "Return the largest number in {0}.",
                "return max({0})", max, _list),
    "sorted_copy": (("sorted_copy", "in_order"), (("items",), ("numbers",)),
                    "Return a new list with the elements of {0} in ascending order.",
                    "return sorted({0})", sorted, _list),
    "reverse": (("reverse", "reversed_list"), (("items",), ("seq",)),
                "Return a new list with the elements of {0} in reverse order.",
                "return {0}[::-1]", lambda s: s[::-1], _list),
    "upper": (("upper", "to_upper", "shout"), (("s",), ("text",), ("name",)), "Return {0} in upper case.",
              "return {0}.upper()", str.upper, _str),
    "lower": (("lower", "to_lower"), (("s",), ("text",)), "Return {0} in lower case.",
              "return {0}.lower()", str.lower, lambda r: (r.choice(_words).upper(),)),
    "strip": (("strip", "trim"), (("s",), ("text",), ("line",)),
              "Return {0} without leading and trailing whitespace.", "return {0}.strip()", str.strip,
              lambda r: (" " * r.randrange(0, 3) + r.choice(_words) + " " * r.randrange(0, 3),)),
    "is_empty": (("is_empty", "empty"), (("items",), ("seq",)), "Return True if {0} is empty.",
                 "return not {0}", lambda s: not s, lambda r: ([r.randrange(9) for _ in range(r.randrange(0, 3))],)),
    "contains": (("contains", "has_item"), (("items", "value"), ("seq", "x")),
                 "Return True if {1} is in {0}.", "return {1} in {0}", lambda s, x: x in s,
                 lambda r: ([r.randrange(6) for _ in range(r.randrange(1, 5))], r.randrange(6))),
    "join_words": (("join_words", "join"), (("words",), ("parts",)),
                   "Return the strings in {0} joined by single spaces.", "return ' '.join({0})",
                   lambda w: " ".join(w), lambda r: (r.sample(_words, r.randrange(1, 4)),)),
    "split_words": (("split_words", "words"), (("s",), ("text",)), "Return the list of words in {0}.",
                    "return {0}.split()", str.split, lambda r: (" ".join(r.sample(_words, r.randrange(1, 4))),)),
}
N_TESTS = 5


def _function(kind: str, rng: random.Random) -> dict:
    """One function of ``kind``: its prompt part (signature + docstring), solution body, and test code."""
    names, params, doc, body, ref, args = KINDS[kind]
    name, ps = rng.choice(names), rng.choice(params)
    head = f"def {name}({', '.join(ps)}):\n    \"\"\"{doc.format(*ps)}\"\"\"\n"
    cases = [args(rng) for _ in range(N_TESTS)]
    test = "\n".join(f"assert {name}({', '.join(map(repr, c))}) == {ref(*c)!r}" for c in cases) + "\n"
    return {"kind": kind, "name": name, "head": head, "body": "    " + body.format(*ps) + "\n", "test": test}


def make_items(seed: int, n: int, prefix: str, same_kind_shot: bool = True, hint: bool = False) -> list[dict]:
    """``n`` items from ``random.Random(seed)``, kinds in rotation over ``KINDS`` (sorted); each: id, doc_group,
    kind, prompt (two solved functions, then the item's signature and docstring), canonical_solution (the body),
    test (assert lines), entry_point. With ``same_kind_shot`` the second solved function is of the item's own kind
    (other names; as docparse shows an example of the same document kind), else of another kind; ``hint`` ends
    the prompt with the body's first word (``    return``)."""
    rng = random.Random(seed)
    kinds = sorted(KINDS)
    items = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        target = _function(kind, rng)
        others = rng.sample([k for k in kinds if k != kind], 2)
        shots = [_function(k, rng) for k in (others[0], kind if same_kind_shot else others[1])]
        while not set(KINDS[kind][0]) - {s["name"] for s in shots}:  # the shots took every name of this kind
            others = rng.sample([k for k in kinds if k != kind], 2)
            shots = [_function(k, rng) for k in (others[0], kind if same_kind_shot else others[1])]
        while target["name"] in {s["name"] for s in shots} or target["head"] in {s["head"] for s in shots}:
            target = _function(kind, rng)
        prompt = "".join(s["head"] + s["body"] + "\n\n" for s in shots) + target["head"]
        body = target["body"]
        if hint:
            prompt, body = prompt + "    return", body.removeprefix("    return")
        items.append({"id": f"{prefix}-{i:04d}", "doc_group": f"{prefix}-{i:04d}", "kind": kind, "prompt": prompt,
                      "canonical_solution": body, "test": target["test"], "entry_point": target["name"]})
    return items


def load_data(seed: int = 20261203, n_test: int = 240, same_kind_shot: bool = True, hint: bool = False,
              **_: object) -> dict[str, datasets.Dataset]:
    """lm-eval ``custom_dataset`` hook: ``{"test": Dataset}`` of ``n_test`` generated functions."""
    items = make_items(int(seed), int(n_test), "coding-small", bool(same_kind_shot), bool(hint))
    return {"test": datasets.Dataset.from_list(items)}


def build_program(doc: dict, completion: str) -> str:
    """The program that passes iff ``completion`` (the body) makes every assert hold."""
    return doc["prompt"] + completion + "\n\n" + doc["test"]


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """pass_at_1: 1.0 iff ``build_program`` exits 0 in the sandbox within ``TIMEOUT_S``."""
    outcome = scoring.pool().run(build_program(doc, results[0] if results else ""), timeout_s=TIMEOUT_S)
    return {"pass_at_1": float(outcome.passed)}


# Completions start in the sandbox pool as they are generated (evalgate.suites.scoring); process_results picks them up.
scoring.register_program("coding_small", build_program, timeout_s=TIMEOUT_S)
