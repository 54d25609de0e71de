"""The base of evalgate's typed input models, and the translation of their validation errors into one-line errors.

Every input file (an engine config, ``thresholds.yaml``) is described by pydantic models built on :class:`Schema`:
one field per YAML key, its type, its default and its docstring. Validation messages keep evalgate's one-line form
(``file: dotted.field: reason, got <value>``) and suggest the closest valid key: a field's message is attached to its
type with :func:`rule`, and :func:`validate` turns the first pydantic error into that ``ConfigError`` (exit 2).
:func:`key_rows` lists a model's keys with their defaults and docstrings: the docs' key tables are generated
from it (``docs/hooks.py``; checked by ``tests/system/test_docs_reference.py``).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, WrapValidator, model_validator
from pydantic_core import PydanticCustomError, PydanticUndefined

from evalgate.errors import ConfigError

SCHEMA_VERSION = 1  # the version of the config and thresholds schemas below; files may say ``version: 1``
_ERROR = "evalgate"  # the pydantic error type of every message evalgate words itself


def show(value: Any) -> str:
    """A short one-line rendering of a YAML value for error messages: ``true (a boolean)``, ``null``,
    ``'two' (a string)``, ``a list``, ``a mapping``, else ``repr``."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if value is None:
        return "null"
    if isinstance(value, str):
        text = repr(value)
        return (text if len(text) <= 40 else text[:37] + "...'") + " (a string)"
    if isinstance(value, (list, tuple, dict)):
        return f"a {'mapping' if isinstance(value, dict) else 'list'}"
    return repr(value)


def suggest(key: str, valid: Iterable[str], *, list_all: bool = True) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``valid`` (difflib, cutoff 0.6), else the list of valid keys
    (or nothing when ``list_all`` is false)."""
    valid = list(valid)
    close = difflib.get_close_matches(key, valid, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; valid keys: {', '.join(valid)}" if list_all else ""


def problem(message: str, key: str | None = None) -> PydanticCustomError:
    """A validation error worded by evalgate. ``key``: a child key the message is about (appended to the dotted
    field, e.g. an unknown key)."""
    ctx: dict[str, Any] = {"message": message}
    if key is not None:
        ctx["key"] = key
    return PydanticCustomError(_ERROR, "{message}", ctx)


def rule(message: str, **by_error: str) -> WrapValidator:
    """Attach evalgate's message to a field type (``Annotated[float, Field(ge=0), rule(...)]``).

    Any error of the inner validation (wrong type, out of range) becomes ``"<message>, got <value>"``; ``by_error``
    gives another message for one pydantic error type (e.g. ``less_than_equal=...``). ``{field}`` in a message is
    replaced by the dotted field name.
    """

    def wrap(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            kind = exc.errors()[0]["type"]
            raise problem(f"{by_error.get(kind, message)}, got {show(value)}") from None

    return WrapValidator(wrap)


def choice(*values: str) -> Any:
    """A string field that takes one of ``values``: ``must be one of a, b, got <value>`` otherwise."""
    return Annotated[Literal[values], rule(f"must be one of {', '.join(values)}")]  # type: ignore[valid-type]


class Schema(BaseModel):
    """Base of every input model: frozen, unknown keys refused with the closest valid one, a required key's absence
    worded by its field (``json_schema_extra={"required": "..."}``), field docstrings as descriptions.

    Scalar fields are strict (a YAML ``true`` is not the number 1): each constrained type sets ``strict=True``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    allow_empty: ClassVar[bool] = True  # False: an entry with no key at all is refused ("empty entry")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise problem(f"value must be a mapping, got {show(data)}")
        fields = {info.alias or name: info for name, info in cls.model_fields.items()}  # a YAML key = its alias
        for key in data:
            if key not in fields:
                name = key if isinstance(key, str) else str(key)
                raise problem(f"unknown key {key!r}{suggest(name, list(fields))}", key=name)
        for name, info in fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            if info.is_required() and name not in data:
                raise problem(str(extra.get("required", "required")), key=name)
        if not data and not cls.allow_empty:
            raise problem(f"empty entry: set {' and/or '.join(fields)}")
        return data


