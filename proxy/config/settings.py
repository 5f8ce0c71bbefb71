"""How a component's settings dataclass is built from a config section, by field names.

A component below the config (the fleet, the HTTP/2 front end) keeps its own frozen settings
dataclass, so it can be built in tests without a whole ``Config``. Its fields are named as the
section's keys (after a ``prefix`` such as ``http2_``), so one function copies them across: a
key added to both is carried without another line, and a field that neither the section has,
nor the caller gives, nor the caller names in ``keep`` is an error at once, never a silent
default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_T = TypeVar("_T", bound="DataclassInstance")


def settings_of(
    cls: type[_T],
    section: object,
    /,
    *,
    prefix: str = "",
    keep: Collection[str] = (),
    **given: object,
) -> _T:
    """``cls`` with each field taken from ``section``'s attribute ``prefix + name``, but the
    fields in ``given`` (values the section names otherwise, or has not) and those in ``keep``
    (left at their defaults). Raises TypeError naming a field none of these provides."""
    fields = dataclasses.fields(cls)
    unknown = set(keep).difference(f.name for f in fields)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))} to keep")
    values = dict(given)
    for field in fields:
        if field.name in given or field.name in keep:
            continue
        try:
            values[field.name] = getattr(section, prefix + field.name)
        except AttributeError:
            raise TypeError(
                f"{cls.__name__}.{field.name}: {type(section).__name__} has no "
                f"{prefix + field.name}; give it or keep its default"
            ) from None
    return cls(**values)
