"""What the cache keeps for one response, with everything the hit path needs precomputed.

A ``StoredResponse`` is built once, on a miss, by ``policy.assess_response``; a hit only reads it.
Freshness is reduced at store time to two numbers (``response_time`` and ``expires_at``) so
the hit path does one comparison instead of re-parsing Cache-Control (RFC 9111 §4.2).

Every cached object carries one, so its layout is measured (tests/store/test_memory.py). An
entry the fast path may serve keeps its fields once, as the lines a hit sends (``hit_lines``);
``headers`` is read back from them when a slower path needs the pairs. It stores no number
it can derive (``freshness_lifetime``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, overload

# (domain, generation, request-target as received). A tuple, never a joined string, so no
# Host or path can be spelled to collide with another domain's key.
CacheKey = tuple[str, int, str]

Headers = tuple[tuple[str, str], ...]


Lines = tuple[bytes, ...]
T = TypeVar("T")


def line_fields(lines: Lines) -> Headers:
    """The fields of lines written by ``write_lines``: every line after the status line."""
    return tuple(
        (name, value)
        for name, _, value in (line[:-2].decode("utf-8").partition(": ") for line in lines[1:])
    )


def write_lines(status: int, reason: str, headers: Headers) -> Lines | None:
    """The status line and each field as HTTP/1.1 sends them, one bytes object per line (so
    entries can share the lines they repeat), each ending in CRLF; None when a field cannot be
    written back exactly as it reads (``line_fields``): a name that is not a token, a value
    with a control character, text that is not UTF-8."""
    if _CONTROL.search(reason):
        return None
    lines = [f"HTTP/1.1 {status} {reason}\r\n"]
    for name, value in headers:
        if not _TOKEN.fullmatch(name) or _CONTROL.search(value):
            return None
        lines.append(f"{name}: {value}\r\n")
    try:
        return tuple(line.encode("utf-8") for line in lines)
    except UnicodeEncodeError:  # surrogate escapes: bytes the client could not decode
        return None


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # what a field value may not hold


class _StoredHeaders:
    """``StoredResponse.headers``: the stored fields, read back from ``hit_lines`` when the
    entry has them (the usual case), so an entry keeps its fields once. Otherwise (Vary,
    no-cache, a field that cannot be written back) they are kept as pairs."""

    @overload
    def __get__(self, entry: None, owner: type[Any]) -> _StoredHeaders: ...

    @overload
    def __get__(self, entry: StoredResponse, owner: type[Any]) -> Headers: ...

    def __get__(self, entry: StoredResponse | None, owner: type[Any]) -> Headers | _StoredHeaders:
        if entry is None:
            raise AttributeError("headers")  # a required field: no class-level default
        own = entry._own_headers
        return own if own is not None else line_fields(entry.hit_lines[:-1])

    def __set__(self, entry: StoredResponse, headers: Headers) -> None:
        raise AttributeError("StoredResponse is frozen")


# Fields most entries hold at their default, kept together in one ``_rare`` tuple when any of
# them differs and not at all otherwise: five slots fewer per entry (40 bytes).
_RARE_FIELDS = (
    "revalidate_always",
    "stale_if_error",
    "stale_while_revalidate",
    "vary",
    "vary_values",
)
_RARE_DEFAULTS: tuple[Any, ...] = (False, None, 0.0, (), ())


class _Rare(Generic[T]):
    """A field read from ``StoredResponse._rare``, or its default when the entry has none."""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._index = _RARE_FIELDS.index(name)
        self._name = name

    @overload
    def __get__(self, entry: None, owner: type[Any]) -> _Rare[T]: ...

    @overload
    def __get__(self, entry: StoredResponse, owner: type[Any]) -> T: ...

    def __get__(self, entry: StoredResponse | None, owner: type[Any]) -> T | _Rare[T]:
        if entry is None:
            raise AttributeError(self._name)  # a required field: no class-level default
        rare = entry._rare
        value = _RARE_DEFAULTS[self._index] if rare is None else rare[self._index]
        return cast(T, value)

    def __set__(self, entry: StoredResponse, value: object) -> None:
        raise AttributeError("StoredResponse is frozen")


@dataclass(frozen=True, init=False)
class StoredResponse:
    # Slots, not a __dict__. ``headers`` and ``freshness_lifetime`` have none: see above.
    __slots__ = (
        "_own_headers",
        "_rare",
        "body",
        "corrected_initial_age",
        "etag",
        "expires_at",
        "hit_lines",
        "last_modified",
        "reason",
        "response_time",
        "size",
        "status",
    )

    status: int
    reason: str
    body: bytes
    response_time: float  # wall-clock seconds when the response arrived
    corrected_initial_age: float  # RFC 9111 §4.2.3
    expires_at: float  # response_time - corrected_initial_age + freshness_lifetime
    etag: str | None
    last_modified: str | None
    size: int  # bytes counted against cache.max_bytes
    # A fresh hit, ready to send but for Age: the status line and stored fields
    # (``write_lines``), then the edge's own lines in one (Via, Cache-Status), built by the
    # edge when it stores a response the fast path may serve. Empty otherwise.
    hit_lines: Lines
    if TYPE_CHECKING:  # slots, not fields: ``headers`` when ``hit_lines`` do not hold them,
        _own_headers: Headers | None
        _rare: tuple[Any, ...] | None  # and the _RARE_FIELDS, when one is not its default
    # The rarely set fields (``_RARE_FIELDS``), read from ``_rare``. After the slots: a
    # descriptor has a class-level default, as far as the dataclass machinery can tell.
    # no-cache: stored, but validated on every use (§5.2.2.4)
    revalidate_always: _Rare[bool] = _Rare()
    vary: _Rare[tuple[str, ...]] = _Rare()  # lowercase field names from Vary
    # the request's values for them, normalised
    vary_values: _Rare[tuple[str | None, ...]] = _Rare()
    # Seconds past expiry it may be served while the origin fails: 0 forbidden, None the
    # domain's default (policy.stale_if_error).
    stale_if_error: _Rare[float | None] = _Rare()
    # Seconds past expiry it may answer while revalidated in the background (RFC 5861 §3).
    stale_while_revalidate: _Rare[float] = _Rare()
    # End-to-end headers as stored: no hop-by-hop, no Age. Last: a descriptor has a default.
    headers: _StoredHeaders = _StoredHeaders()

    def __init__(
        self,
        *,
        status: int,
        reason: str,
        headers: Headers,
        body: bytes,
        response_time: float,
        corrected_initial_age: float,
        expires_at: float,
        revalidate_always: bool,
        etag: str | None,
        last_modified: str | None,
        vary: tuple[str, ...],
        vary_values: tuple[str | None, ...],
        size: int,
        freshness_lifetime: float | None = None,  # implied by expires_at: not stored
        stale_if_error: float | None = None,
        stale_while_revalidate: float = 0.0,
        hit_lines: Lines = (),
    ) -> None:
        set_ = object.__setattr__
        set_(self, "status", status)
        set_(self, "reason", reason)
        set_(self, "body", body)
        set_(self, "response_time", response_time)
        set_(self, "corrected_initial_age", corrected_initial_age)
        set_(self, "expires_at", expires_at)
        set_(self, "etag", etag)
        set_(self, "last_modified", last_modified)
        set_(self, "size", size)
        rare = (revalidate_always, stale_if_error, stale_while_revalidate, vary, vary_values)
        set_(self, "_rare", None if rare == _RARE_DEFAULTS else rare)
        # The lines are kept only while they say exactly what the entry says: ``replace`` with
        # new fields or status drops them, so the fast path can never send stale ones.
        held = bool(hit_lines) and hit_lines[:-1] == write_lines(status, reason, headers)
        set_(self, "hit_lines", hit_lines if held else ())
        set_(self, "_own_headers", None if held else headers)

    @property
    def freshness_lifetime(self) -> float:
        """RFC 9111 §4.2.1, as it was when stored."""
        return self.expires_at - self.response_time + self.corrected_initial_age

    def age(self, now: float) -> float:
        """Current age, RFC 9111 §4.2.3."""
        return self.corrected_initial_age + max(0.0, now - self.response_time)

    def is_fresh(self, now: float) -> bool:
        return not self.revalidate_always and now < self.expires_at
