"""Configuration: a TOML file turned into frozen dataclasses, once, at start-up.

This is the only module that reads files or the environment. Every problem is reported as one
ConfigError naming the key (``domains[1].origin: ...``); nothing is started before the whole
file is known to be good.

Each table is a frozen dataclass whose fields are its keys. A field's ``Annotated`` metadata is
the function that checks and converts its value (``values.py``, imported as ``check``), and
the field's default is the key's default, so adding a key is one line and ``tables.build`` does
the rest: unknown keys, required keys, defaults. The [[domains]] tables are in ``domains.py``;
this module re-exports them, so ``proxy.config.model`` stays the one place to import from.
Rules between keys (two listeners, two limits) sit in the function that builds their table.
Decision 0012 says why this is hand-written rather than msgspec or pydantic.

Relative paths (``state.path``) are resolved against the directory of the config file, so the
server and the ``token`` commands agree on the same database whatever the working directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import socket
import ssl
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from proxy.config import values as check
from proxy.config.domains import DomainConfig, HealthCheckConfig, build_domains
from proxy.config.filesystems import refusal
from proxy.config.tables import build, only_keys, table
from proxy.config.tls import load_origin_ca, load_server_pair
from proxy.config.values import Listen
from proxy.core.http.forwarded import X_FORWARDED_FOR, Network
from proxy.core.http.upgrade import DEFAULT_ALLOWED as DEFAULT_UPGRADES
from proxy.core.purge.retention import DEFAULT_MAX_BYTES as DEFAULT_PURGE_STATE_BYTES
from proxy.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "ApiConfig",
    "CacheConfig",
    "ClientSettings",
    "Config",
    "DashboardConfig",
    "DomainConfig",
    "EdgeConfig",
    "FleetConfig",
    "HealthCheckConfig",
    "StateConfig",
    "checked_tls",
    "client_settings",
    "load_config",
    "load_config_file",
    "parse_config",
]

_DEFAULT_MAX_OBJECT = 8 * 1024**2  # unless cache.max_bytes is smaller
_DEFAULT_DISK_MAX = 1024**3  # cache.disk_max_bytes when cache.disk_path is set without it
_TABLES = ("edge", "api", "cache", "state", "dashboard", "fleet", "domains")

_T = TypeVar("_T", bound="DataclassInstance")
_Table = TypeVar("_Table", "EdgeConfig", "DomainConfig")


# -- the tables ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EdgeConfig:
    listen: Annotated[Listen, check.listen]
    shutdown_timeout: Annotated[float, check.seconds] = 30.0
    via: Annotated[str, check.token_text] = "cdn-proxy"
    # Edge processes sharing the listen port (SO_REUSEPORT); "auto" is one per usable core.
    # More than one makes them a fleet: see [fleet].
    workers: Annotated[int, check.workers] = 1
    # Request bodies (decision 0015): the longest wait for the next piece of one (nginx's
    # client_body_timeout), and how much of one is read before the origin is asked (nginx's
    # proxy_request_buffering); a longer one is streamed.
    body_timeout: Annotated[float, check.seconds] = 60.0
    request_buffer_bytes: Annotated[int, check.size] = 1024**2
    # Decision 0032: the bytes every body being read may hold at once, for the node (each
    # worker takes its share); past it new bodies are streamed (within the upload shares) or
    # refused 503. And the slowest a body may come: each body_timeout seconds of it must bring
    # body_min_rate x body_timeout bytes (as Apache's mod_reqtimeout MinRate); 0: no minimum.
    request_buffer_total_bytes: Annotated[int, check.size] = 64 * 1024**2
    body_min_rate: Annotated[int, check.rate] = 1024
    # Seconds a connection may take to send a whole request head, from its opening or from
    # the head's first byte (nginx: client_header_timeout); then it is closed (408).
    header_timeout: Annotated[float, check.seconds] = 15.0
    # Seconds a connection may stay idle between requests (nginx: keepalive_timeout).
    keepalive_timeout: Annotated[float, check.seconds] = 30.0
    # Open client connections, for the node (each worker takes its share); "auto" (None)
    # derives it from the open-files limit (proxy/edge/connections.py).
    max_connections: Annotated[int | None, check.max_connections] = None
    # Open connections of one client address (the TCP peer: behind a load balancer, its
    # address), for the node (each worker takes its share); "auto" (None) is a quarter of the
    # process's max_connections, at most 1,024; 0: no limit. Decision 0032.
    max_connections_per_client: Annotated[int | None, check.per_client_connections] = None
    # HTTPS beside listen (decision 0018), serving the same domains; and the certificate for
    # a client whose SNI names no domain with a certificate of its own (or none at all).
    tls_listen: Annotated[Listen | None, check.listen] = None
    tls_cert: Annotated[Path | None, check.path] = None
    tls_key: Annotated[Path | None, check.path] = None
    # Upgraded connections (WebSocket and any other Upgrade, decision 0022): closed after this
    # many seconds without a byte either way (nginx: proxy_read_timeout), and after this many
    # seconds in all, however busy.
    tunnel_idle_timeout: Annotated[float, check.seconds] = 60.0
    tunnel_max_seconds: Annotated[float, check.seconds] = 86_400.0
    # The protocols an Upgrade may be tunnelled to (an allowlist; never one carrying HTTP).
    upgrade_protocols: Annotated[tuple[str, ...], check.upgrade_protocols] = DEFAULT_UPGRADES
    # Peers whose X-Forwarded-For/-Proto (or Forwarded) are believed (proxy/core/http/forwarded.py).
    trusted_proxies: Annotated[tuple[Network, ...], check.networks] = ()
    forwarded_header: Annotated[str, check.forwarded_header] = X_FORWARDED_FOR
    # The access log: "-" (standard output), a file path, or None (false: off). Decision 0019.
    access_log: Annotated[str | None, check.access_log] = None
    access_log_format: Annotated[str, check.access_log_format] = "combined"
    # HTTP/2 (decision 0036): offered by ALPN on the TLS listener, beside http/1.1; and with
    # prior knowledge (h2c) on the plain listener, for a load balancer in front (off: an h2c
    # preface is answered 505). The limits below hold per connection; their defaults are
    # nginx's (http2_max_concurrent_streams, keepalive_requests, send_timeout,
    # large_client_header_buffers) or, where nginx has no key, what it hard-codes.
    http2: Annotated[bool, check.flag] = True
    h2c: Annotated[bool, check.flag] = False
    # Fresh whole-object HTTP/1.1 hits answered before aiohttp reads the request, for a
    # strict subset of request heads (decision 0050); off: every request through aiohttp.
    hit_lane: Annotated[bool, check.flag] = True
    http2_max_concurrent_streams: Annotated[int, check.http2_count] = 128
    # HTTP/2 streams one client address may have open at once over its connections, per node
    # (each worker its share; 0: no limit), decision 0060: past it a new stream is refused
    # (REFUSED_STREAM). 16 full connections; behind a load balancer, its address's.
    http2_streams_per_client: Annotated[int, check.count_or_zero] = 2048
    # Decoded request header list (HPACK bomb): RST_STREAM past it, GOAWAY if it keeps on.
    http2_max_header_list_bytes: Annotated[int, check.http2_size] = 64 * 1024
    # Requests per connection (nginx: keepalive_requests): then GOAWAY, in-flight ones finish.
    http2_max_requests: Annotated[int, check.count] = 1000
    # Streams a client may cancel (RST_STREAM) before their answer, less one per stream it
    # lets finish (Rapid Reset, CVE-2023-44487): past it, GOAWAY and close (nginx 1.25.3 closes
    # past twice max_concurrent_streams new streams per read; this counts across reads too).
    http2_reset_budget: Annotated[int, check.count] = 256
    # SETTINGS, PING, PRIORITY, WINDOW_UPDATE, empty DATA and RST_STREAM frames a connection
    # may send per second on average, with this burst (nginx closes floods of each kind).
    http2_control_frames_per_second: Annotated[int, check.count] = 100
    http2_control_frame_burst: Annotated[int, check.count] = 1000
    # Seconds an answer may wait for the client to open its flow-control window or read
    # (nginx: send_timeout); then the stream is reset. Idle connections close after
    # keepalive_timeout; a request body waits body_timeout for its next piece.
    send_timeout: Annotated[float, check.seconds] = 60.0
    # Answers not yet sent (decision 0046). On both protocols an answer waiting for its
    # client must see 64 KiB go out each send_timeout (a client that reads nothing, or
    # trickles, is cut); a relayed answer is read ahead at most answer_buffer_bytes before it
    # is sent (whole when it ends within them, else streamed at the client's pace); the
    # bodies fills read whole hold at most fill_buffer_total_bytes in each process (past
    # it, an answer is relayed unstored).
    answer_buffer_bytes: Annotated[int, check.size] = 64 * 1024
    # What the answers not yet sent of one connection, and of one client address (per node,
    # each worker its share), may hold (decision 0051): past it an answer is refused 503.
    answers_held_per_connection_bytes: Annotated[int, check.size] = 16 * 1024**2
    answers_held_per_client_bytes: Annotated[int, check.size] = 64 * 1024**2
    # Requests one connection, and one client address (per node, each worker its share), may
    # have the origin asked for at once (decision 0057): past it a request waits its turn.
    origin_requests_per_connection: Annotated[int, check.count] = 32
    origin_requests_per_client: Annotated[int, check.count] = 256
    fill_buffer_total_bytes: Annotated[int, check.size] = 128 * 1024**2
    # Compression (decision 0046): the bodies waiting for or in compression in each process,
    # in one thread of its own; past it a body is stored as sent, and compressed on a later
    # miss. A body over 64 KiB is compressed after its first client is answered.
    compress_queue_bytes: Annotated[int, check.size] = 16 * 1024**2


@dataclass(frozen=True, slots=True)
class ApiConfig:
    listen: Annotated[Listen, check.listen]
    max_body_bytes: Annotated[int, check.size] = 4096
    auth_failures_allowed: Annotated[int, check.count] = 10
    auth_failure_window: Annotated[float, check.seconds] = 60.0
    # seconds a clear-cache request's whole body may take to arrive (it is at most
    # max_body_bytes); a body still incomplete then is answered 408 and its connection closed
    body_timeout: Annotated[float, check.seconds] = 10.0
    header_timeout: Annotated[float, check.seconds] = 15.0  # as edge.header_timeout
    keepalive_timeout: Annotated[float, check.seconds] = 30.0  # as edge.keepalive_timeout
    trusted_proxies: Annotated[tuple[Network, ...], check.networks] = ()  # as edge.trusted_proxies
    forwarded_header: Annotated[str, check.forwarded_header] = X_FORWARDED_FOR
    # A purge body (POST /api/v1/cdn/purge) carries up to 256 URLs, prefixes or tags: 1 MiB
    # holds 256 targets of 4 KiB; raise it for longer ones (a target may have 8,190 bytes).
    max_purge_body_bytes: Annotated[int, check.size] = 1024**2


@dataclass(frozen=True, slots=True)
class CacheConfig:
    max_bytes: Annotated[int, check.size]
    max_object_bytes: Annotated[int, check.size]  # defaults to min(max_bytes, 8 MiB): see _cache
    name: Annotated[str, check.token_text] = "cdn-proxy"
    # The purge state's own bound, beside max_bytes (decision 0037): past it, old purges
    # are folded (forgotten, retired, or a domain cleared), each domain down to a fair share.
    purge_state_max_bytes: Annotated[int, check.size] = DEFAULT_PURGE_STATE_BYTES
    # The shared tier (decision 0030, README "The shared tier"): one directory per node, relative
    # to the config file; None keeps only the memory tier. Both need a restart to change.
    disk_path: Annotated[Path | None, check.path] = None
    disk_max_bytes: Annotated[int, check.size] = _DEFAULT_DISK_MAX
    # How long a worker waits for another worker's fill of the same key before it fetches by
    # itself (issue 23 §2, like nginx's proxy_cache_lock_timeout). Needs the shared tier.
    lock_timeout: Annotated[float, check.seconds] = 5.0
    # Hits of bodies stored in files, on plain HTTP/1.1, by sendfile (zero copy) instead of
    # reads and writes: off by default, as nginx's `sendfile` (decision 0039 has the numbers).
    sendfile: Annotated[bool, check.flag] = False
    # Seconds between two walks of the shared tier's body files by the node's sweep, which
    # removes the files a crash left behind (issue 31 §5, proxy/store/shared/sweep.py).
    sweep_pause: Annotated[float, check.seconds] = 30.0
    # Seconds a URL purge's record stays in the shared tier's purge state, for fills already
    # under way when it came (decision 0059); then what it covers is removed and it goes.
    url_purge_keep: Annotated[float, check.seconds] = 300.0


@dataclass(frozen=True, slots=True)
class StateConfig:
    path: Annotated[Path, check.path]
    audit_max_rows: Annotated[int, check.count] = 100_000
    # true: each audit record waits for fdatasync before its clear is answered, so that a
    # power loss cannot lose it either (a process crash cannot without it)
    audit_fsync: Annotated[bool, check.flag] = False


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    """The dashboard on the API listener: sessions and sign-in throttling."""

    # seconds without a request that end a session
    session_idle_timeout: Annotated[float, check.seconds] = 3600.0
    # seconds after sign-in that end it regardless
    session_lifetime: Annotated[float, check.seconds] = 28_800.0
    # per user name and per address, before delays start
    signin_failures_allowed: Annotated[int, check.count] = 5
    # the cap of the doubling delay, in seconds
    signin_max_delay: Annotated[float, check.delay_cap] = 900.0
    # The listener speaks plain HTTP; true marks the session cookie Secure, for when the
    # dashboard is reached over HTTPS through a TLS-terminating proxy.
    secure_cookie: Annotated[bool, check.flag] = False


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """Edge processes and control planes coordinated through Valkey (decision 0014)."""

    # redis://, rediss:// or unix:// (Valkey or Redis). Left out: the control process starts
    # an embedded Valkey on a Unix socket beside the state database (workers on one machine).
    url: Annotated[str | None, check.fleet_url] = None
    node: Annotated[str, check.token_text] = ""  # this machine's name in the fleet; the host name
    lease: Annotated[float, check.seconds] = 2.0  # an edge process serves from cache only within it
    renew: Annotated[float, check.seconds] = 0.5  # how often an edge process renews its lease
    # How long a clear may wait for every live edge process before it answers 503.
    clear_timeout: Annotated[float, check.seconds] = 5.0
    # How often a waiting clear asks Valkey again when no ack hint has come (hints are lost).
    poll_interval: Annotated[float, check.seconds] = 0.05
    timeout: Annotated[float, check.seconds] = 0.5  # the longest any one Valkey call may take
    # How many replicas must have each clear and each sync (WAIT) before it counts, so a
    # failover to a replica loses neither; 0: a single Valkey (0014 "Failover").
    replicas: Annotated[int, check.replicas] = 0
    # Peer fills (decision 0047): a miss asks the key's owner among the fleet's nodes before
    # the origin; where the other nodes reach this node's edge ("": its listen address); the
    # longest wait for the owner's answer head before the origin is asked instead.
    peer_fill: Annotated[bool, check.flag] = False
    advertise: Annotated[str, check.advertise_url] = ""
    peer_timeout: Annotated[float, check.seconds] = 0.3


@dataclass(frozen=True, slots=True)
class Config:
    """A node's roles are its tables: [edge] runs edge processes, [api] the control plane
    (clear-cache API, dashboard, metrics, the state database); a node may have both."""

    edge: EdgeConfig | None
    api: ApiConfig | None
    cache: CacheConfig | None  # with [edge]
    state: StateConfig | None  # with [api]
    domains: tuple[DomainConfig, ...]
    by_name: Mapping[str, DomainConfig] = field(repr=False, compare=False)
    dashboard: DashboardConfig = field(default_factory=DashboardConfig)
    # None: one process, no coordination (workers = 1 and no [fleet] table).
    fleet: FleetConfig | None = None

    def edge_role(self) -> tuple[EdgeConfig, CacheConfig]:
        """[edge] and [cache], for the code that runs an edge; ConfigError on a node without."""
        if self.edge is None or self.cache is None:
            raise ConfigError("edge", "this node has no [edge] table: it runs no edge")
        return self.edge, self.cache

    def api_role(self) -> tuple[ApiConfig, StateConfig]:
        """[api] and [state], for the control plane; ConfigError on a node without."""
        if self.api is None or self.state is None:
            raise ConfigError("api", "this node has no [api] table: it runs no control plane")
        return self.api, self.state


# -- reading and building -----------------------------------------------------------------------


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and check a config file; raise ConfigError naming the first bad key."""
    return load_config_file(path)[0]


