"""``[fleet] peer_fill``, ``advertise`` and ``peer_timeout`` (decision 0047): their defaults
leave a fleet as it was, and what they take."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.config.model import parse_config
from proxy.errors import ConfigError
from proxy.process.worker import fleet_settings


def fleet_config(**fleet: Any) -> dict[str, Any]:
    return {
        "edge": {"listen": "127.0.0.1:8080"},
        "cache": {"max_bytes": "1MiB"},
        "domains": [{"name": "example.com", "origin": "http://127.0.0.1:9000"}],
        "fleet": {"url": "redis://127.0.0.1:6379/0", "node": "edge-1", **fleet},
    }


def test_peer_fills_are_off_by_default(tmp_path: Path) -> None:
    config = parse_config(fleet_config(), base_dir=tmp_path)
    assert config.fleet is not None
    assert (config.fleet.peer_fill, config.fleet.advertise, config.fleet.peer_timeout) == (
        False,
        "",
        0.3,
    )
    assert fleet_settings(config.fleet, "redis://127.0.0.1:6379/0").peer_fill is False


def test_peer_fill_reaches_the_members_settings(tmp_path: Path) -> None:
    data = fleet_config(peer_fill=True, advertise="http://10.0.0.11:8080", peer_timeout=0.5)
    config = parse_config(data, base_dir=tmp_path)
    assert config.fleet is not None
    assert config.fleet.advertise == "http://10.0.0.11:8080"
    assert config.fleet.peer_timeout == 0.5
    assert fleet_settings(config.fleet, "redis://127.0.0.1:6379/0").peer_fill is True


@pytest.mark.parametrize(
    ("fleet", "says"),
    [
        ({"advertise": "https://10.0.0.11:8443"}, "http://"),
        ({"advertise": "http://10.0.0.11:8080/path"}, "no path"),
        ({"advertise": "10.0.0.11:8080"}, "http://"),
        ({"peer_timeout": 0}, "greater than zero"),
        ({"peer_fill": "yes"}, "true or false"),
    ],
)
def test_bad_peer_keys_are_refused(tmp_path: Path, fleet: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_config(fleet_config(**fleet), base_dir=tmp_path)


def test_peer_fill_on_a_wildcard_listener_needs_an_advertise_address(tmp_path: Path) -> None:
    data = fleet_config(peer_fill=True)
    data["edge"]["listen"] = "0.0.0.0:8080"
    with pytest.raises(ConfigError, match=r"fleet\.advertise"):
        parse_config(data, base_dir=tmp_path)
    data["fleet"]["advertise"] = "http://10.0.0.11:8080"
    assert parse_config(data, base_dir=tmp_path).fleet is not None
