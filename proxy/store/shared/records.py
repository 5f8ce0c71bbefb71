"""The records the shared tier keeps in LMDB: one typed, versioned definition each (decision 0030).

An **entry record** (the ``entries`` database, one per stored variant)::

    header  "<4sBIQQQII": magic b"CDS1", flags, meta length, body length, mark, sequence,
            CRC32 of meta + inline body, CRC32 of the body file's chunk table (0 inline)
    meta    JSON: status, reason, fields, birth, freshness lifetime, no-cache, Vary names,
            Vary values, stale-if-error, stale-while-revalidate, tags
    body    inline bodies only (FLAG_FILE unset)

Its key is ``entry_prefix(domain, target)`` followed by ``variant_id`` of its Vary values.
A record whose magic, lengths or CRC do not check out is corrupt: read as a miss and removed.

A **domain record** (the ``state`` environment, one per domain ever purged or cleared): the
domain's purge number first (8 bytes, so a reader can tell whether its parsed copy is current
without parsing), then JSON of the state ``purge_state.DomainState`` holds.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from proxy.core.cache.entry import StoredResponse

MAGIC = b"CDS1"
HEADER = struct.Struct("<4sBIQQQII")
FLAG_FILE = 1  # the body is in a file of bodies/, named by the sequence number
NUMBER = struct.Struct("<Q")


class Corrupt(Exception):
    """A record that does not check out (internal to the tier: never leaves it)."""


def entry_prefix(domain: str, target: str) -> bytes:
    """The start of every key of the URL's variants. A domain holds no space and a target no
    NUL, so no two URLs' prefixes overlap."""
    return f"{domain} {target}\0".encode()


def variant_id(vary: tuple[str, ...], values: tuple[str | None, ...]) -> bytes:
    if not vary:
        return b""
    return hashlib.blake2b(json.dumps([vary, values]).encode(), digest_size=8).digest()


def body_name(sequence: int) -> str:
    return f"{sequence:016x}.body"


@dataclass(frozen=True, slots=True)
class EntryHeader:
    flags: int
    body_length: int
    mark: int  # the domain's purge number when the fill looked up (decision 0024)
    sequence: int  # order of storing: the eviction order, and the body file's name
    table_crc: int

    @property
    def in_file(self) -> bool:
        return bool(self.flags & FLAG_FILE)


def _meta(response: StoredResponse) -> bytes:
    return json.dumps(
        [
            response.status,
            response.reason,
            [list(pair) for pair in response.headers],
            response.birth,
            response.freshness_lifetime,
            response.revalidate_always,
            list(response.vary),
            list(response.vary_values),
            response.stale_if_error,
            response.stale_while_revalidate,
            list(response.tags),
        ],
        separators=(",", ":"),
    ).encode()


def pack_entry(
    response: StoredResponse,
    *,
    body: bytes,
    body_length: int,
    mark: int,
    sequence: int,
    table_crc: int | None,
) -> bytes:
    """An entry record: ``body`` inline when ``table_crc`` is None, else a file's length."""
    meta = _meta(response)
    flags = 0 if table_crc is None else FLAG_FILE
    inline = body if table_crc is None else b""
    crc = zlib.crc32(inline, zlib.crc32(meta))
    header = HEADER.pack(MAGIC, flags, len(meta), body_length, mark, sequence, crc, table_crc or 0)
    return header + meta + inline


def read_header(record: bytes | memoryview) -> EntryHeader:
    if len(record) < HEADER.size:
        raise Corrupt("short record")
    magic, flags, _, length, mark, sequence, _, table_crc = HEADER.unpack_from(record)
    if magic != MAGIC:
        raise Corrupt("bad magic")
    return EntryHeader(flags, length, mark, sequence, table_crc)


def unpack_entry(record: bytes | memoryview) -> tuple[EntryHeader, StoredResponse]:
    """The record's header and response (its body inline, or empty when in a file); Corrupt
    when it does not check out."""
    header = read_header(record)
    _, _, meta_length, _, _, _, crc, _ = HEADER.unpack_from(record)
    end = HEADER.size + meta_length
    inline_length = 0 if header.in_file else header.body_length
    if len(record) != end + inline_length:
        raise Corrupt("lengths do not add up")
    view = memoryview(record)
    if zlib.crc32(view[HEADER.size :]) != crc:
        raise Corrupt("checksum")
    try:
        fields: list[Any] = json.loads(bytes(view[HEADER.size : end]))
        (status, reason, headers, birth, lifetime, always, vary, values, sie, swr, tags) = fields
        response = StoredResponse(
            status=status,
            reason=reason,
            headers=tuple((name, value) for name, value in headers),
            body=bytes(view[end:]),
            birth=birth,
            freshness_lifetime=lifetime,
            revalidate_always=always,
            vary=tuple(vary),
            vary_values=tuple(values),
            stale_if_error=sie,
            stale_while_revalidate=swr,
            tags=tuple(tags),
        )
    except (ValueError, TypeError) as error:  # a CRC collision with nonsense: still corrupt
        raise Corrupt(f"meta: {error}") from None
    return header, response


def pack_number(number: int, rest: bytes) -> bytes:
    return NUMBER.pack(number) + rest


def read_number(record: bytes | memoryview) -> int:
    number: int = NUMBER.unpack_from(record)[0]
    return number