def load_config_file(path: str | os.PathLike[str]) -> tuple[Config, str]:
    """``load_config``, and the SHA-256 (hex) of the bytes read: a config reload
    (proxy/process/reload.py) tells by it whether two processes read the same file."""
    file = Path(path)
    try:
        raw = file.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(str(file), "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(file), f"cannot be read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(file), f"is not valid TOML ({exc})") from None
    digest = hashlib.sha256(raw).hexdigest()
    return parse_config(data, base_dir=file.resolve().parent), digest


def parse_config(data: Mapping[str, Any], *, base_dir: Path) -> Config:
    """Build a Config from already-parsed TOML data."""
    only_keys("", data, _TABLES)
    if data.get("edge") is None and data.get("api") is None:
        raise ConfigError("edge", "a node needs an [edge] table, an [api] table, or both")
    edge = _optional(EdgeConfig, data, "edge")
    if edge is not None and edge.access_log not in (None, "-"):
        edge = dataclasses.replace(edge, access_log=str(base_dir / str(edge.access_log)))
    api = _optional(ApiConfig, data, "api")
    if edge is not None and api is not None and api.listen == edge.listen and api.listen.port:
        raise ConfigError("api.listen", "must differ from edge.listen")
    cache = _cache(table(data, "cache"), base_dir) if edge is not None else None
    state = None
    if api is not None or "state" in data:
        state = build(StateConfig, "state", table(data, "state"))
        # An absolute state.path stays as it is: joining an absolute path replaces the base.
        state = dataclasses.replace(state, path=base_dir / state.path)
    domains = build_domains(data.get("domains"))
    edge, domains = checked_tls(edge, domains, base_dir)
    if edge is not None and api is not None and api.listen == edge.tls_listen and api.listen.port:
        # else start-up fails binding the API: "address already in use", by this very node
        raise ConfigError("api.listen", "must differ from edge.tls_listen")
    return Config(
        edge=edge,
        api=api,
        cache=cache,
        state=state,
        domains=domains,
        by_name={domain.name: domain for domain in domains},
        dashboard=_dashboard(table(data, "dashboard", required=False)),
        fleet=_fleet(data, edge, api),
    )


