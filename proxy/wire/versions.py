"""The version of a record, read from its tag (decision 0027): untagged is version 1."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import msgspec

from proxy.errors import WireError

UNTAGGED = 1  # the version of a record written without a tag: today's bytes
VERSION_KEY = "v"  # a JSON object's tag

T = TypeVar("T")


MAX_DIGITS = 20  # a number on the wire fits in 64 bits (Valkey's integers)


def number(text: str) -> int | None:
    """``text`` as a count or an id: ASCII digits only, at most MAX_DIGITS; else None."""
    if 0 < len(text) <= MAX_DIGITS and text.isascii() and text.isdigit():
        return int(text)
    return None


def text_version(family: str, text: str, reads: tuple[int, ...]) -> tuple[int, str]:
    """The version of a text record of ``family`` and the record without its tag. A tag is a
    first part ``<family>/<n>``; WireError for another family's tag or a version not in
    ``reads``."""
    head, _, rest = text.partition(" ")
    name, slash, tagged = head.partition("/")
    if not slash:
        return check(family, UNTAGGED, reads), text
    version = number(tagged)
    if name != family or version is None:
        raise WireError(f"not a {family}: it starts with the tag {head[:40]!r}")
    return check(family, version, reads), rest


def object_version(family: str, fields: Mapping[str, object], reads: tuple[int, ...]) -> int:
    """The version of a JSON object record (its ``"v"``, 1 without one)."""
    version = fields.get(VERSION_KEY, UNTAGGED)
    if not isinstance(version, int) or isinstance(version, bool):
        raise WireError(f"{family}: its version is {version!r}, not a number")
    return check(family, version, reads)


def check(family: str, version: int, reads: tuple[int, ...]) -> int:
    if version not in reads:
        known = ", ".join(str(v) for v in reads)
        raise WireError(f"{family} of version {version}: this build reads version {known}")
    return version


def decode_json(family: str, data: str | bytes, kind: type[T]) -> T:
    """``data`` decoded as ``kind``, checked field by field; WireError if it is not one."""
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.MsgspecError as exc:
        raise WireError(f"not a {family}: {exc}") from None