def _dotted(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int) and parts:
            parts[-1] += f"[{part}]"
        else:
            parts.append(str(part))
    return ".".join(parts)


def validate(model: type[Schema], data: Any, path: Path | None, prefix: str = "") -> Any:
    """``model.model_validate(data)``; the first error as a one-line ``ConfigError`` naming ``path`` and the
    dotted field (``prefix`` + the error's location).

    Raises:
        ConfigError: the input does not fit ``model`` (exit 2).
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        if "[key]" in loc:  # a mapping's key is at fault: name the mapping
            loc = loc[:loc.index("[key]") - 1]
        ctx = err.get("ctx") or {}
        if err["type"] == _ERROR and "key" in ctx:
            loc += (ctx["key"],)
        dotted = prefix + _dotted(loc) if loc else (prefix.rstrip(".") or None)
        if err["type"] == _ERROR:
            message = ctx["message"]
        else:
            reason = "value must be a mapping" if err["type"] in ("dict_type", "model_type") else err["msg"]
            message = f"{reason}, got {show(err.get('input'))}"
        raise ConfigError(message.replace("{field}", dotted or "value"), path=path, field=dotted) from None


# ------------------------------------------------------------------------------------------- key tables


def _models_in(annotation: Any) -> list[type[Schema]]:
    """The Schema models an annotation holds directly or as a mapping's values (``dict[str, X]``, ``X | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, Schema):
        return [annotation]
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _models_in(args[0])
    if origin in (typing.Union, types.UnionType):
        return [m for a in args for m in _models_in(a)]
    return []


def _mapping_of(annotation: Any) -> type[Schema] | None:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _mapping_of(typing.get_args(annotation)[0])
    if origin in (dict, Mapping) or origin is typing.get_origin(Mapping[str, int]):
        found = _models_in(typing.get_args(annotation)[1])
        return found[0] if found else None
    return None


def _default_text(info: Any) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel) or value is None or value is PydanticUndefined:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Mapping) and not value:
        return "{}"
    return str(value) if value != "" else '""'



def key_rows(model: type[Schema], prefix: str = "", seen: dict[type, str] | None = None) -> list[tuple[str, str, str]]:
    """``(dotted key, default, description)`` for every key of ``model``, nested sections expanded; a mapping of
    entries is written ``suites.<suite>.margin``; a model already listed is one row pointing to its first key.

    The default is ``required``, ``-`` (unset: inherited or decided elsewhere, as the description says) or the value.
    """
    seen = {} if seen is None else seen
    seen.setdefault(model, prefix.rstrip("."))
    rows: list[tuple[str, str, str]] = []
    for name, info in model.model_fields.items():
        name = info.alias or name  # the key as written (``from``, a Python keyword, is field ``from_``)
        key = f"{prefix}{name}"
        doc = " ".join((info.description or "").split()).replace("``", "`")
        entry = _mapping_of(info.annotation)
        nested = entry or next(iter(_models_in(info.annotation)), None)
        if nested is None:
            rows.append((key, _default_text(info), doc))
            continue
        child = f"{key}.<{name.removesuffix('s')}>" if entry else key
        if nested in seen:
            rows.append((child, "{}" if entry else "-", f"{doc} Same keys as `{seen[nested]}`.".strip()))
            continue
        rows.append((child, _default_text(info) if not entry else "{}", doc))
        rows += key_rows(nested, child + ".", seen)
    return rows


def markdown_table(rows: list[tuple[str, str, str]]) -> str:
    """A Markdown key table (``| key | default | meaning |``) of :func:`key_rows` rows, as the docs' reference pages
    show it (``docs/hooks.py``)."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    lines += [f"| `{k}` | {d if d in ('required', '-') else f'`{d}`'} | {m.replace('|', '&#124;')} |"
              for k, d, m in rows]
    return "\n".join(lines)

