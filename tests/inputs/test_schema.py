"""evalgate.inputs.schema: the base model of input files and the one-line errors its validation gives."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar

import pytest
from pydantic import Field

from evalgate.errors import ConfigError
from evalgate.inputs.schema import Schema, choice, key_rows, markdown_table, rule, show, suggest, validate

Small = Annotated[int, Field(strict=True, ge=1, le=9), rule("{field} must be a digit", greater_than_equal="too small")]


class Inner(Schema):
    allow_empty: ClassVar[bool] = False
    level: Small = None  # type: ignore[assignment]
    """A digit."""
    mode: choice("a", "b") = "a"  # type: ignore[valid-type]
    """a or b."""


class Outer(Schema):
    count: Small = Field(json_schema_extra={"required": "count is required (e.g. 3)"})
    """How many."""
    inner: Inner = Inner(level=1)
    """One nested entry."""
    items: dict[Annotated[str, Field(strict=True, min_length=1), rule("keys must be non-empty strings")], Inner] = {}
    """Named entries."""


P = Path("f.yaml")


def _err(data: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate(Outer, data, P)
    assert "\n" not in str(info.value)
    return info.value


def test_show_and_suggest() -> None:
    assert [show(v) for v in (True, None, "two", [1], {"a": 1}, 2.5)] == [
        "true (a boolean)", "null", "'two' (a string)", "a list", "a mapping", "2.5"]
    assert show("x" * 60).endswith("...' (a string)") and len(show("x" * 60)) < 60
    assert suggest("alpah", ["alpha", "power"]) == "; did you mean 'alpha'?"
    assert suggest("zzz", ["alpha", "power"]) == "; valid keys: alpha, power"
    assert suggest("zzz", ["alpha"], list_all=False) == ""


def test_a_valid_mapping_validates() -> None:
    got = validate(Outer, {"count": 3, "items": {"e": {"mode": "b"}}}, P)
    assert (got.count, got.inner.level, got.items["e"].mode, got.items["e"].level) == (3, 1, "b", None)


@pytest.mark.parametrize(("data", "field", "message"), [
    ({"cuont": 3}, "cuont", "unknown key 'cuont'; did you mean 'count'?"),
    ({}, "count", "count is required (e.g. 3)"),
    ({"count": True}, "count", "count must be a digit, got true (a boolean)"),
    ({"count": 0}, "count", "too small, got 0"),
    ({"count": 12}, "count", "count must be a digit, got 12"),
    ({"count": 3, "inner": {"level": "4"}}, "inner.level", "inner.level must be a digit, got '4' (a string)"),
    ({"count": 3, "inner": {"mode": "c"}}, "inner.mode", "must be one of a, b, got 'c' (a string)"),
    ({"count": 3, "inner": {}}, "inner", "empty entry: set level and/or mode"),
    ({"count": 3, "inner": [1]}, "inner", "value must be a mapping, got a list"),
    ({"count": 3, "items": {"": {"level": 2}}}, "items", "keys must be non-empty strings, got '' (a string)"),
    ({"count": 3, "items": {"e": {"levle": 2}}}, "items.e.levle", "unknown key 'levle'; did you mean 'level'?"),
])
def test_errors_name_the_file_the_dotted_field_and_the_reason(data: object, field: str, message: str) -> None:
    err = _err(data)
    assert err.field == field
    assert str(err) == f"{P}: {field}: {message}"


def test_a_prefix_names_a_section_validated_on_its_own() -> None:
    with pytest.raises(ConfigError) as info:
        validate(Inner, {"level": 0}, P, prefix="sampling.")
    assert info.value.field == "sampling.level" and str(info.value) == f"{P}: sampling.level: too small, got 0"


def test_key_rows_and_markdown_table() -> None:
    rows = key_rows(Outer)
    assert rows == [
        ("count", "required", "How many."),
        ("inner", "-", "One nested entry."),
        ("inner.level", "-", "A digit."),
        ("inner.mode", "a", "a or b."),
        ("items.<item>", "{}", "Named entries. Same keys as `inner`."),
    ]
    table = markdown_table(rows).splitlines()
    assert table[:2] == ["| key | default | meaning |", "|---|---|---|"]
    assert table[2] == "| `count` | required | How many. |" and table[5] == "| `inner.mode` | `a` | a or b. |"