def _optional(cls: type[_T], data: Mapping[str, Any], key: str) -> _T | None:
    return None if data.get(key) is None else build(cls, key, table(data, key))


def _fleet(
    data: Mapping[str, Any], edge: EdgeConfig | None, api: ApiConfig | None
) -> FleetConfig | None:
    """[fleet] as given, or the embedded default for several workers on one node."""
    raw = table(data, "fleet", required=False)
    alone = edge is not None and edge.workers == 1 and api is not None
    if alone and "fleet" not in data:
        return None  # one process: edge and API together, nothing to coordinate
    fleet = build(FleetConfig, "fleet", raw)
    if fleet.url is None and (edge is None or api is None):
        role = "[api]" if edge is None else "[edge]"
        raise ConfigError(
            "fleet.url", f"is required on a node with only {role}: it names the fleet's Valkey"
        )
    if fleet.renew * 2 > fleet.lease:
        raise ConfigError("fleet.renew", "must be at most half of fleet.lease")
    if fleet.clear_timeout <= fleet.lease:
        raise ConfigError("fleet.clear_timeout", "must be longer than fleet.lease")
    if fleet.poll_interval > fleet.clear_timeout:
        raise ConfigError("fleet.poll_interval", "must be at most fleet.clear_timeout")
    if fleet.timeout >= fleet.lease:
        # A renewal allowed to take the whole lease could never keep the lease live.
        raise ConfigError("fleet.timeout", "must be shorter than fleet.lease")
    if fleet.replicas and fleet.url is None:
        raise ConfigError("fleet.replicas", "needs fleet.url: the embedded Valkey has no replicas")
    wildcard = edge is not None and edge.listen.host in ("0.0.0.0", "::", "")  # noqa: S104
    if fleet.peer_fill and not fleet.advertise and wildcard:
        raise ConfigError(
            "fleet.advertise",
            "is required with peer_fill when edge.listen is a wildcard address the other "
            "nodes cannot reach",
        )
    if not fleet.node:
        fleet = dataclasses.replace(fleet, node=_host_name())
    return fleet


