"""Several origin servers per domain: which one a request goes to, and which are up.

Theory of operation (decision 0034). A domain's ``OriginPool`` holds one ``ServerState`` per
origin server, primaries first, then backups. Each server is up or down:

- it goes down after ``fails`` consecutive failures, counted both from the active probe
  (edge/health.py) and passively from real requests (nginx's ``max_fails``): only a failure
  to connect (refused, unreachable, a connect timeout, a TLS handshake) counts
  (``counts_against``). A request that reached the server and then timed out, or broke,
  does not: one slow URL (a report that takes a minute) would otherwise mark every server
  down in turn, and every other request of the domain would get a 503 (decision 0046).
  Any answer at all, even a 5xx, is not a passive failure either: the server is reachable,
  and whether its 5xx may be replaced by stale content is the cache's rule;
- with a health check, it comes back after ``passes`` consecutive successful probes;
  without one, a down server gets one trial request ``retry_after`` seconds after it went
  down (nginx's ``fail_timeout``): an answer brings it back, a failure restarts the wait.

``choose`` picks among the up primaries (``round_robin``, ``least_connections``, or ``hash``:
rendezvous hashing of the cache key's URL, so each URL goes to one server and a server
going down moves only its own URLs); among the up backups when no primary is up; and None
when nothing is up, which the edge answers 503 with Retry-After (or stale content).

A domain with a single origin server and no health check is never marked down: there is
nothing to fail over to, so each request tries it, as before this module existed.

``may_retry`` is the retry rule: a request whose connection failed before any byte of it was
sent may go to another server whatever its method; one that may have reached the origin only
when its method is idempotent (RFC 9110 §9.2.2) and it did not time out (the server may still
be working on it: a second try doubles the load of a server that is already slow, as nginx's
``proxy_next_upstream`` without ``timeout``). Either way at most once per request, and this
is the only retry: the origin client's own retry of a broken connection is off (decision
0046), so one PUT is delivered at most twice, never four times.

No clock here: every call that depends on time is given ``now``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})  # RFC 9110 §9.2.2
BALANCES = ("round_robin", "least_connections", "hash")
DEFAULT_RETRY_AFTER = 10.0  # seconds: nginx's fail_timeout default


@dataclass(slots=True)
class ServerState:
    """One origin server of a domain, as this edge process sees it."""

    url: str
    backup: bool
    since: float  # when it last went up or down (or was configured)
    up: bool = True
    fails: int = 0  # consecutive failures
    passes: int = 0  # consecutive probe successes while down
    last_failure: str | None = None
    last_failure_at: float | None = None
    requests: int = 0  # requests sent to it (each try of a retried request counts)
    errors: int = 0  # of those, how many failed (connection, timeout, broken answer)
    active: int = 0  # requests at it now (least_connections)
    trial_at: float | None = None  # without probes: when a down server may be tried again

    def row(self, now: float) -> dict[str, object]:
        """Its state as /readyz and the dashboard show it."""
        return {
            "origin": self.url,
            "backup": self.backup,
            "up": self.up,
            "since_seconds": round(max(0.0, now - self.since), 3),
            "last_failure": self.last_failure,
            "last_failure_seconds_ago": None
            if self.last_failure_at is None
            else round(max(0.0, now - self.last_failure_at), 3),
            "requests": self.requests,
            "errors": self.errors,
            "active": self.active,
        }


@dataclass(frozen=True, slots=True)
class PoolRules:
    """A domain's balancing and up/down settings, from its config."""

    balance: str = "round_robin"
    fails: int = 2
    passes: int = 2
    probing: bool = False  # a health check runs: only probes bring a server back
    retry_after: float = DEFAULT_RETRY_AFTER  # without probes: the wait before a trial
    interval: float = 0.0  # with probes: seconds between two


