"""The exception tree of cdn-proxy.

::

    ProxyError                      base of everything raised on purpose
    ├── ConfigError                 the config file is unreadable or wrong (names the key)
    ├── StateError                  the state database cannot be opened or used
    │   └── NotFoundError           a named token or record does not exist
    ├── OriginError                 the origin did not give a usable answer
    │   ├── OriginTimeout           → 504
    │   ├── OriginUnreachable       → 502
    │   └── OriginProtocolError     broken framing or headers → 502
    └── FleetError                  the fleet (Valkey) could not do what was asked → 503
        ├── FleetUnavailable        Valkey did not answer, or answered with an error
        │   └── NotReplicated       a write was made, but fewer than fleet.replicas replicas
        │                           confirmed it in time (it could be lost in a failover)
        └── ClearNotConfirmed       a clear is recorded, but not every live edge process has
                                    applied it within fleet.clear_timeout

Third-party exceptions (aiohttp, sqlite3, tomllib, valkey) are translated into these where they
enter: ``config.py``, ``state/sqlite.py``, ``edge/origin.py`` and ``fleet/scripts.py``.
"""


class ProxyError(Exception):
    """Base of every error cdn-proxy raises on purpose."""


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


class OriginError(ProxyError):
    """The origin did not give a usable answer."""

    status = 502
    reason = "Bad Gateway"
    public = "the origin failed"  # what the client is told; the message is for the log


class OriginTimeout(OriginError):
    status = 504
    reason = "Gateway Timeout"
    public = "the origin did not answer in time"


class OriginUnreachable(OriginError):
    status = 502
    reason = "Bad Gateway"
    public = "the origin is unreachable"


class OriginProtocolError(OriginError):
    status = 502
    reason = "Bad Gateway"
    public = "the origin sent a broken response"


class FleetError(ProxyError):
    """The fleet could not do what was asked (docs/decisions/0014)."""

    status = 503


class FleetUnavailable(FleetError):
    """Valkey did not answer in time, refused the connection, or answered with an error."""


class NotReplicated(FleetUnavailable):
    """Valkey made the write (a clear, a sync), but fewer than ``fleet.replicas`` replicas
    confirmed it within the call's timeout (``WAIT``): a failover could lose it, so it does
    not count (docs/decisions/0014 "Failover")."""


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
