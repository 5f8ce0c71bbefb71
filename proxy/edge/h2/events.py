"""What the server's HTTP/2 state machine (machine.py) reports of the client's frames, and
the errors it raises (decision 0036)."""

from __future__ import annotations

from dataclasses import dataclass

from h2.errors import ErrorCodes

from proxy.edge.h2.head import Head


class H2Error(Exception):
    """A connection error (RFC 9113 §5.4.1): GOAWAY with ``code``, and close."""

    def __init__(self, code: ErrorCodes, why: str) -> None:
        super().__init__(why)
        self.code = code


class StreamClosed(Exception):
    """A frame for a stream the server may no longer send on."""


@dataclass(slots=True)
class RequestReceived:
    stream_id: int
    head: Head
    ended: bool


@dataclass(slots=True)
class DataReceived:
    stream_id: int
    data: bytes
    size: int  # what it cost the windows (padding included)


@dataclass(slots=True)
class StreamEnded:
    stream_id: int


@dataclass(slots=True)
class StreamReset:
    """The client reset the stream."""

    stream_id: int
    code: int


@dataclass(slots=True)
class ServerReset:
    """The server reset the stream for a stream error the client's frames made."""

    stream_id: int
    code: ErrorCodes


@dataclass(slots=True)
class StreamRefused:
    stream_id: int


@dataclass(slots=True)
class WindowOpened:
    stream_id: int  # 0: every stream may send more


@dataclass(slots=True)
class GoneAway:
    last_stream: int
    code: int


Event = (
    RequestReceived
    | DataReceived
    | StreamEnded
    | StreamReset
    | ServerReset
    | StreamRefused
    | WindowOpened
    | GoneAway
)