def _host_name() -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:64]
    return name or "node"


def _cache(raw: Mapping[str, Any], base_dir: Path) -> CacheConfig:
    max_bytes = check.size("cache.max_bytes", raw.get("max_bytes"))
    cache = build(
        CacheConfig, "cache", {"max_object_bytes": min(max_bytes, _DEFAULT_MAX_OBJECT), **raw}
    )
    if cache.disk_path is None:
        for key in ("disk_max_bytes", "lock_timeout", "sendfile", "sweep_pause", "url_purge_keep"):
            if key in raw:
                raise ConfigError(f"cache.{key}", "needs cache.disk_path (the shared tier)")
        if cache.max_object_bytes > cache.max_bytes:
            raise ConfigError("cache.max_object_bytes", "must not be larger than cache.max_bytes")
        return cache
    # With a shared tier an object may be larger than the memory tier: the memory tier keeps
    # only the objects that fit its own share (proxy/store/tiered.py), the disk holds the rest.
    if cache.max_object_bytes > cache.disk_max_bytes:
        raise ConfigError("cache.max_object_bytes", "must not be larger than cache.disk_max_bytes")
    # An absolute disk_path stays as it is: joining an absolute path replaces the base.
    disk_path = base_dir / cache.disk_path
    refused = refusal(disk_path)
    if refused is not None:
        raise ConfigError("cache.disk_path", refused)
    return dataclasses.replace(cache, disk_path=disk_path)


