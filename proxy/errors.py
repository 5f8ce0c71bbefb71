"""The exception tree of cdn-proxy.

::

    ProxyError                      base of everything raised on purpose
    ├── ConfigError                 the config file is unreadable or wrong (names the key)
    ├── StateError                  the state database cannot be opened or used
    │   └── NotFoundError           a named token or record does not exist
    └── OriginError                 the origin did not give a usable answer
        ├── OriginTimeout           → 504
        ├── OriginUnreachable       → 502
        └── OriginProtocolError     broken framing or headers → 502

Third-party exceptions (aiohttp, sqlite3, tomllib) are translated into these where they enter:
``config.py``, ``state/sqlite.py`` and ``edge/origin.py``.
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
