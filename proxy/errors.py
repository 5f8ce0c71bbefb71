"""The exception tree of cdn-proxy.

::

    ProxyError                      base of everything raised on purpose
    ├── ConfigError                 the config file is unreadable or wrong (names the key)
    ├── StateError                  the state database cannot be opened or used
    │   └── NotFoundError           a named token or record does not exist
    ├── DiskTierError               the shared tier on disk (proxy/store/shared, decision 0030)
    │   ├── CacheDirectoryLocked    the cache directory belongs to another node (names the
    │   │                           directory and the holder)
    │   └── BodyCorrupt             a stored body failed its checksum while being read: the
    │                               entry is removed; the reader must not end the body cleanly
    ├── OriginError                 the origin did not give a usable answer
    │   ├── OriginTimeout           → 504
    │   ├── OriginUnreachable       → 502
    │   ├── OriginProtocolError     broken framing or headers → 502
    │   │   └── OriginDisconnected  the connection closed or reset before an answer → 502
    │   ├── OriginBusy              no origin connection free in time, or the domain's share
    │   │                           for streamed uploads is taken → 503
    │   └── OriginsDown             every origin server of the domain is down → 503
    ├── RequestBodyError            the client's request body did not arrive → 4xx, closed
    │   ├── RequestBodyTimeout      nothing of it came for edge.body_timeout seconds → 408
    │   └── RequestBodyIncomplete   it ended before its length (the client left) → 400
    ├── WireError                   a record from another process (a fleet hint or report, a
    │                               worker's line) is garbage or of a version this build
    │                               cannot read (proxy/wire/); its reader goes on without it
    └── FleetError                  the fleet (Valkey) could not do what was asked → 503
        ├── FleetUnavailable        Valkey did not answer, or answered with an error
        │   └── NotReplicated       a write was made, but fewer than fleet.replicas replicas
        │                           confirmed it in time (it could be lost in a failover)
        ├── ClearNotConfirmed       a clear is recorded, but not every live edge process has
        │                           applied it within fleet.clear_timeout
        └── PurgeUnsupported        a live edge process runs a build that cannot apply purge
                                    records (older than decision 0026): nothing recorded

Third-party exceptions (aiohttp, sqlite3, tomllib, valkey, lmdb) are translated into these where
they enter: ``config.py``, ``state/sqlite.py``, ``edge/origin.py``, ``edge/tunnel.py`` (h11's,
for upgrade tunnels), ``fleet/scripts.py`` and ``store/shared/`` (lmdb's and the disk's, which
the shared tier counts as faults rather than raising).
"""

from __future__ import annotations

from http import HTTPStatus


class ProxyError(Exception):
    """Base of every error cdn-proxy raises on purpose."""


class _Answered(ProxyError):
    """An error the edge answers itself: ``status``, its standard reason phrase, and
    ``public``, what the client is told (the message is for the log)."""

    status = 500
    public = "internal error"

    @property
    def reason(self) -> str:
        return HTTPStatus(self.status).phrase


class ConfigError(ProxyError):
    """The configuration is wrong. The message names the key and the problem."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


class StateError(ProxyError):
    """The state database could not be used."""


class NotFoundError(StateError):
    """A named record (token, admin) does not exist."""


class DiskTierError(ProxyError):
    """The shared tier on disk could not do what was asked (decision 0030). Only opening it
    raises; once open, its faults are counted and reported, never raised (``BodyCorrupt``
    aside, for a body already partly read)."""


class CacheDirectoryLocked(DiskTierError):
    """Another node holds the cache directory, or a worker was not given the instance id of
    the node that holds it."""

    def __init__(self, directory: str, holder: str) -> None:
        super().__init__(f"cache directory {directory} is locked by {holder}")
        self.directory = directory
        self.holder = holder


class BodyCorrupt(DiskTierError):
    """A chunk of a stored body did not match its checksum while it was being read. The
    entry is gone from the tier; the bytes already read must not be sent as a whole body."""


class OriginError(_Answered):
    """The origin did not give a usable answer."""

    status = 502
    public = "the origin failed"
    # False when the request failed before any byte of it was sent (decision 0034: it may
    # then be retried on another origin server whatever its method).
    reached = True


class OriginTimeout(OriginError):
    status = 504
    public = "the origin did not answer in time"


class OriginUnreachable(OriginError):
    public = "the origin is unreachable"


class OriginProtocolError(OriginError):
    public = "the origin sent a broken response"


class OriginDisconnected(OriginProtocolError):
    """The connection closed or was reset before an answer came: a keep-alive connection the
    origin was closing (RFC 9112 §9.3.1), the one failure worth a second try on the same
    server (edge/upstreams.py, decision 0046); a broken answer would only break again."""


class OriginBusy(OriginError):
    """The request was not sent: the origin had no connection to spare for it (decision
    0015). Said apart from the origin's own failures, so an operator can tell them apart."""

    status = 503
    public = "too many requests are waiting for the origin; retry later"
    reached = False


class OriginsDown(OriginError):
    """No origin server of the domain is up (decision 0034): none was asked."""

    status = 503
    public = "no origin server is up; retry later"
    reached = False

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RequestBodyError(_Answered):
    """The client's request body did not arrive as framed; the connection is closed after the
    answer, since the rest of the body is unread."""

    status = 400
    public = "the request body ended before its length"


class RequestBodyTimeout(RequestBodyError):
    status = 408
    public = "the request body stopped arriving"


class RequestBodyIncomplete(RequestBodyError):
    pass


class WireError(ProxyError):
    """A record that crossed a process could not be read: not of its shape, or written in a
    version this build does not read. The message says which record and why; the reader
    logs it or treats it as missing (a hint that cannot be read means a sync), never
    crashes on it."""


class FleetError(ProxyError):
    """The fleet could not do what was asked (docs/decisions/0014)."""

    status = 503


class FleetUnavailable(FleetError):
    """Valkey did not answer in time, refused the connection, or answered with an error."""


class NotReplicated(FleetUnavailable):
    """Valkey made the write (a clear, a sync), but fewer than ``fleet.replicas`` replicas
    confirmed it within the call's timeout (``WAIT``): a failover could lose it, so it does
    not count (docs/decisions/0014 "Failover")."""


class PurgeUnsupported(FleetError):
    """Some live edge processes run a build older than decision 0026: they would read a purge
    hint as unreadable and sync, and their sync acks a purge record without applying it. So
    the purge is refused before anything is recorded; clears (and hard purges of all, which
    are clears) still work with them."""

    def __init__(self, count: int) -> None:
        super().__init__(
            f"{count} live edge process{'es run a build' if count != 1 else ' runs a build'}"
            " that cannot apply purges by URL, prefix or tag, or soft purges; upgrade"
            " every node, or clear the whole domain meanwhile"
        )
        self.count = count


class ClearNotConfirmed(FleetError):
    """A clear is recorded in Valkey, but its 200 could not be made true in time: ``acked``
    of the ``live`` edge processes have applied it; the others apply it when they next sync,
    or stop serving from their cache when their lease runs out, within ``retry_after``
    seconds. Retrying the clear is safe."""

    def __init__(self, *, domain: str, number: int, acked: int, live: int, retry_after: int):
        super().__init__(
            f"clear {number} of {domain} applied by {acked} of {live} live edge processes; "
            f"the others apply it or stop serving from cache within {retry_after} s"
        )
        self.domain = domain
        self.number = number
        self.acked = acked
        self.live = live
        self.retry_after = retry_after
