"""The origin keys of a [[domains]] table (decision 0034): origins, backup_origins, balance and
[domains.health_check], each checked with a one-line error naming the key."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from proxy.config.model import HealthCheckConfig, parse_config
from proxy.errors import ConfigError
from tests.test_config import base

A, B, C = "http://127.0.0.1:9001", "http://127.0.0.1:9002", "http://127.0.0.1:9003"


def domain(tmp_path: Path, **keys: Any) -> Any:
    data = base()
    data["domains"] = [{"name": "example.com", **keys}]
    return parse_config(data, base_dir=tmp_path).domains[0]


def test_origin_alone_is_one_origin_server(tmp_path: Path) -> None:
    d = domain(tmp_path, origin=A)
    assert (d.origin, d.origins, d.backup_origins, d.balance, d.health_check) == (
        A,
        (A,),
        (),
        "round_robin",
        None,
    )


def test_every_origin_key_can_be_set(tmp_path: Path) -> None:
    d = domain(
        tmp_path,
        origins=[A, B + "/"],
        backup_origins=[C],
        balance="hash",
        health_check={
            "path": "/healthz",
            "interval": "2s",
            "timeout": "500ms",
            "fails": 3,
            "passes": 4,
        },
    )
    assert (d.origin, d.origins, d.backup_origins, d.balance) == (A, (A, B), (C,), "hash")
    assert d.health_check == HealthCheckConfig("/healthz", 2.0, 0.5, 3, 4)
    defaults = domain(tmp_path, origins=[A], health_check={}).health_check
    assert defaults == HealthCheckConfig("/", 5.0, 2.0, 2, 2)
    assert domain(tmp_path, origin=A, health_check={"interval": 1, "timeout": 0.25}).health_check
    assert domain(tmp_path, origin=A, health_check={"interval": "1m"}).health_check.interval == 60


@pytest.mark.parametrize(("timeout", "effective"), [("2s", 2.0), ("5s", 2.0), ("1s", 1.0)])
def test_a_timeout_not_shorter_than_the_interval_is_clamped_to_it(
    tmp_path: Path, timeout: str, effective: float
) -> None:
    """Issue 34: ``timeout = interval`` was refused. As HAProxy does, a probe's timeout is
    at most the interval: a longer one is clamped to it (docs/operations.md)."""
    checked = domain(tmp_path, origin=A, health_check={"interval": "2s", "timeout": timeout})
    assert checked.health_check is not None
    assert (checked.health_check.interval, checked.health_check.timeout) == (2.0, effective)


def test_the_probe_method_is_get_by_default_or_head(tmp_path: Path) -> None:
    default = domain(tmp_path, origin=A, health_check={}).health_check
    assert default is not None and default.method == "GET"
    head = domain(tmp_path, origin=A, health_check={"method": "head"}).health_check
    assert head is not None and head.method == "HEAD"


BAD = [
    ({}, "domains[0].origin: is required and must be a URL such as"),
    ({"origin": A, "origins": [B]}, "domains[0].origins: give either origin or origins, not both"),
    ({"origins": []}, "domains[0].origins: must be a non-empty list such as"),
    ({"origins": A}, "domains[0].origins: must be a non-empty list such as"),
    ({"origins": [A, "ftp://x"]}, "domains[0].origins[1]: 'ftp://x' must start with http://"),
    ({"origins": [A, A + "/"]}, "domains[0].origins: names an origin server twice"),
    ({"origins": [A], "backup_origins": [A]}, "domains[0].backup_origins: names a server also"),
    ({"origin": A, "backup_origins": [3]}, "domains[0].backup_origins[0]: is required and must"),
    ({"origin": A, "balance": "random"}, "domains[0].balance: must be one of: round_robin, least_"),
    ({"origin": A, "health_check": 1}, "domains[0].health_check: must be a table"),
    ({"origin": A, "health_check": {"path": "x"}}, "domains[0].health_check.path: must be a path"),
    ({"origin": A, "health_check": {"path": "/a b"}}, "domains[0].health_check.path: must be"),
    (
        {"origin": A, "health_check": {"interval": "2 days"}},
        "health_check.interval: '2 days' is not",
    ),
    ({"origin": A, "health_check": {"interval": "0s"}}, "health_check.interval: '0s' is not a dur"),
    ({"origin": A, "health_check": {"interval": -1}}, "health_check.interval: must be a number of"),
    (
        {"origin": A, "health_check": {"method": "POST"}},
        "domains[0].health_check.method: must be GET or HEAD",
    ),
    ({"origin": A, "health_check": {"fails": 0}}, "domains[0].health_check.fails: must be a whole"),
    ({"origin": A, "health_check": {"passes": 1.5}}, "health_check.passes: must be a whole number"),
    ({"origin": A, "health_check": {"every": 1}}, "health_check.every: unknown key (expected one"),
    (
        {"origins": [A, "https://h"], "origin_ca": "ca.pem"},
        "domains[0].origin_ca: needs every origin server to be https://",
    ),
]


@pytest.mark.parametrize(("keys", "message"), BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_a_bad_origin_key_is_one_line_naming_it(
    tmp_path: Path, keys: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        domain(tmp_path, **keys)
    text = str(raised.value)
    assert message in text
    assert "\n" not in text


@pytest.mark.slow
def test_the_operations_pages_example_loads(tmp_path: Path) -> None:
    page = (Path(__file__).parent.parent / "docs" / "operations.md").read_text(encoding="utf-8")
    section = page.split("## Several origin servers", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    data = base()
    data["domains"] = [tomllib.loads(example)["domains"][0]]
    d = parse_config(data, base_dir=tmp_path).domains[0]
    assert len(d.origins) == 2 and len(d.backup_origins) == 1
    assert d.health_check == HealthCheckConfig("/healthz", 2.0, 1.0, 2, 2)
