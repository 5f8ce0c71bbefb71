"""How one TOML table becomes one frozen dataclass: each key checked by its field's check.

A table's dataclass names its keys as fields; a field's ``Annotated`` metadata is the function
that checks and converts the key's value (proxy/config/values.py), and its default is the key's
default. ``build`` does the rest: unknown keys, required keys, defaults.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, get_type_hints

from proxy.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# A key's check: (its full name, its TOML value or None when absent) -> the converted value.
# TOML has no null, so None can only mean the key was left out.
Check = Callable[[str, object], Any]
_T = TypeVar("_T", bound="DataclassInstance")


def table(data: Mapping[str, Any], key: str, *, required: bool = True) -> Mapping[str, Any]:
    value = data.get(key)
    if value is None and required:
        raise ConfigError(key, f"the [{key}] table is required")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(key, "must be a table")
    return value


def build(cls: type[_T], where: str, raw: Mapping[str, Any]) -> _T:
    """One table's dataclass from its TOML table, each key checked by its field's check."""
    fields = checked_fields(cls)
    only_keys(where, raw, fields)
    values = {}
    for name, (checked, required) in fields.items():
        if name in raw or required:
            values[name] = checked(f"{where}.{name}", raw.get(name))
    return cls(**values)


@functools.cache  # get_type_hints evaluates every annotation: once per table type
def checked_fields(cls: type[DataclassInstance]) -> dict[str, tuple[Check, bool]]:
    """Each field of a table's dataclass: its check (the Annotated metadata), and if required."""
    hints = get_type_hints(cls, include_extras=True)
    return {
        f.name: (
            hints[f.name].__metadata__[0],
            f.default is f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    }


def only_keys(where: str, table: Mapping[str, Any], allowed: Collection[str]) -> None:
    for key in table:
        if key not in allowed:
            name = f"{where}.{key}" if where else key
            raise ConfigError(name, f"unknown key (expected one of: {', '.join(sorted(allowed))})")
