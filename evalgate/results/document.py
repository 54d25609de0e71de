"""The base of the typed parts of the documents evalgate writes as JSON and reads back (``verdict.json``).

Each part is a pydantic model on :class:`Record`: unknown keys are kept (a document from a newer evalgate still
reads), every field has a default meaning "not recorded" and a description (:func:`described`,
:func:`described_list`), and a number keeps its JSON type (:data:`Number`: an integer stays ``2``, not ``2.0``).
A part is written with ``model_dump(exclude_unset=True)``: only the keys that were set, in the order of the fields
(then the unknown keys), so a document reads back and dumps to the same keys and values. The stages that produce
such a part build it themselves (e.g. ``evalgate.speed.block.SpeedBlock``); ``evalgate.report.verdict`` assembles
the whole document.

A model that a document embeds may also be what a stage builds whole, with required fields: the run manifest
(``results.manifest.Manifest``), the traffic profile (``speed.profile.TrafficProfile``). Such a model derives from
:class:`Recorded`: built or validated as usual, a required field must be there; read with
:meth:`Recorded.from_document` (as ``verdict.json`` embeds it), a required field the document does not hold is "not
recorded": it takes the model's ``NOT_RECORDED`` value and stays unset, so the model dumps back (``exclude_unset``) to
the keys the document held, in the document's order.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

__all__ = ["Number", "Record", "Recorded", "described", "described_list", "field_path", "validation_problem"]

Number = Union[int, float]  # smart union: an int stays an int, a float (also NaN) a float


class Record(BaseModel):
    """Base of every part of a document: unknown keys are kept (documents from newer versions still read)."""

    model_config = ConfigDict(extra="allow")


_FROM_DOCUMENT = "evalgate.from_document"  # the validation context key of Recorded.from_document
_R = TypeVar("_R", bound="Recorded")


class Recorded(BaseModel):
    """A model with required fields that a stored document may hold only in part (see the module's docstring).

    ``NOT_RECORDED`` maps each required field to the value it takes when a document read with
    :meth:`from_document` does not hold it (an empty value of its type: ``""``, ``{}``, ``[]``, None; a nested
    ``Recorded`` model's ``{}``, itself read from the document). Such a field is not in ``model_fields_set``, so
    ``model_dump(exclude_unset=True)`` leaves it out. A model read from a document also dumps its keys in the
    document's order (the fields' order otherwise), so an old document whose writer ordered them differently dumps
    back byte for byte; equality ignores that order. The context reaches nested models: a ``Manifest`` read from a
    document reads its ``Side`` and ``SuiteEntry`` entries the same way.
    """

    NOT_RECORDED: ClassVar[dict[str, Any]] = {}
    _document_order: tuple[str, ...] | None = PrivateAttr(default=None)

    @classmethod
    def from_document(cls: type[_R], data: Any) -> _R:
        """``data`` (a JSON value, or already a ``cls``) read as a stored document holds it: a required field it
        lacks is not recorded (``NOT_RECORDED``), every field it holds is validated as usual.

        Raises:
            pydantic.ValidationError: a field the document holds has the wrong type (or ``data`` is not a mapping).
        """
        return cls.model_validate(data, context={_FROM_DOCUMENT: True})

    @staticmethod
    def reading_document(info: ValidationInfo) -> bool:
        """The validation under way reads a stored document (:meth:`from_document`), for a model's own validators."""
        return bool(info.context and info.context.get(_FROM_DOCUMENT))

    @model_validator(mode="wrap")
    @classmethod
    def _not_recorded(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        if not (isinstance(data, dict) and cls.reading_document(info)):
            return handler(data)
        absent = [name for name, field in cls.model_fields.items() if field.is_required() and name not in data]
        model = handler({**data, **{name: cls.NOT_RECORDED[name] for name in absent}})
        model.__pydantic_fields_set__.difference_update(absent)
        model._document_order = tuple(data)
        return model

    @model_serializer(mode="wrap")
    def _in_document_order(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = self._serialized(handler(self))
        order = self._document_order
        if order and isinstance(out, dict):
            out = {**{k: out[k] for k in order if k in out}, **{k: v for k, v in out.items() if k not in order}}
        return out

    def _serialized(self, out: dict[str, Any]) -> dict[str, Any]:
        """A subclass's hook on its dumped fields (before the document's key order is applied); as is here."""
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BaseModel):
            return NotImplemented
        return (type(self) is type(other) and self.__dict__ == other.__dict__
                and self.__pydantic_extra__ == other.__pydantic_extra__)

    __hash__ = None  # type: ignore[assignment]  # a frozen subclass gets pydantic's (field values)


def described(description: str, default: Any = None) -> Any:
    """A field with ``default`` (None: not recorded) and its ``description`` (units, where it comes from)."""
    return Field(default=default, description=description)


def described_list(description: str) -> Any:
    """A list field, empty by default, with its ``description``."""
    return Field(default_factory=list, description=description)


# pydantic's error types -> what the field holds, in the words of a one-line message (``validation_problem``).
_EXPECTED = {
    "int_type": "a whole number", "int_parsing": "a whole number", "int_from_float": "a whole number",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "string_unicode": "a string",
    "dict_type": "a mapping (a JSON object)", "model_type": "a mapping (a JSON object)",
    "model_attributes_type": "a mapping (a JSON object)", "mapping_type": "a mapping (a JSON object)",
    "list_type": "a list", "tuple_type": "a list", "set_type": "a list",
}
_BOUNDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="), "less_than": ("lt", "<"),
           "less_than_equal": ("le", "<=")}


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as the field path a message names: keys joined by dots, list positions in
    brackets (``("speed", "levels", 0, "precision", "pair_seconds")`` -> ``speed.levels[0].precision.pair_seconds``);
    ``(top level)`` for an empty one."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _union_tag(part: Any) -> bool:
    """Whether a location part is the tag pydantic puts under a union's member (``int``, ``float``,
    ``function-after[...]``, ...), not a field name."""
    return isinstance(part, str) and (part in ("int", "float", "str", "bool", "none") or part.startswith(
        ("function-", "constrained-", "list[", "dict[", "nullable[", "literal[")))


def _shown(value: Any) -> str:
    """A JSON value as a message shows what a field held: its kind, and a short value for a string or number."""
    import json
    import math

    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) and math.isfinite(value) and value == int(value) and abs(
            value) < 1e15 else repr(value) if isinstance(value, int) or math.isfinite(value) else str(value)
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return f"a string ({text if len(text) <= 40 else text[:37] + '...'})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def validation_problem(exc: Any) -> str:
    """The first error of a ``pydantic.ValidationError`` raised reading a stored document, as one line:
    ``<field path>: expected <what the field holds>, got <what it held>`` (e.g.
    ``speed.levels[0].precision.pair_seconds: expected a number, got a string ("48")``), or ``<field path>: missing``
    for a required field the document lacks. A value that fits none of a union's types is named once, by what the
    union holds (``Number``: "a number"); an error type without words here keeps pydantic's message (class names
    dropped).

    Args:
        exc: the ``pydantic.ValidationError``.
    Returns:
        The line, without the file (the caller names it).
    """
    import re

    errors = exc.errors()
    first = errors[0]
    loc = tuple(first["loc"])
    kinds = [first["type"]]
    # A union's members fail one by one, each located under its member's tag (``ratio.int``, ``ratio.float``).
    union = [e for e in errors if len(e["loc"]) == len(loc) and tuple(e["loc"][:-1]) == loc[:-1]
             and e.get("input") is first.get("input") and _union_tag(e["loc"][-1])]
    if len(union) > 1 and _union_tag(loc[-1]):
        loc, kinds = loc[:-1], [e["type"] for e in union]
    where = field_path(loc)
    kind = kinds[0]
    if kind == "missing":
        return f"{where}: missing (a required field)"
    expected = [_EXPECTED.get(k) for k in kinds]
    if all(expected):
        named = list(dict.fromkeys(e for e in expected if e))
        words = "a number" if set(named) == {"a number", "a whole number"} else " or ".join(named)
    elif kind in _BOUNDS:
        key, sign = _BOUNDS[kind]
        words = f"a number {sign} {_shown((first.get('ctx') or {}).get(key))}"
    elif kind == "literal_error":
        words = f"one of {(first.get('ctx') or {}).get('expected')}"
    else:
        msg = re.sub(r" or instance of \w+", "", first["msg"])  # not the model class names
        return f"{where}: {msg}, got {_shown(first.get('input'))}"
    return f"{where}: expected {words}, got {_shown(first.get('input'))}"