def _dashboard(raw: Mapping[str, Any]) -> DashboardConfig:
    dashboard = build(DashboardConfig, "dashboard", raw)
    if dashboard.session_idle_timeout > dashboard.session_lifetime:
        raise ConfigError(
            "dashboard.session_idle_timeout", "must not be longer than dashboard.session_lifetime"
        )
    return dashboard


def checked_tls(
    edge: EdgeConfig | None, domains: Sequence[DomainConfig], base_dir: Path
) -> tuple[EdgeConfig | None, tuple[DomainConfig, ...]]:
    """The [edge] and [[domains]] tables with their TLS paths resolved against ``base_dir``,
    each certificate and key pair loaded once (on an edge node) to prove it good."""
    if edge is not None:
        edge = _with_pair(edge, "edge", base_dir)
    resolved = []
    for index, domain in enumerate(domains):
        domain = _with_pair(domain, f"domains[{index}]", base_dir)
        if domain.origin_ca is not None:
            if not all(o.startswith("https://") for o in domain.origins + domain.backup_origins):
                raise ConfigError(
                    f"domains[{index}].origin_ca", "is only for an origin given as https://"
                )
            domain = dataclasses.replace(domain, origin_ca=base_dir / domain.origin_ca)
        resolved.append(domain)
    if edge is None:
        return edge, tuple(resolved)
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if edge.tls_cert is not None and edge.tls_key is not None:
        load_server_pair(probe, edge.tls_cert, edge.tls_key, "edge")
    for index, domain in enumerate(resolved):
        if domain.tls_cert is not None and domain.tls_key is not None:
            load_server_pair(probe, domain.tls_cert, domain.tls_key, f"domains[{index}]")
        if domain.origin_ca is not None:
            load_origin_ca(domain.origin_ca, f"domains[{index}]")
    if edge.tls_listen is not None:
        if edge.tls_cert is None and all(domain.tls_cert is None for domain in resolved):
            raise ConfigError(
                "edge.tls_listen", "needs a certificate: edge.tls_cert or a domain's tls_cert"
            )
        if edge.tls_listen == edge.listen and edge.listen.port:
            raise ConfigError("edge.tls_listen", "must differ from edge.listen")
    return edge, tuple(resolved)


def _with_pair(table: _Table, where: str, base_dir: Path) -> _Table:
    """The table with tls_cert and tls_key resolved; both or neither must be given."""
    if (table.tls_cert is None) != (table.tls_key is None):
        given, missing = (
            ("tls_cert", "tls_key") if table.tls_key is None else ("tls_key", "tls_cert")
        )
        raise ConfigError(f"{where}.{missing}", f"is required with {where}.{given}")
    if table.tls_cert is None or table.tls_key is None:
        return table
    return dataclasses.replace(
        table, tls_cert=base_dir / table.tls_cert, tls_key=base_dir / table.tls_key
    )


# -- the purge client ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """Where the ``purge`` client sends its request, from flags or the environment."""

    url: str | None
    token: str | None


def client_settings(url: str | None, token: str | None) -> ClientSettings:
    """Flags win; CDN_PROXY_URL and CDN_PROXY_TOKEN fill what the flags leave out."""
    return ClientSettings(
        url=url or os.environ.get("CDN_PROXY_URL") or None,
        token=token or os.environ.get("CDN_PROXY_TOKEN") or None,
    )
