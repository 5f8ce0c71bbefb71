"""The config file: every problem is one ConfigError naming the key, and good values are kept.

The [dashboard] table has its own tests in tests/dashboard/test_config.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from proxy.config.model import (
    ApiConfig,
    CacheConfig,
    DomainConfig,
    EdgeConfig,
    StateConfig,
    load_config,
    parse_config,
)
from proxy.config.values import Listen
from proxy.errors import ConfigError
from proxy.process.worker import fleet_settings


def base() -> dict[str, Any]:
    """A minimal good config, fresh for each test so one can change a table in place."""
    return {
        "edge": {"listen": "127.0.0.1:8080"},
        "api": {"listen": "127.0.0.1:8081"},
        "cache": {"max_bytes": "1MiB"},
        "state": {"path": "state.db"},
        "domains": [{"name": "example.com", "origin": "http://127.0.0.1:9000"}],
    }


def test_a_minimal_config_gets_the_documented_defaults(tmp_path: Path) -> None:
    config = parse_config(base(), base_dir=tmp_path)
    assert config.edge == EdgeConfig(Listen("127.0.0.1", 8080), 30.0, "cdn-proxy", workers=1)
    assert config.fleet is None  # one process: nothing to coordinate
    assert config.api == ApiConfig(Listen("127.0.0.1", 8081), 4096, 10, 60.0)
    assert config.cache == CacheConfig(max_bytes=1024**2, max_object_bytes=1024**2)
    assert config.cache.purge_state_max_bytes == 64 * 1024**2  # README, decision 0037
    assert config.state == StateConfig(path=tmp_path / "state.db", audit_max_rows=100_000)
    origin = "http://127.0.0.1:9000"
    assert config.domains == (DomainConfig("example.com", origin, origins=(origin,)),)
    assert config.by_name == {"example.com": config.domains[0]}


def test_every_key_can_be_set(tmp_path: Path) -> None:
    data = base()
    data["edge"] = {"listen": "[::1]:80", "shutdown_timeout": 5, "via": "edge-1"}
    data["api"] = {
        "listen": "0.0.0.0:0",
        "max_body_bytes": "1KiB",
        "auth_failures_allowed": 3,
        "auth_failure_window": 0.5,
        "body_timeout": 2,
    }
    data["cache"] = {
        "max_bytes": 10_000,
        "max_object_bytes": "2 KB",
        "name": "c.1",
        "purge_state_max_bytes": "4MiB",
    }
    data["state"] = {"path": "/abs/state.db", "audit_max_rows": 7}
    data["domains"] = [
        {
            "name": "Example.COM.",
            "origin": "https://[::1]:8443/",
            "heuristic_freshness": True,
            "connect_timeout": 1,
            "read_timeout": 2.5,
            "stale_if_error": 0,
        },
        {"name": "b.test", "origin": "http://origin.test", "stale_if_error": 60},
    ]
    config = parse_config(data, base_dir=tmp_path)
    assert config.edge == EdgeConfig(Listen("::1", 80), 5.0, "edge-1")
    # Written back as it was given: an error naming it reads as a host and a port.
    assert str(Listen("::1", 80)) == "[::1]:80" and str(Listen("0.0.0.0", 0)) == "0.0.0.0:0"
    assert config.api == ApiConfig(Listen("0.0.0.0", 0), 1024, 3, 0.5, 2.0)
    assert config.cache == CacheConfig(10_000, 2000, "c.1", 4 * 1024**2)
    assert config.state == StateConfig(Path("/abs/state.db"), 7)
    assert config.domains == (
        DomainConfig(
            "example.com",
            "https://[::1]:8443",
            True,
            1.0,
            2.5,
            0.0,
            origins=("https://[::1]:8443",),
        ),
        DomainConfig(
            "b.test", "http://origin.test", stale_if_error=60.0, origins=("http://origin.test",)
        ),
    )
    assert isinstance(config.edge.shutdown_timeout, float)


def test_request_body_and_origin_connection_keys(tmp_path: Path) -> None:
    """Decision 0015: the defaults, and each key set."""
    data = base()
    config = parse_config(data, base_dir=tmp_path)
    edge, domain = config.edge_role()[0], config.domains[0]
    assert (edge.body_timeout, edge.request_buffer_bytes) == (60.0, 1024**2)
    assert (domain.origin_connections, domain.origin_queue_timeout) == (256, 5.0)
    data["edge"].update(body_timeout=2, request_buffer_bytes="64KiB")
    data["domains"][0].update(origin_connections=8, origin_queue_timeout=0.5)
    config = parse_config(data, base_dir=tmp_path)
    edge, domain = config.edge_role()[0], config.domains[0]
    assert (edge.body_timeout, edge.request_buffer_bytes) == (2.0, 64 * 1024)
    assert (domain.origin_connections, domain.origin_queue_timeout) == (8, 0.5)


def test_connection_limits_have_defaults_and_take_auto(tmp_path: Path) -> None:
    edge = parse_config(base(), base_dir=tmp_path).edge_role()[0]
    assert (edge.header_timeout, edge.keepalive_timeout, edge.max_connections) == (15, 30, None)
    data = base()
    data["edge"]["max_connections"] = "auto"
    assert parse_config(data, base_dir=tmp_path).edge_role()[0].max_connections is None
    data["edge"]["max_connections"] = 500
    assert parse_config(data, base_dir=tmp_path).edge_role()[0].max_connections == 500


def test_the_default_object_limit_is_at_most_8_mib(tmp_path: Path) -> None:
    data = base()
    data["cache"] = {"max_bytes": "1GiB"}
    assert parse_config(data, base_dir=tmp_path).edge_role()[1].max_object_bytes == 8 * 1024**2


def test_the_shared_tier_is_off_unless_disk_path_is_set(tmp_path: Path) -> None:
    cache = parse_config(base(), base_dir=tmp_path).edge_role()[1]
    assert (cache.disk_path, cache.disk_max_bytes) == (None, 1024**3)


def test_disk_path_is_relative_to_the_file_and_lifts_the_object_limit(tmp_path: Path) -> None:
    """With a shared tier, max_object_bytes is bounded by the disk, not the memory tier."""
    data = base()
    data["cache"] = {"max_bytes": "1MiB", "max_object_bytes": "1GiB", "disk_path": "../c"}
    cache = parse_config(data, base_dir=tmp_path).edge_role()[1]
    assert cache.disk_path == tmp_path / "../c"
    assert (cache.max_object_bytes, cache.disk_max_bytes) == (1024**3, 1024**3)
    data["cache"] = {"max_bytes": "1MiB", "disk_path": "/abs/c", "disk_max_bytes": "2GiB"}
    cache = parse_config(data, base_dir=tmp_path).edge_role()[1]
    assert (cache.disk_path, cache.disk_max_bytes) == (Path("/abs/c"), 2 * 1024**3)
    assert cache.lock_timeout == 5.0  # like nginx's proxy_cache_lock_timeout
    data["cache"] = {"max_bytes": "1MiB", "disk_path": "c", "lock_timeout": 0.5}
    assert parse_config(data, base_dir=tmp_path).edge_role()[1].lock_timeout == 0.5
    for wrong in (0, -1, "5s", True):
        data["cache"] = {"max_bytes": "1MiB", "disk_path": "c", "lock_timeout": wrong}
        with pytest.raises(ConfigError) as raised:
            parse_config(data, base_dir=tmp_path)
        assert str(raised.value).startswith("cache.lock_timeout: must be a number of seconds")
    data["cache"] = {"max_bytes": "1MiB", "disk_path": "c", "disk_max_bytes": "1MiB"}
    data["cache"]["max_object_bytes"] = "2MiB"
    with pytest.raises(ConfigError) as raised:
        parse_config(data, base_dir=tmp_path)
    assert str(raised.value) == (
        "cache.max_object_bytes: must not be larger than cache.disk_max_bytes"
    )


def _set(data: dict[str, Any], path: str, value: object) -> None:
    """Set ``table.key`` (or ``domains.key`` for the first domain) to value; None deletes it."""
    table, _, key = path.partition(".")
    target = data["domains"][0] if table == "domains" else data.setdefault(table, {})
    if not key:
        data[table] = value
    elif value is None:
        del target[key]
    else:
        target[key] = value


BAD = [
    ("nonsense", 1, "nonsense: unknown key (expected one of: api, cache, dashboard"),
    ("edge", None, "fleet.url: is required on a node with only [api]: it names the fleet's"),
    ("edge.workers", 0, 'edge.workers: must be a whole number from 1 to 256, or "auto"'),
    ("edge.workers", "2", 'edge.workers: must be a whole number from 1 to 256, or "auto"'),
    ("edge.workers", 1.5, "edge.workers: must be a whole number"),
    ("fleet", 1, "fleet: must be a table"),
    ("fleet.url", "http://h:1", "fleet.url: 'http://h:1' must be a redis://, rediss:// or unix://"),
    ("fleet.url", "redis://", "fleet.url: 'redis://' has no host"),
    ("fleet.url", "unix://", "fleet.url: 'unix://' names no socket path"),
    ("fleet.renew", 1.5, "fleet.renew: must be at most half of fleet.lease"),
    ("fleet.clear_timeout", 2, "fleet.clear_timeout: must be longer than fleet.lease"),
    ("fleet.lease", 0, "fleet.lease: must be a number of seconds greater than zero"),
    ("fleet.poll_interval", 0, "fleet.poll_interval: must be a number of seconds greater than"),
    ("fleet.poll_interval", 6, "fleet.poll_interval: must be at most fleet.clear_timeout"),
    ("fleet.timeout", 2, "fleet.timeout: must be shorter than fleet.lease"),
    ("fleet.timeout", "1s", "fleet.timeout: must be a number of seconds"),
    ("fleet.node", "a b", "fleet.node: must be 1-64 letters, digits"),
    ("fleet.replicas", 17, "fleet.replicas: must be a whole number from 0 to 16"),
    ("fleet.replicas", -1, "fleet.replicas: must be a whole number from 0 to 16"),
    ("fleet.replicas", True, "fleet.replicas: must be a whole number from 0 to 16"),
    ("fleet.replicas", "1", "fleet.replicas: must be a whole number from 0 to 16"),
    ("fleet.replicas", 1, "fleet.replicas: needs fleet.url: the embedded Valkey has no replicas"),
    (
        "fleet.peers",
        1,
        "fleet.peers: unknown key (expected one of: advertise, clear_timeout, lease",
    ),
    ("api", "x", "api: must be a table"),
    ("edge.port", 1, "edge.port: unknown key (expected one of: "),
    ("edge.listen", None, "edge.listen: is required and must be a string such as"),
    ("edge.listen", 8080, "edge.listen: is required and must be a string"),
    ("edge.listen", "nowhere", "edge.listen: 'nowhere' must be HOST:PORT with a port from 0"),
    ("edge.listen", "h:65536", "edge.listen: 'h:65536' must be HOST:PORT"),
    ("edge.listen", ":80", "edge.listen: ':80' must be HOST:PORT"),
    ("edge.shutdown_timeout", 0, "edge.shutdown_timeout: must be a number of seconds greater"),
    ("edge.shutdown_timeout", True, "edge.shutdown_timeout: must be a number of seconds"),
    ("edge.header_timeout", 0, "edge.header_timeout: must be a number of seconds greater"),
    ("edge.keepalive_timeout", "1m", "edge.keepalive_timeout: must be a number of seconds"),
    ("edge.max_connections", 0, "edge.max_connections: must be a whole number from 1 to"),
    ("edge.max_connections", "lots", "edge.max_connections: must be a whole number from 1"),
    ("edge.max_connections", True, "edge.max_connections: must be a whole number from 1"),
    ("api.header_timeout", -1, "api.header_timeout: must be a number of seconds greater"),
    ("edge.via", "has space", "edge.via: must be 1-64 letters, digits, '.', '_' or '-'"),
    ("edge.via", 3, "edge.via: must be 1-64 letters"),
    ("api.listen", "127.0.0.1:8080", "api.listen: must differ from edge.listen"),
    ("api.max_body_bytes", "1 PB", "api.max_body_bytes: '1 PB' is not a size (use bytes"),
    ("api.max_body_bytes", 0, "api.max_body_bytes: must be greater than zero"),
    ("api.max_body_bytes", True, "api.max_body_bytes: must be a size such as 256MiB"),
    ("api.max_body_bytes", 1.5, "api.max_body_bytes: 1.5 is not a size"),
    ("api.auth_failures_allowed", 0, "api.auth_failures_allowed: must be a whole number"),
    ("api.auth_failures_allowed", 2.0, "api.auth_failures_allowed: must be a whole number"),
    ("api.auth_failure_window", -1, "api.auth_failure_window: must be a number of seconds"),
    ("api.body_timeout", 0, "api.body_timeout: must be a number of seconds greater than zero"),
    ("cache.max_bytes", None, "cache.max_bytes: is required"),
    ("cache.max_bytes", "lots", "cache.max_bytes: 'lots' is not a size"),
    ("cache.max_object_bytes", "2MiB", "cache.max_object_bytes: must not be larger than"),
    ("cache.name", "", "cache.name: must be 1-64 letters"),
    ("cache.purge_state_max_bytes", 0, "cache.purge_state_max_bytes: must be greater than zero"),
    ("cache.disk_path", "", "cache.disk_path: must be a non-empty string"),
    ("cache.disk_max_bytes", "1GiB", "cache.disk_max_bytes: needs cache.disk_path"),
    ("cache.lock_timeout", 5, "cache.lock_timeout: needs cache.disk_path"),
    ("state.path", None, "state.path: is required"),
    ("state.path", "", "state.path: must be a non-empty string"),
    ("state.path", 1, "state.path: must be a non-empty string"),
    ("state.audit_max_rows", -5, "state.audit_max_rows: must be a whole number greater"),
    ("domains", [], "domains: needs at least one [[domains]] table"),
    ("domains", {"name": "x"}, "domains: needs at least one [[domains]] table"),
    ("domains", ["x"], "domains[0]: must be a table"),
    ("domains.port", 1, "domains[0].port: unknown key (expected one of: backup_origins, balance,"),
    ("domains.compress", ["deflate"], "domains[0].compress: 'deflate' is not one of br, gzip"),
    ("domains.compress", "br", "domains[0].compress: must be a list of codings"),
    ("domains.compress_types", ["html"], "domains[0].compress_types: 'html' is not a media"),
    ("domains.compress_min_bytes", 0, "domains[0].compress_min_bytes: must be greater than"),
    ("domains.name", None, "domains[0].name: is required and must be a string"),
    ("domains.name", "a b", "domains[0].name: 'a b' is not a host name: "),
    ("domains.origin", None, "domains[0].origin: is required and must be a URL such as"),
    ("domains.origin", "ftp://x", "domains[0].origin: 'ftp://x' must start with http://"),
    ("domains.origin", "http://h:99999", "domains[0].origin: 'http://h:99999' has a bad port"),
    ("domains.origin", "http://:80", "domains[0].origin: 'http://:80' has no host"),
    ("domains.origin", "http://h/p", "must be scheme://host[:port] with no path or user"),
    ("domains.origin", "http://u@h", "must be scheme://host[:port] with no path or user"),
    ("domains.origin", "http://h?q", "must be scheme://host[:port] with no path or user"),
    ("domains.heuristic_freshness", 1, "domains[0].heuristic_freshness: must be true or false"),
    ("domains.connect_timeout", "5", "domains[0].connect_timeout: must be a number of seconds"),
    ("domains.read_timeout", 0, "domains[0].read_timeout: must be a number of seconds"),
    ("domains.stale_if_error", -1, "domains[0].stale_if_error: must be a number of seconds, 0"),
    ("edge.body_timeout", 0, "edge.body_timeout: must be a number of seconds greater than zero"),
    ("edge.request_buffer_bytes", "1 XB", "edge.request_buffer_bytes: '1 XB' is not a size"),
    ("edge.request_buffer_bytes", 0, "edge.request_buffer_bytes: must be greater than zero"),
    ("domains.origin_connections", 0, "domains[0].origin_connections: must be a whole number"),
    ("domains.origin_queue_timeout", -1, "domains[0].origin_queue_timeout: must be a number"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD, ids=[f"{p}={v!r}" for p, v, _ in BAD])
def test_a_bad_value_is_one_line_naming_the_key(
    tmp_path: Path, path: str, value: object, message: str
) -> None:
    data = base()
    _set(data, path, value)
    with pytest.raises(ConfigError) as raised:
        parse_config(data, base_dir=tmp_path)
    text = str(raised.value)
    assert message in text
    assert text.startswith(raised.value.key + ": ")
    assert "\n" not in text


def test_a_domain_configured_twice_is_refused(tmp_path: Path) -> None:
    data = base()
    data["domains"].append({"name": "EXAMPLE.com", "origin": "http://127.0.0.1:1"})
    with pytest.raises(ConfigError, match=r"domains\[1\].name: 'example.com' is configured twice"):
        parse_config(data, base_dir=tmp_path)


def test_two_listeners_on_port_0_may_share_a_host(tmp_path: Path) -> None:
    data = base()
    data["edge"]["listen"] = data["api"]["listen"] = "127.0.0.1:0"
    config = parse_config(data, base_dir=tmp_path)
    assert config.edge_role()[0].listen == config.api_role()[0].listen == Listen("127.0.0.1", 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "missing.toml: no such file"),
        (b"\xff\xfe", "cannot be read"),
        (b"[edge\n", "is not valid TOML"),
    ],
)
def test_a_file_that_cannot_be_read_is_one_line(
    tmp_path: Path, text: bytes | None, message: str
) -> None:
    path = tmp_path / "missing.toml"
    if text is not None:
        path.write_bytes(text)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_relative_state_paths_are_resolved_against_the_file(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "proxy.toml"
    path.write_text(
        '[edge]\nlisten = "127.0.0.1:0"\n[api]\nlisten = "127.0.0.1:0"\n'
        '[cache]\nmax_bytes = "1MiB"\n[state]\npath = "../var/state.db"\n'
        '[[domains]]\nname = "example.com"\norigin = "http://127.0.0.1:9"\n',
        encoding="utf-8",
    )
    assert load_config(path).api_role()[1].path == tmp_path / "etc" / ".." / "var" / "state.db"


def test_several_workers_make_a_fleet_on_an_embedded_valkey(tmp_path: Path) -> None:
    data = base()
    data["edge"]["workers"] = 3
    config = parse_config(data, base_dir=tmp_path)
    assert config.edge is not None and config.edge.workers == 3
    assert config.fleet is not None
    assert config.fleet.url is None  # the control process starts one beside the state db
    assert (config.fleet.lease, config.fleet.renew, config.fleet.clear_timeout) == (2.0, 0.5, 5.0)
    assert (config.fleet.poll_interval, config.fleet.timeout) == (0.05, 0.5)
    assert config.fleet.node  # the host name, made a token


def test_auto_workers_is_one_per_usable_core(tmp_path: Path) -> None:
    data = base()
    data["edge"]["workers"] = "auto"
    config = parse_config(data, base_dir=tmp_path)
    assert config.edge is not None
    assert config.edge.workers == len(os.sched_getaffinity(0))


def test_an_edge_only_node_needs_no_api_state_but_a_fleet_url(tmp_path: Path) -> None:
    """An edge node of a fleet: [edge], [cache], [[domains]] and [fleet]; its clears come
    from a control plane elsewhere, through the fleet's Valkey."""
    data = base()
    del data["api"], data["state"]
    data["fleet"] = {"url": "redis://10.0.0.5:6379/0", "node": "edge-2"}
    config = parse_config(data, base_dir=tmp_path)
    assert (config.api, config.state) == (None, None)
    assert config.fleet is not None and config.fleet.node == "edge-2"
    with pytest.raises(ConfigError, match="runs no control plane"):
        config.api_role()
    del data["fleet"]
    with pytest.raises(ConfigError, match=r"fleet\.url: is required on a node with only"):
        parse_config(data, base_dir=tmp_path)