@dataclass(slots=True)
class OriginPool:
    """A domain's origin servers and their states. Methods are called from one event loop."""

    rules: PoolRules
    servers: list[ServerState]
    _turn: int = field(default=0)

    @classmethod
    def new(
        cls,
        origins: Sequence[str],
        backups: Sequence[str],
        rules: PoolRules,
        now: float,
        previous: OriginPool | None = None,
    ) -> OriginPool:
        """The pool for a (re)loaded domain: servers it had already keep their state (and
        their counts); new ones start up."""
        known = {} if previous is None else {s.url: s for s in previous.servers}
        servers = []
        for url, backup in [(u, False) for u in origins] + [(u, True) for u in backups]:
            state = known.get(url)
            if state is None:
                state = ServerState(url=url, backup=backup, since=now)
            state.backup = backup
            servers.append(state)
        return cls(rules=rules, servers=servers)

    @property
    def markable(self) -> bool:
        """Whether servers are ever marked down (see the module's last paragraph)."""
        return self.rules.probing or len(self.servers) > 1

    def choose(self, key: str, now: float, exclude: Iterable[str] = ()) -> ServerState | None:
        """The server for a request whose cache key's URL is ``key``, or None when no server
        may be asked (all down). ``exclude``: servers this request has tried already."""
        tried = set(exclude)
        for backup in (False, True):
            up = [s for s in self.servers if s.up and s.backup is backup and s.url not in tried]
            if up:
                return self._pick(up, key)
        due = [
            s
            for s in self.servers
            if not s.up and s.trial_at is not None and s.trial_at <= now and s.url not in tried
        ]
        if due:
            server = min(due, key=lambda s: (s.backup, s.trial_at or 0.0))
            server.trial_at = now + self.rules.retry_after  # one trial per wait
            return server
        return None

    def _pick(self, up: list[ServerState], key: str) -> ServerState:
        if len(up) == 1:
            return up[0]
        if self.rules.balance == "hash":
            return max(up, key=lambda s: _weight(s.url, key))
        self._turn += 1
        if self.rules.balance == "least_connections":
            fewest = min(s.active for s in up)
            up = [s for s in up if s.active == fewest]
        return up[self._turn % len(up)]

    def retry_in(self, now: float) -> float | None:
        """Seconds until a server might be asked again, while none is up: the Retry-After."""
        if self.rules.probing:
            return max(1.0, self.rules.interval * self.rules.passes)
        trials = [s.trial_at for s in self.servers if s.trial_at is not None]
        if trials:
            return max(1.0, min(trials) - now)
        return None

    # -- what happened -------------------------------------------------------------------

    def failed(self, server: ServerState, reason: str, now: float, *, probe: bool) -> bool:
        """A connection error or timeout at ``server``, on a real request (``probe`` False) or
        a probe. Returns whether this failure marked it down."""
        server.last_failure, server.last_failure_at = reason, now
        server.passes = 0
        server.fails += 1
        if not server.up:
            if not self.rules.probing and not probe:
                server.trial_at = now + self.rules.retry_after  # the trial failed: wait again
            return False
        if not self.markable or server.fails < self.rules.fails:
            return False
        server.up, server.since = False, now
        server.trial_at = None if self.rules.probing else now + self.rules.retry_after
        return True

    def succeeded(self, server: ServerState, now: float, *, probe: bool) -> bool:
        """An answer from ``server`` (any status). Returns whether it brought it back up."""
        server.fails = 0
        if server.up:
            return False
        if self.rules.probing and not probe:
            return False  # with probes, only probes bring a server back
        if probe:
            server.passes += 1
            if server.passes < self.rules.passes:
                return False
        server.up, server.since, server.passes, server.trial_at = True, now, 0, None
        return True


def may_retry(method: str, *, reached: bool, timed_out: bool = False) -> bool:
    """Whether a failed request may be tried again (once): always when nothing of it was
    sent, else only when its method is idempotent (RFC 9110 §9.2.2) and it did not time
    out waiting for the server."""
    if not reached:
        return True
    return not timed_out and method in IDEMPOTENT


def counts_against(*, reached: bool) -> bool:
    """Whether a real request's failure counts against its server (towards ``fails``): only
    when it failed before anything was sent, that is to connect (decision 0046)."""
    return not reached


def _weight(server: str, key: str) -> bytes:
    """Rendezvous (highest random weight) hashing: the server with the highest weight for a
    key gets it, so removing one server moves only the keys it had."""
    return hashlib.blake2b(f"{server}\n{key}".encode(), digest_size=8).digest()
