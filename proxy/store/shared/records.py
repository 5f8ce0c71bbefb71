"""The records the shared tier keeps in LMDB: one typed, versioned definition each (decision 0030).

An **entry record** (the ``entries`` database, one per stored variant)::

    header  "<4sBIQQQII": magic (b"CDO" and the marshal format's version), flags, meta
            length, body length, mark, sequence, CRC32 of meta + inline body, CRC32 of the
            body file's chunk table (0 inline)
    meta    a marshalled tuple of ``StoredResponse.parts``: status, reason, birth, freshness
            lifetime, key size, the hit lines (``entry.hit_lines``: the fields as the fast
            path writes them), then the rarely set fields and the fields as pairs (both: a hit
            from disk answered by the slow path reads the pairs, its memory copy the lines),
            marshalled apart, as bytes: the fast path's hit (``unpack_hit``) reads the hit
            lines and the freshness only, and decodes the rest when it needs it (``rare``)
    body    inline bodies only (FLAG_FILE unset)

Records of the previous format (magic b"CDN": the rest marshalled in place) are still read.

The metadata is marshalled, not JSON: a hit decodes it, and ``marshal.loads`` of it costs a
sixth of ``json.loads`` and gives the tuples ``StoredResponse`` keeps, with no conversion
(benchmarks/disk_engine.py, section i). It is only ever read after its CRC checked out, so it
is always bytes this code wrote; a Python whose marshal format differs reads the records of
another as corrupt (the magic), which makes them misses, not errors.

Its key is ``entry_prefix(domain, target)`` followed by ``variant_id`` of its Vary values;
for a target too long for an LMDB key, the prefix names it by its hash and the meta tuple
keeps it as an eighth element.
A record whose magic, lengths or CRC do not check out is corrupt: read as a miss and removed.
The key target is ``core.cache.keys.cache_target``'s: the scheme a mark before the target
(decision 0041). Keys of the layout before it (the scheme a suffix, " https", that a target
could spell) must never be read, so the ``meta`` database names the key layout
(``KEY_FORMAT``, absent before), and a node that opens entries of another layout starts them
empty (``SharedTier.open_node``): one cold start, no record of the old layout ever read.

A **domain record** (the ``state`` environment, one per domain ever purged or cleared): the
domain's purge number first (8 bytes, so a reader can tell whether its parsed copy is current
without parsing), then JSON of the state ``purge_state.DomainState`` holds.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import struct
import zlib
from typing import Any, NamedTuple

from proxy.core.cache.entry import StoredResponse
from proxy.core.http.fields import Lines

MAGIC = b"CDO" + bytes([marshal.version])  # "CDM": the fields as pairs, no hit lines
MAGIC_EAGER = b"CDN" + MAGIC[3:]  # the rest marshalled in place, not as bytes: still read
HEADER = struct.Struct("<4sBIQQQII")
FLAG_FILE = 1  # the body is in a file of bodies/, named by the sequence number
NUMBER = struct.Struct("<Q")
KEY_FORMAT = b"2"  # the layout of entry keys, in the meta database under b"format"
KEY_MAX = 511  # LMDB's limit on a key (``Environment.max_key_size()``)
PREFIX_MAX = KEY_MAX - 8  # an entry key is its prefix and a variant id of up to 8 bytes
LONG = "#"  # before the hash of a target too long for a key


class Corrupt(Exception):
    """A record that does not check out (internal to the tier: never leaves it)."""


def entry_prefix(domain: str, target: str) -> bytes:
    """The start of every key of the URL's variants. A domain holds no space and a target no
    NUL, so no two URLs' prefixes overlap. A key past LMDB's limit (``PREFIX_MAX``, with room
    for the variant id) names the target by its BLAKE2b-256 instead, after ``LONG``, which
    no key target begins with ("/" or "https:", core.cache.keys); its records keep the
    target itself (``pack_entry``), and a read checks it (``unpack_hit``'s ``target``)."""
    prefix = f"{domain} {target}\0".encode()
    if len(prefix) <= PREFIX_MAX:
        return prefix
    digest = hashlib.blake2b(target.encode(), digest_size=32).hexdigest()
    return f"{domain} {LONG}{digest}\0".encode()


def named_in_record(domain: str, target: str) -> str | None:
    """The target a record under ``entry_prefix(domain, target)`` keeps: the target, when
    the key names it by its hash; else None (the key names it)."""
    return target if len(domain.encode()) + len(target.encode()) + 2 > PREFIX_MAX else None


def variant_id(vary: tuple[str, ...], values: tuple[str | None, ...]) -> bytes:
    if not vary:
        return b""
    return hashlib.blake2b(json.dumps([vary, values]).encode(), digest_size=8).digest()


def body_name(sequence: int) -> str:
    return f"{sequence:016x}.body"


class EntryHeader(NamedTuple):  # a tuple: built on every hit, so built cheaply
    flags: int
    body_length: int
    mark: int  # the domain's purge number when the fill looked up (decision 0024)
    sequence: int  # order of storing: the eviction order, and the body file's name
    table_crc: int

    @property
    def in_file(self) -> bool:
        return bool(self.flags & FLAG_FILE)


def _meta(response: StoredResponse, target: str | None) -> bytes:
    status, reason, birth, lifetime, key_size, lines, rare = response.parts()
    rare = (*rare[:-1], tuple((str(name), value) for name, value in rare[-1]))  # plain str
    parts = (status, reason, birth, lifetime, key_size, lines, marshal.dumps(rare))
    return marshal.dumps(parts if target is None else (*parts, target))


def pack_entry(
    response: StoredResponse,
    *,
    body: bytes,
    body_length: int,
    mark: int,
    sequence: int,
    table_crc: int | None,
    target: str | None = None,
) -> bytes:
    """An entry record: ``body`` inline when ``table_crc`` is None, else a file's length;
    ``target``: the key target, kept when the key names it by its hash (``entry_prefix``)."""
    meta = _meta(response, target)
    flags = 0 if table_crc is None else FLAG_FILE
    inline = body if table_crc is None else b""
    crc = zlib.crc32(inline, zlib.crc32(meta))
    header = HEADER.pack(MAGIC, flags, len(meta), body_length, mark, sequence, crc, table_crc or 0)
    return header + meta + inline


def read_header(record: bytes | memoryview) -> EntryHeader:
    if len(record) < HEADER.size:
        raise Corrupt("short record")
    magic, flags, _, length, mark, sequence, _, table_crc = HEADER.unpack_from(record)
    if magic != MAGIC and magic != MAGIC_EAGER:
        raise Corrupt("bad magic")
    return EntryHeader(flags, length, mark, sequence, table_crc)


class SharedHit(NamedTuple):
    """A URL's one variant as ``peek`` found it for the fast path: what a fresh hit writes,
    and the rest of its record, made a response only when needed (``response``). A tuple,
    and no response built: made on every hit from the shared tier."""

    hit_lines: Lines  # the fill's (``StoredResponse.hit_lines``), maybe empty
    body: bytes
    birth: float
    freshness_lifetime: float
    mark: int
    parts: Any  # the record's metadata: ``StoredResponse.parts``, as marshalled

    def fresh_age(self, now: float) -> float | None:
        """``StoredResponse.fresh_age``, the same rule on the same two numbers (RFC 9111
        §4.2; tests/store/shared/test_peek.py holds them equal)."""
        age = now - self.birth
        if age < 0.0:
            age = 0.0
        return age if age < self.freshness_lifetime else None

    def response(self) -> StoredResponse | None:
        """The response, with its mark, as ``lookup`` would give it; None when the rest of
        its metadata does not decode (never seen: it is CRC-checked and written here), and
        ``lookup`` finds it corrupt."""
        status, reason, birth, lifetime, key_size, lines, rare = self.parts[:7]
        try:
            rare = rare_of(rare)
        except Corrupt:
            return None
        response = StoredResponse.from_parts(
            status, reason, self.body, birth, lifetime, key_size, lines, rare
        )
        response.set_mark(self.mark)
        return response


def unpack_entry(
    record: bytes | memoryview, target: str | None = None
) -> tuple[EntryHeader, StoredResponse]:
    """The record's header and response (its body inline, or empty when in a file); Corrupt
    when it does not check out, or keeps a target other than ``target``."""
    flags, length, sequence, table_crc, hit = unpack_hit(record)
    if target is not None and len(hit.parts) == 8 and hit.parts[7] != target:
        raise Corrupt("another target under its hash")
    response = hit.response()
    if response is None:
        raise Corrupt("meta: the rarely set fields")
    return EntryHeader(flags, length, hit.mark, sequence, table_crc), response


_HEAD = HEADER.size
_new_tuple = tuple.__new__
_unpack_header = HEADER.unpack_from  # bound once: unpack_hit runs on every hit from disk
_crc32 = zlib.crc32


def unpack_hit(record: bytes | memoryview) -> tuple[int, int, int, int, SharedHit]:
    """The record's flags, body length, sequence and chunk table CRC, and its hit (its body
    inline, or empty when in a file), with no response built: the fast path's read
    (``SharedTier.peek``), which ``unpack_entry`` completes. Corrupt when its magic, lengths
    or CRC do not check out."""
    if len(record) < _HEAD:
        raise Corrupt("short record")
    magic, flags, meta_length, length, mark, sequence, crc, table_crc = _unpack_header(record)
    end = _HEAD + meta_length
    if magic != MAGIC and magic != MAGIC_EAGER:
        raise Corrupt("bad magic")
    if len(record) != end + (0 if flags & FLAG_FILE else length):
        raise Corrupt("lengths do not add up")
    view = memoryview(record)
    if _crc32(view[_HEAD:]) != crc:
        raise Corrupt("checksum")
    try:
        parts = marshal.loads(view[_HEAD:end])  # noqa: S302 (CRC-checked, written here)
    except (ValueError, TypeError, EOFError) as error:  # another Python's format
        raise Corrupt(f"meta: {error}") from None
    if type(parts) is not tuple or not 7 <= len(parts) <= 8:
        raise Corrupt("meta: not an entry's parts")
    # tuple.__new__, not SharedHit(...), whose __new__ is Python: 2,700 instructions a hit.
    fields = (parts[5], bytes(view[end:]), parts[2], parts[3], mark, parts)
    return flags, length, sequence, table_crc, _new_tuple(SharedHit, fields)


def rare_of(field: Any) -> Any:
    """The rarely set fields and the pairs of a record's metadata: marshalled apart (bytes),
    or in place in a record of the previous format. Corrupt when they do not decode."""
    if type(field) is not bytes:
        return field
    try:
        rare = marshal.loads(field)  # noqa: S302 (inside a CRC-checked record written here)
    except (ValueError, TypeError, EOFError) as error:
        raise Corrupt(f"meta: {error}") from None
    if type(rare) is not tuple:
        raise Corrupt("meta: not the rarely set fields")
    return rare


def pack_number(number: int, rest: bytes) -> bytes:
    return NUMBER.pack(number) + rest


def read_number(record: bytes | memoryview) -> int:
    number: int = NUMBER.unpack_from(record)[0]
    return number
