"""HTTP/2 on the wire (RFC 9113 §4, §6; RFC 7541 for the fields we send): frame headers,
the frames the server writes, and a stateless HPACK encoder (decision 0036).

The encoder never touches the dynamic table: each field is an index into the static table
(a whole field, or its name) or a literal, always "without indexing" (RFC 7541 §6.2.2), as
nginx encodes its answers. So a block depends on nothing but its fields: a hit's block is
built once per distinct head and reused on every connection, with only Age appended.
"""

from __future__ import annotations

from enum import IntEnum
from functools import lru_cache

from hpack.table import HeaderTable

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class FrameType(IntEnum):
    DATA = 0x0
    HEADERS = 0x1
    PRIORITY = 0x2
    RST_STREAM = 0x3
    SETTINGS = 0x4
    PUSH_PROMISE = 0x5
    PING = 0x6
    GOAWAY = 0x7
    WINDOW_UPDATE = 0x8
    CONTINUATION = 0x9


END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

MAX_WINDOW = 2**31 - 1


class Setting(IntEnum):
    HEADER_TABLE_SIZE = 0x1
    ENABLE_PUSH = 0x2
    MAX_CONCURRENT_STREAMS = 0x3
    INITIAL_WINDOW_SIZE = 0x4
    MAX_FRAME_SIZE = 0x5
    MAX_HEADER_LIST_SIZE = 0x6
    ENABLE_CONNECT_PROTOCOL = 0x8


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame: the 9-byte header (length, type, flags, stream) and its payload."""
    return (
        len(payload).to_bytes(3, "big")
        + bytes((kind, flags))
        + stream_id.to_bytes(4, "big")
        + payload
    )


def settings(values: dict[Setting, int]) -> bytes:
    payload = b"".join(int(k).to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in values.items())
    return frame(FrameType.SETTINGS, 0, 0, payload)


def rst_stream(stream_id: int, code: int) -> bytes:
    return frame(FrameType.RST_STREAM, 0, stream_id, code.to_bytes(4, "big"))


def goaway(last_stream: int, code: int) -> bytes:
    return frame(FrameType.GOAWAY, 0, 0, last_stream.to_bytes(4, "big") + code.to_bytes(4, "big"))


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(FrameType.WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))


# -- the stateless HPACK encoder (RFC 7541) --------------------------------------------------

_STATIC_FIELDS: dict[tuple[bytes, bytes], int] = {}
_STATIC_NAMES: dict[bytes, int] = {}
for _index, (_name, _value) in enumerate(HeaderTable.STATIC_TABLE, start=1):
    _STATIC_FIELDS.setdefault((_name, _value), _index)
    _STATIC_NAMES.setdefault(_name, _index)

# A dynamic table size update to 0 (§6.3): sent once, at the start of the first block after
# the client's SETTINGS_HEADER_TABLE_SIZE, so a decoder that waits for one after a smaller
# setting (nghttp2 does) gets it; the encoder never uses the table.
TABLE_SIZE_ZERO = b"\x20"


def integer(value: int, prefix_bits: int, first: int) -> bytes:
    """An HPACK integer (§5.1) in a ``prefix_bits`` prefix, OR-ed into ``first``."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(value: bytes) -> bytes:
    """A string literal (§5.2), not Huffman-coded."""
    return integer(len(value), 7, 0) + value


def encode_field(name: bytes, value: bytes) -> bytes:
    """One field: its static index, else a literal without indexing (§6.2.2) with the
    name's static index where there is one."""
    index = _STATIC_FIELDS.get((name, value))
    if index is not None:
        return integer(index, 7, 0x80)
    index = _STATIC_NAMES.get(name)
    if index is not None:
        return integer(index, 4, 0) + string(value)
    return b"\x00" + string(name) + string(value)


def encode_block(fields: list[tuple[bytes, bytes]] | tuple[tuple[bytes, bytes], ...]) -> bytes:
    return b"".join([encode_field(name, value) for name, value in fields])


AGE = _STATIC_NAMES[b"age"]


@lru_cache(maxsize=4096)
def age_field(age: bytes) -> bytes:
    return integer(AGE, 4, 0) + string(age)