def test_a_control_only_node_needs_no_cache(tmp_path: Path) -> None:
    data = base()
    del data["edge"], data["cache"]
    data["fleet"] = {"url": "unix:///run/valkey.sock"}
    config = parse_config(data, base_dir=tmp_path)
    assert (config.edge, config.cache) == (None, None)
    with pytest.raises(ConfigError, match="runs no edge"):
        config.edge_role()


def test_a_node_needs_a_role(tmp_path: Path) -> None:
    data = base()
    del data["edge"], data["api"]
    with pytest.raises(ConfigError, match="needs an \\[edge\\] table, an \\[api\\] table, or both"):
        parse_config(data, base_dir=tmp_path)


def test_fleet_settings_carry_every_fleet_key(tmp_path: Path) -> None:
    """Every [fleet] key reaches the protocol's settings (workers and control planes)."""
    data = base()
    data["edge"]["workers"] = 2
    data["fleet"] = {"lease": 3.0, "renew": 1.0, "clear_timeout": 4.0}
    data["fleet"] |= {"poll_interval": 0.2, "timeout": 0.25}
    config = parse_config(data, base_dir=tmp_path)
    assert config.fleet is not None
    settings = fleet_settings(config.fleet, "unix:///tmp/v.sock")
    assert (settings.lease, settings.renew, settings.clear_timeout) == (3.0, 1.0, 4.0)
    assert (settings.poll_interval, settings.timeout) == (0.2, 0.25)
    assert settings.replicas == 0  # a single Valkey: no WAIT


@pytest.mark.slow
def test_fleet_replicas_reach_the_settings(tmp_path: Path) -> None:
    """[fleet] replicas (0014 "Failover") with a Valkey of the operator's, which has them."""
    data = base()
    data["fleet"] = {"url": "redis://10.0.0.5:6379/0", "replicas": 2}
    config = parse_config(data, base_dir=tmp_path)
    assert config.fleet is not None and config.fleet.replicas == 2
    assert fleet_settings(config.fleet, "redis://10.0.0.5:6379/0").replicas == 2
