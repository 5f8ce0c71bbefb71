"""Settings dataclasses built from config sections by field name (proxy/config/settings.py):
every field is mapped, and a field nobody provides is an error, not a silent default."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proxy.config.model import parse_config
from proxy.config.settings import settings_of
from proxy.edge.h2.limits import H2Limits
from proxy.fleet.settings import FleetSettings
from proxy.process.worker import fleet_settings


@dataclass(frozen=True, slots=True)
class Section:
    limit: int = 1
    net_timeout: float = 2.0
    name: str = "a"


@dataclass(frozen=True, slots=True)
class Wanted:
    limit: int = 10
    timeout: float = 20.0
    hints: bool = True


def test_fields_are_taken_by_name_prefix_given_or_kept() -> None:
    section = Section(limit=7, net_timeout=3.5)
    built = settings_of(Wanted, section, timeout=section.net_timeout, keep=("hints",))
    assert built == Wanted(limit=7, timeout=3.5, hints=True)
    assert settings_of(Wanted, Section(), limit=4, timeout=1.0, hints=False) == Wanted(
        4, 1.0, False
    )


def test_a_prefix_names_the_section_keys() -> None:
    @dataclass(frozen=True, slots=True)
    class Net:
        timeout: float

    assert settings_of(Net, Section(net_timeout=9.0), prefix="net_") == Net(timeout=9.0)


def test_a_field_nobody_provides_is_named() -> None:
    with pytest.raises(TypeError, match=r"Wanted\.timeout: Section has no timeout"):
        settings_of(Wanted, Section(), keep=("hints",))
    with pytest.raises(TypeError, match=r"Wanted\.hints: Section has no net_hints"):
        settings_of(Wanted, Section(), prefix="net_", limit=1, timeout=1.0)


def test_keeping_a_field_that_does_not_exist_is_refused() -> None:
    with pytest.raises(TypeError, match="Wanted has no field margin to keep"):
        settings_of(Wanted, Section(), timeout=1.0, keep=("hints", "margin"))


def _config(tmp_path: Path, edge: dict[str, Any], fleet: dict[str, Any] | None = None) -> Any:
    data: dict[str, Any] = {
        "edge": {"listen": "127.0.0.1:8080", "workers": 2} | edge,
        "api": {"listen": "127.0.0.1:8081"},
        "cache": {"max_bytes": "1MiB"},
        "state": {"path": "state.db"},
        "domains": [{"name": "example.com", "origin": "http://127.0.0.1:9000"}],
    }
    if fleet is not None:
        data["fleet"] = fleet
    return parse_config(data, base_dir=tmp_path)


def _all_differ(built: object, default: object) -> list[str]:
    """The fields of ``built`` that still hold ``default``'s value."""
    return [
        f.name
        for f in dataclasses.fields(built)  # type: ignore[arg-type]
        if getattr(built, f.name) == getattr(default, f.name)
    ]


def test_h2_limits_carry_every_http2_key_and_the_edge_timeouts(tmp_path: Path) -> None:
    edge = {
        "http2_max_concurrent_streams": 7,
        "http2_max_header_list_bytes": 3000,
        "http2_max_requests": 11,
        "http2_reset_budget": 13,
        "http2_control_frames_per_second": 17,
        "http2_control_frame_burst": 19,
        "send_timeout": 2.5,
        "keepalive_timeout": 3.5,
        "header_timeout": 4.5,
    }
    limits = H2Limits.of(_config(tmp_path, edge).edge)
    assert _all_differ(limits, H2Limits()) == []  # every field came from the config
    assert limits == H2Limits(7, 3000, 11, 13, 17, 19, 2.5, 3.5, 4.5)


@pytest.mark.slow
def test_fleet_settings_carry_every_key_and_keep_the_test_only_ones(tmp_path: Path) -> None:
    fleet: dict[str, Any] = {"lease": 3.0, "renew": 1.0, "clear_timeout": 4.0, "poll_interval": 0.2}
    fleet |= {"timeout": 0.25, "replicas": 2, "url": "redis://127.0.0.1:1/0", "peer_fill": True}
    config = _config(tmp_path, {}, fleet)
    settings = fleet_settings(config.fleet, "unix:///tmp/v.sock")
    default = FleetSettings(url="redis://127.0.0.1:2/0")
    # margin and hints are not config keys: they stay at their defaults.
    assert _all_differ(settings, default) == ["margin", "hints"]
    assert settings == FleetSettings(
        "unix:///tmp/v.sock", 3.0, 1.0, 4.0, 0.2, 0.25, None, True, 2, True
    )
