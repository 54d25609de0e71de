"""The base of the typed parts of the documents evalgate writes as JSON and reads back (``verdict.json``).

Each part is a pydantic model on :class:`Record`: unknown keys are kept (a document from a newer evalgate still
reads), every field has a default meaning "not recorded" and a description (:func:`described`,
:func:`described_list`), and a number keeps its JSON type (:data:`Number`: an integer stays ``2``, not ``2.0``).
A part is written with ``model_dump(exclude_unset=True)``: only the keys that were set, in the order of the fields
(then the unknown keys), so a document reads back and dumps to the same keys and values. The stages that produce
such a part build it themselves (e.g. ``evalgate.speed.block.SpeedBlock``); ``evalgate.report.verdict`` assembles
the whole document.
"""

from __future__ import annotations

from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Number", "Record", "described", "described_list"]

Number = Union[int, float]  # smart union: an int stays an int, a float (also NaN) a float


class Record(BaseModel):
    """Base of every part of a document: unknown keys are kept (documents from newer versions still read)."""

    model_config = ConfigDict(extra="allow")


def described(description: str, default: Any = None) -> Any:
    """A field with ``default`` (None: not recorded) and its ``description`` (units, where it comes from)."""
    return Field(default=default, description=description)


def described_list(description: str) -> Any:
    """A list field, empty by default, with its ``description``."""
    return Field(default_factory=list, description=description)
