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

__all__ = ["Number", "Record", "Recorded", "described", "described_list"]

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
